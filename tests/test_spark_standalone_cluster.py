"""The pipeline on a real Spark standalone cluster: a master and a worker started from the
pyspark package on loopback, `disque-stats-ingest --master spark://127.0.0.1:<port>` run as
a user would, and the same exact totals as the local test (test_spark_pipeline)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import test_spark_pipeline as base  # noqa: E402  (the scripted log and its expected totals)
from support.ports import lease_port  # noqa: E402
from support.waits import wait_until  # noqa: E402

from disque_spark.testing import (NODE_A, NODE_B, TEST_DAEMON_JAVA_OPTS, pyspark_available,  # noqa: E402,F401
                                  spark_session, submit_conf_args)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def spark_class() -> str:
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _start(args, log: Path, env) -> subprocess.Popen:
    # its own session: the daemon and what it forks (executors) can be ended as one group
    return subprocess.Popen([spark_class()] + args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _stop(p: subprocess.Popen):
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
    except ProcessLookupError:
        pass


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture()
def standalone(tmp_path):
    reason = pyspark_available()
    if reason:
        pytest.skip(reason)
    leases = [lease_port() for _ in range(4)]
    master_port, master_ui, worker_port, worker_ui = (x.port for x in leases)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable,
               SPARK_DAEMON_MEMORY="256m", SPARK_NO_DAEMONIZE="1",
               SPARK_DAEMON_JAVA_OPTS=TEST_DAEMON_JAVA_OPTS)
    procs = []
    try:
        procs.append(_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(master_port), "--webui-port", str(master_ui)],
                            tmp_path / "master.log", env))
        url = f"spark://127.0.0.1:{master_port}"
        procs.append(_start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                             "--port", str(worker_port), "--webui-port", str(worker_ui),
                             "--cores", "1", "--memory", "768m", url], tmp_path / "worker.log", env))
        wait_until(lambda: _alive_workers(master_ui) == 1 or any(p.poll() is not None for p in procs),
                   timeout=90, interval=0.5)
        if _alive_workers(master_ui) != 1:
            logs = "\n".join((tmp_path / f"{n}.log").read_text()[-2000:] for n in ("master", "worker"))
            pytest.fail("the standalone cluster did not come up:\n" + logs)
        yield url, env
    finally:
        for p in reversed(procs):
            _stop(p)
        for x in leases:
            x.release()


def test_pipeline_on_a_standalone_cluster(standalone, tmp_path, spark_session):  # noqa: F811
    url, env = standalone
    inp = base.make_input(tmp_path / "in")
    out = tmp_path / "out"
    exe = Path(sys.executable).with_name("disque-stats-ingest")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "disque_spark.ingest"]
    p = subprocess.run(cmd + ["--master", url, "--input", str(inp), "--output", str(out), "--json",
                              str(tmp_path / "res.json"), "-q",
                              "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
                              "--conf", "spark.sql.shuffle.partitions=4"] + submit_conf_args(),
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
    res = json.loads((tmp_path / "res.json").read_text())
    assert res["master"] == url
    assert res["rows_read"] == 4 * base.N + len(base.BAD_LINES) and res["bad_lines"] == len(base.BAD_LINES)
    assert (res["nodes"], res["workers"], res["restarts"]) == (2, 4, 1)
    s = {r["node"]: r for r in spark_session.read.parquet(str(out / "summary")).collect()}
    ea = base.expected_commands(NODE_A, 0) + base.expected_commands(NODE_A, 1)
    eb = base.expected_commands(NODE_B, 0) + base.expected_commands(NODE_B, 1)
    assert s[NODE_A]["commands"] == ea and s[NODE_B]["commands"] == eb and s["TOTAL"]["commands"] == ea + eb
    assert s[NODE_A]["added"] == 30 * 69 and s["TOTAL"]["samples"] == 4 * base.N
    assert s[NODE_A]["avg_commands_per_s"] == pytest.approx(84.0)
    assert (out / "report" / "index.html").exists()
