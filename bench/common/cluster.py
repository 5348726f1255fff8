"""The pieces of the cluster benchmarks (bench_cluster, bench_bus_secret, bench_client,
bench_frameworks): server processes, ports, a cluster of our nodes joined with CLUSTER MEET,
and redis-benchmark's CSV figures."""
from __future__ import annotations

import csv
import functools
import io
import os
import statistics
import subprocess
import time

import redis

from common.report import log as _log
from disque.harness import disque_argv, server_command
from disque.harness import Node, join, lease_port

BODY = "x" * 100
log = functools.partial(_log, width=6)
_LEASES = []        # the ports handed out stay locked until the script exits


def free_port():
    """A port below 32768 whose bus port (+10000) is free too, locked for this run."""
    lease = lease_port()
    _LEASES.append(lease)
    return lease.port


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


class Proc(Node):
    """A server process, started at once, its output in `cwd`/server.log; stopped by PID."""

    def __init__(self, argv, cwd, env=None, port=None):
        super().__init__(argv, port=port, cwd=cwd, env=env,
                         log_path=os.path.join(cwd, "server.log"))
        self.spawn()

    @property
    def p(self):
        return self.proc


def start_cluster(n, workers, tmp, extra=lambda i: [], name="node"):
    """n nodes joined by CLUSTER MEET; `extra(i)` adds arguments to node i's command line.
    Returns [(port, Proc)] and a redis-py client of each."""
    nodes = []
    for i in range(n):
        port = free_port()
        d = os.path.join(tmp, "%s%d" % (name, i))
        os.makedirs(d)
        nodes.append((port, Proc(disque_argv(port, workers, *extra(i), command=server_command()),
                                 d, port=port)))
    for _, proc in nodes:
        proc.wait_ready(30)
    if not join([proc for _, proc in nodes], 30):
        raise RuntimeError("timed out waiting for cluster mesh (%s)" % name)
    return nodes, [redis.Redis(port=p, protocol=2) for p, _ in nodes]


def start_joined(count, node_of, workdir, label, into, timeout=30):
    """`count` nodes, each in a directory of its own under `workdir`: `node_of(i, directory)`
    gives (argv, port, host). They are appended to `into` (the caller stops every node
    there, after an error too), started, and joined with CLUSTER MEET."""
    for i in range(count):
        d = os.path.join(workdir, "%s-n%d" % (label, i))
        os.makedirs(d)
        argv, port, host = node_of(i, d)
        into.append(Node(argv, port=port, host=host, cwd=d,
                         log_path=os.path.join(d, "server.log")))
    for node in into:
        node.spawn()
    for node in into:
        node.wait_ready(timeout)
    if not join(into, timeout):
        raise RuntimeError("the nodes did not form a cluster")


def wait_job_links(clients, workers, deadline):
    """Our nodes' direct job links all up: every worker to every worker of the other nodes
    (redis-py clients of the nodes). The original has none to wait for."""
    want = (len(clients) - 1) * workers * workers
    for c in clients:
        while True:
            fields = c.execute_command("INFO", "cluster")      # redis-py parses INFO
            if fields.get("cluster_job_links", "bus") != "direct":
                break                   # the original, or links off
            if int(fields.get("cluster_job_links_up", 0)) >= want:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the direct job links did not come up")
            time.sleep(0.05)


def redis_benchmark(port, n, clients, cmd):
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
            "-n", str(n), "--csv"] + cmd
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
    rows = [ln for ln in out.splitlines() if ln.startswith('"')]
    row = list(csv.DictReader(io.StringIO("\n".join(rows))))[-1]
    return {"rps": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"])}


def medians(runs, fields=("rps", "p50_ms", "p99_ms", "cpu_us_per_job")):
    """{setup: {field: median over its rounds}} of redis_benchmark results per setup."""
    return {name: {k: statistics.median(x[k] for x in rs) for k in fields}
            for name, rs in runs.items()}
