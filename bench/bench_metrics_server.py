#!/usr/bin/env python3
"""The metrics port's HTTP server on its own (docs/metrics.md, "How it works"): one keep-alive
client GETs a path in a loop for --seconds; prints requests per second and the front-end's
CPU per request. `--other PYTHONPATH` runs the same against another checkout (for example
main before a change, from a worktree), rounds alternating, so both see the same machine.

    python bench/bench_metrics_server.py --path /api/cluster --rounds 3
    python bench/bench_metrics_server.py --other /tmp/before --path /metrics
"""
import argparse
import http.client
import os
import statistics
import tempfile
import time

import psutil

from disque.harness.node import Node, disque_argv
from disque.harness.ports import lease_port


def one_round(pythonpath, path, seconds, workers):
    lease, mlease = lease_port(), lease_port()
    workdir = tempfile.mkdtemp(prefix="bench-http-")
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    node = Node(disque_argv(lease.port, workers, "--dir", workdir, "--metrics-port", mlease.port),
                port=lease.port, cwd=workdir, log_path=os.path.join(workdir, "node.log"), env=env)
    node.start(children=workers)
    try:
        front = psutil.Process(node.pid)
        conn = http.client.HTTPConnection("127.0.0.1", mlease.port, timeout=10)
        for _ in range(20):                     # warm up: connections, first renders
            conn.request("GET", path)
            conn.getresponse().read()
        cpu0 = sum(front.cpu_times()[:2])
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < seconds:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
            n += 1
        wall = time.perf_counter() - t0
        cpu = sum(front.cpu_times()[:2]) - cpu0
        conn.close()
        return n / wall, cpu / n * 1e6
    finally:
        node.stop()
        lease.release()
        mlease.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", default="/api/cluster")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--other", default=None, help="PYTHONPATH of another checkout to compare")
    opts = ap.parse_args()
    sides = [("this", None)] + ([("other", opts.other)] if opts.other else [])
    results = {name: [] for name, _ in sides}
    for r in range(opts.rounds):
        for name, pythonpath in sides:
            rate, us = one_round(pythonpath, opts.path, opts.seconds, opts.workers)
            results[name].append((rate, us))
            print("round %d %-5s %s: %7.0f requests/s, front-end CPU %6.1f us per request"
                  % (r + 1, name, opts.path, rate, us), flush=True)
    for name, got in results.items():
        rates = [g[0] for g in got]
        cpus = [g[1] for g in got]
        print("%-5s %s: median %.0f requests/s (%.0f-%.0f), CPU %.1f us per request (%.1f-%.1f)"
              % (name, opts.path, statistics.median(rates), min(rates), max(rates),
                 statistics.median(cpus), min(cpus), max(cpus)))


if __name__ == "__main__":
    main()
