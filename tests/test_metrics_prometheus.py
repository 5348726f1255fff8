"""A real Prometheus server (Debian's /usr/bin/prometheus) scrapes a node's metrics port
every second; its query API returns the rate the test produced."""
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

from support.ports import lease_port
from support.server import REPO_ROOT
from support.waits import wait_until
from metrics_helpers import metrics_node  # noqa: F401

pytestmark = [pytest.mark.server, pytest.mark.slow]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
RATE = 100          # jobs per second the producer adds


def query(port, expr):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": expr}))
    with urllib.request.urlopen(url, timeout=5) as resp:
        data = json.load(resp)
    assert data["status"] == "success", data
    return data["data"]["result"]


def value(port, expr):
    result = query(port, expr)
    return float(result[0]["value"][1]) if result else None


def check_grafana_dashboard(port):
    """Every query of conf/grafana-disque.json runs on the real Prometheus; the main panels
    have data."""
    dash = json.loads((REPO_ROOT / "conf" / "grafana-disque.json").read_text())
    results = {}
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$node", ".*").replace("$__rate_interval", "4s")
            results[(panel["title"], target["refId"])] = query(port, expr)   # asserts success
    for title in ("Throughput (jobs/s)", "Backlog (queued jobs)", "Command latency percentiles",
                  "Per-worker skew (max / mean commands/s)", "Top queues by length"):
        assert results[(title, "A")], title


@pytest.mark.skipif(not shutil.which("prometheus") and not __import__("os").path.exists(PROMETHEUS),
                    reason="the prometheus package is not installed")
def test_prometheus_scrapes_the_node_and_computes_the_rate(metrics_node, tmp_path):
    srv, mport = metrics_node(workers=2)
    lease = lease_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: disque\n    static_configs:\n"
        "      - targets: ['127.0.0.1:%d']\n" % mport)
    prom = subprocess.Popen(
        [PROMETHEUS, "--config.file", str(tmp_path / "prometheus.yml"),
         "--storage.tsdb.path", str(tmp_path / "tsdb"),
         "--web.listen-address", "127.0.0.1:%d" % lease.port, "--log.level", "warn"],
        stdin=subprocess.DEVNULL, stdout=open(tmp_path / "prom.log", "wb"), stderr=subprocess.STDOUT)
    stop = threading.Event()
    try:
        def up():
            try:
                return value(lease.port, 'up{job="disque"}') == 1
            except OSError:
                return False
        wait_until(up, timeout=20, interval=0.2, message="prometheus did not scrape the node")

        added = [0]

        def produce():
            r = srv.client()
            t0 = time.monotonic()
            while not stop.is_set():
                r.execute_command("ADDJOB", "promq", b"x", 0)
                added[0] += 1
                wait = t0 + added[0] / RATE - time.monotonic()
                if wait > 0:
                    time.sleep(wait)

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            rate = 'sum(rate(disque_jobs_added_total[4s]))'
            # at least 4 scrapes under load, then the rate is the producer's
            scrapes = 'count_over_time(disque_jobs_added_total{worker="0"}[5s])'
            wait_until(lambda: (value(lease.port, scrapes) or 0) >= 5 and added[0] > 5 * RATE,
                       timeout=20, interval=0.25)
            got = value(lease.port, rate)
        finally:
            stop.set()
            producer.join()
        assert got is not None and 0.7 * RATE <= got <= 1.3 * RATE, got
        wait_until(lambda: value(lease.port, "sum(disque_jobs_added_total)") == added[0],
                   timeout=10, interval=0.25, message="the last scrape did not count every job")
        assert value(lease.port, 'sum(disque_queue_length{queue="promq"})') == added[0]
        q = value(lease.port, "histogram_quantile(0.99, sum by (le) "
                              "(rate(disque_command_duration_seconds_bucket[5s])))")
        assert q is not None and 0 < q < 1
        check_grafana_dashboard(lease.port)
    finally:
        stop.set()
        prom.terminate()
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        lease.release()
