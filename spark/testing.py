"""Helpers for tests: one SparkSession per test session, and scripted synthetic stats logs.

Use the fixture from a test module with::

    from disque_spark.testing import spark_session  # noqa: F401  (session-scoped fixture)

``spark_session`` is session scoped and built with ``getOrCreate``, so several modules
importing it share the one SparkSession (``local[2]``, UI off, loopback, this interpreter).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

NODE_A = "a" * 40
NODE_B = "b" * 40
T0 = 1795239600.0          # 2026-11-21 (UTC), a whole second
LAT_BOUNDS = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]


def pyspark_available() -> str | None:
    """None when pyspark and java are usable, else the reason to skip."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark not installed (pip install -e '.[spark]')"
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        return "java not found (Spark needs Java 17)"
    return None


_SESSION = None

# The tests' inputs are a few hundred lines, so generating and compiling Java for each query
# plan (Janino, then the JVM's C2 compiler) is most of their CPU. Spark's interpreted
# expressions and the JVM's quick compiler alone give the same rows for about half the CPU
# (measured on one ingest of the scripted log: 48 -> 26 CPU-s in a fresh JVM).
TEST_EXECUTION_CONF = {"spark.sql.codegen.wholeStage": "false",
                       "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                       "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
                       "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
TEST_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1"     # a standalone master's and worker's JVMs


def submit_conf_args() -> list[str]:
    """TEST_EXECUTION_CONF as spark-submit's ``--conf k=v`` arguments."""
    return [arg for k, v in TEST_EXECUTION_CONF.items() for arg in ("--conf", f"{k}={v}")]


def get_test_session():
    global _SESSION
    if _SESSION is None:
        from disque_spark.session import make_session
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        _SESSION = make_session(master="local[2]", app_name="disque-spark-tests", driver_memory="1g",
                                conf={"spark.sql.shuffle.partitions": "4",
                                      "spark.default.parallelism": "2",
                                      "spark.sql.streaming.pollingDelay": "100ms",
                                      **TEST_EXECUTION_CONF})
    return _SESSION


@pytest.fixture(scope="session")
def spark_session():
    reason = pyspark_available()
    if reason:
        pytest.skip(reason)
    spark = get_test_session()
    yield spark
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None


# ---------------------------------------------------------------------------
# scripted synthetic logs
# ---------------------------------------------------------------------------

def record(node, worker, ts, uptime, pid, t, *, addr="127.0.0.1:7711", cmd_rates=None, job_rates=None,
           queues=(), lat_per_s=None, bus_rates=None, rss=20_000_000, cpu_per_s=0.25, gauges=None):
    """One schema-v1 record whose monotonic counters are ``rate * t`` (t = seconds of activity)."""
    cmd_rates = cmd_rates or {}
    job_rates = job_rates or {}
    bus_rates = bus_rates or {"in": {}, "out": {}}
    lat = [int(c * t) for c in (lat_per_s or [0] * (len(LAT_BOUNDS) + 1))]
    return {
        "v": 1, "ts": ts, "node": node, "addr": addr, "worker": worker, "pid": pid, "uptime_s": uptime,
        "commands": {k: int(r * t) for k, r in cmd_rates.items()},
        "jobs": {k: int(job_rates.get(k, 0) * t) for k in
                 ("added", "delivered", "acked", "nacked", "requeued", "expired", "deleted")},
        "gauges": gauges or {"jobs": 3, "queued": 1, "active": 2, "queues": len(queues), "blocked": 0},
        "top_queues": [dict(q) for q in queues],
        "bus": {d: {k: int(r * t) for k, r in bus_rates[d].items()} for d in ("in", "out")},
        "rss": rss, "cpu_user": round(cpu_per_s * t * 0.8, 3), "cpu_sys": round(cpu_per_s * t * 0.2, 3),
        "latency_us": {"bounds": LAT_BOUNDS, "counts": lat},
    }


def dumps(rec) -> str:
    return json.dumps(rec, separators=(",", ":"))


def worker_stats_of(rec) -> dict:
    """The worker stats dict (what the server's producer gets) behind a v1 record."""
    w = {"index": rec["worker"], "pid": rec["pid"], "uptime_s": rec["uptime_s"],
         "commands": rec["commands"], **rec["jobs"], **rec["gauges"],
         "top_queues": rec["top_queues"], "bus_in": rec["bus"]["in"], "bus_out": rec["bus"]["out"],
         "rss": rec["rss"], "cpu_user": rec["cpu_user"], "cpu_sys": rec["cpu_sys"],
         "latency_counts": rec["latency_us"]["counts"]}
    assert rec["latency_us"]["bounds"] == LAT_BOUNDS
    return w


def to_v2(rec) -> dict:
    """The same sample as a schema-v2 record, written by the server's own producer."""
    from disque import statslog
    return statslog.line(rec["ts"], rec["node"], rec["addr"], worker_stats_of(rec))
