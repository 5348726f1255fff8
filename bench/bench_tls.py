#!/usr/bin/env python3
"""What TLS costs on the client port (issue 34; docs/benchmarks.md "TLS"), in one run:
redis-benchmark ADDJOB with 50 connections, unpipelined and -P 16, over TLS and over
plaintext on our node (--workers 2), and the same loads as LPUSH on Debian's redis-server 7
with TLS, the anchor for what TLS costs a server written in C around OpenSSL. Then, unless
--no-cluster, bench/bench_secured_links.py: 3-node ADDJOB REPLICATE 3 on a secured cluster
(TLS job links) against an open one.

Each server listens on both ports at once; rounds alternate the servers and, within a server,
which transport runs first, and every load starts from an empty queue (the loads flush). The
figures are medians over the rounds: jobs/s, server CPU per job (every process of the
server), the TLS/plaintext ratio of each server, and ours relative to Redis' (the target:
TLS costs ours no more, relatively, than it costs Redis).

    python bench/bench_tls.py                      # 3 rounds, then the cluster comparison
    python bench/bench_tls.py --quick --no-cluster # a smoke run
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from common.loads import run_redis_benchmark
from common.machine import check_machine_quiet
from common.options import parse_args
from common.report import log
from common.servers import cleanup_all, new_server
from disque.harness.certs import Certs
from disque.harness.ports import lease_port

LOADS = (("c50", 1), ("c50 -P16", 16))
TRANSPORTS = ("plain", "tls")


def tls_server(args, kind, label, certs, workers):
    """A server of `kind` with its plaintext port and a TLS port (leased too)."""
    lease = lease_port()
    tls = ["--tls-port", str(lease.port), "--tls-cert-file", certs.path("server.crt"),
           "--tls-key-file", certs.path("server.key"), "--tls-ca-cert-file",
           certs.path("ca.crt")]
    srv = new_server(args, kind, label, workers=workers, extra=tls)
    srv.tls_lease = lease
    srv.start(args.start_timeout)
    return srv


def measure(args, srv, certs, transport, pipeline):
    n = args.n_pipe if pipeline > 1 else args.n_plain
    tls = (srv.tls_lease.port, certs.cli_args()) if transport == "tls" else None
    return run_redis_benchmark(args, srv, n, pipeline, tls=tls)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-cluster", action="store_true",
                    help="skip the secured/open cluster comparison (bench_secured_links.py)")
    mine = ap.parse_args(argv)
    args = parse_args(["--quick"] if mine.quick else [])
    args.logdir = tempfile.mkdtemp(prefix="disque-bench-tls-")
    certs = Certs(os.path.join(args.logdir, "certs"))
    servers = (("ours", "disque", "ours(w=%d)" % mine.workers, mine.workers),
               ("redis", "redis", "redis-server", 0))
    runs = {(s, load, t): [] for s, *_ in servers for load, _ in LOADS for t in TRANSPORTS}
    check_machine_quiet()
    try:
        started = {key: tls_server(args, kind, label, certs, w)
                   for key, kind, label, w in servers}
        for r in range(mine.rounds):
            for key, srv in started.items():
                for load, pipeline in LOADS:
                    order = TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]
                    for t in order:
                        res = measure(args, srv, certs, t, pipeline)
                        runs[(key, load, t)].append(res)
                        log("round %d %-6s %-9s %-5s %10.0f jobs/s %7.2f us CPU/job"
                            % (r + 1, key, load, t, res["rps"], res["cpu_us_per_job"]))
    finally:
        cleanup_all()
        shutil.rmtree(args.logdir, ignore_errors=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in ("rps", "cpu_us_per_job")}
           for k, v in runs.items()}
    print()
    print("redis-benchmark, 50 connections, %d rounds (medians); ours --workers %d: ADDJOB, "
          "redis-server %s: LPUSH" % (mine.rounds, mine.workers, redis_version(args)))
    print("%-6s %-9s %12s %12s %8s %11s %11s %8s" % (
        "server", "load", "plain/s", "TLS/s", "TLS/pl", "plain us", "TLS us", "CPU x"))
    ratios = {}
    for key, *_ in servers:
        for load, _ in LOADS:
            p, t = med[(key, "%s" % load, "plain")], med[(key, load, "tls")]
            ratios[(key, load)] = t["rps"] / p["rps"]
            print("%-6s %-9s %12.0f %12.0f %7.2fx %11.2f %11.2f %7.2fx" % (
                key, load, p["rps"], t["rps"], t["rps"] / p["rps"], p["cpu_us_per_job"],
                t["cpu_us_per_job"], t["cpu_us_per_job"] / p["cpu_us_per_job"]))
    print()
    for load, _ in LOADS:
        rel = ratios[("ours", load)] / ratios[("redis", load)]
        print("%-9s TLS keeps %.0f%% of ours' throughput, %.0f%% of Redis': ours/Redis %.2f "
              "(target >= 1.00)" % (load, 100 * ratios[("ours", load)],
                                    100 * ratios[("redis", load)], rel))
    if not mine.no_cluster:
        print()
        here = os.path.dirname(os.path.abspath(__file__))
        cmd = [sys.executable, os.path.join(here, "bench_secured_links.py")]
        if mine.quick:
            cmd += ["--rounds", "1", "-n", "10000"]
        return subprocess.call(cmd)
    return 0


def redis_version(args):
    try:
        out = subprocess.run([args.redis_server, "--version"], capture_output=True, text=True)
        return out.stdout.split("v=")[1].split()[0]
    except (OSError, IndexError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
