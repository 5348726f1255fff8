#!/usr/bin/env python3
"""A replicated ADDJOB from a cluster's first second (issue 46): ours against the original.

Per round and per setup (ours `--workers 1`, ours `--workers 2`, the original), three fresh
nodes are started and joined with CLUSTER MEET. The clock starts when the first
`ADDJOB q <body> 0 REPLICATE 3` on node 0 is acknowledged; from then on redis-benchmark runs
--runs successive runs of --jobs ADDJOBs at 1 connection, back to back, and prints each run's
jobs/s, p50 and p99, and the context switches of every process of the three nodes per job.
After a --settle pause, the same at 1, 4 and 50 connections gives the settled rate.
Setups alternate within a round, so each sees the same machine.

    python bench/bench_first_second.py --disque-binary <original>/src/disque-server
    python bench/bench_first_second.py --rounds 1 --runs 4 --settled-clients 1   # quick
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import psutil
import redis

from common.cluster import redis_benchmark
from common.options import parse_args as single_node_args
from common.report import BenchError, log
from common.servers import cleanup_all, new_server
from disque.harness import join

NODES = 3


def node_switches(servers) -> int:
    """Voluntary + involuntary context switches of every process (threads included)."""
    total = 0
    for srv in servers:
        for p in srv.procs():
            try:
                c = p.num_ctx_switches()
                total += c.voluntary + c.involuntary
                for t in p.threads():
                    if t.id != p.pid:
                        total += sum(psutil.Process(t.id).num_ctx_switches())
            except psutil.Error:
                pass
    return total


def node_cpu(servers) -> tuple[float, float]:
    """User and system CPU seconds of every process of `servers` (threads included)."""
    user = system = 0.0
    for srv in servers:
        for p in srv.procs():
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            user += t.user
            system += t.system
    return user, system


def cpu_per_job(before, after, jobs) -> list[float]:
    """[user, system] µs per job between two node_cpu readings."""
    return [round((b - a) / jobs * 1e6, 1) for a, b in zip(before, after)]


def first_ack(client, body, deadline) -> float:
    """Retry the first replicated ADDJOB until a node acknowledges it; its time."""
    while True:
        try:
            client.execute_command("ADDJOB", "q", body, 0, "REPLICATE", NODES)
            return time.monotonic()
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise BenchError("no REPLICATE 3 ADDJOB was acknowledged")
            time.sleep(0.001)


def one_cluster(args, kind, label, workers, opts):
    servers = [new_server(opts, kind, f"{label}-n{i}", workers) for i in range(NODES)]
    try:
        for srv in servers:
            srv.start(30)
        if not join(servers, timeout=30):
            raise BenchError("the nodes did not form a cluster")
        client = servers[0].client()
        t_ack = first_ack(client, args.body, time.monotonic() + 30)
        cmd = ["ADDJOB", "q", args.body, "0", "REPLICATE", str(NODES)]
        runs = []
        for _ in range(args.runs):
            s0, t0 = node_switches(servers), time.monotonic() - t_ack
            r = redis_benchmark(servers[0].port, args.jobs, 1, cmd)
            r["from_s"] = round(t0, 2)
            r["switches_per_job"] = round((node_switches(servers) - s0) / args.jobs, 2)
            runs.append(r)
        time.sleep(args.settle)
        settled = {}
        for c in args.settled_clients:
            n = args.jobs * 4 if c == 1 else args.jobs * 8 * min(c, 8)
            s0 = node_switches(servers)
            # the node the benchmark talks to (it sends the copies) and the two that take them
            p0, c0 = node_cpu(servers[:1]), node_cpu(servers[1:])
            r = redis_benchmark(servers[0].port, n, c, cmd)
            r["switches_per_job"] = round((node_switches(servers) - s0) / n, 2)
            r["producer_cpu_us"] = cpu_per_job(p0, node_cpu(servers[:1]), n)
            r["replicas_cpu_us"] = cpu_per_job(c0, node_cpu(servers[1:]), n)
            settled[c] = r
        return {"runs": runs, "settled": settled}
    finally:
        for srv in servers:
            srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=6, help="successive runs from the first ack")
    ap.add_argument("--jobs", type=int, default=2500, help="ADDJOBs per run")
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--settled-clients", default="1,4,50")
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    args.body = "x" * args.body_size
    args.settled_clients = [int(c) for c in args.settled_clients.split(",")]
    opts = single_node_args(["--quick"])
    opts.logdir = tempfile.mkdtemp(prefix="bench-first-second-")
    opts.disque_binary = args.disque_binary
    setups = [(f"ours-w{w}", "disque", w) for w in map(int, args.workers.split(","))]
    if args.disque_binary:
        setups.append(("original", "cdisque", 0))
    results = {label: [] for label, _, _ in setups}
    try:
        for rnd in range(args.rounds):
            order = setups if rnd % 2 == 0 else setups[::-1]
            for label, kind, workers in order:
                r = one_cluster(args, kind, label, workers, opts)
                results[label].append(r)
                log(f"round {rnd + 1} {label}: " + ", ".join(
                    f"{x['rps']:,.0f}" for x in r["runs"]) + " jobs/s; settled " + ", ".join(
                    f"c{c} {x['rps']:,.0f}" for c, x in r["settled"].items()))
    finally:
        cleanup_all()
    report(args, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def report(args, results):
    base = None
    if "original" in results:
        orig = [x["rps"] for r in results["original"] for x in r["runs"]]
        base = statistics.median(orig)
    print(f"\nsuccessive runs of {args.jobs} REPLICATE 3 ADDJOBs at 1 connection from the first "
          f"acknowledged one (jobs/s; ratio to the original's median run"
          f"{f' {base:,.0f}/s' if base else ''}; context switches per job):")
    for label, rounds in results.items():
        for i, r in enumerate(rounds):
            cells = []
            for x in r["runs"]:
                ratio = f" {x['rps'] / base:.2f}x" if base else ""
                cells.append(f"{x['rps']:,.0f}{ratio} ({x['switches_per_job']})")
            print(f"  {label:<9} round {i + 1}: " + " | ".join(cells))
        lows = [x["rps"] / base for r in rounds for x in r["runs"]] if base else []
        if lows:
            print(f"  {label:<9} lowest run {min(lows):.2f}x, first runs "
                  + ", ".join(f"{r['runs'][0]['rps'] / base:.2f}x" for r in rounds))
    print(f"\nsettled, {args.settle:g} s later (median over rounds: jobs/s, p50/p99 ms, "
          "switches per job, CPU per job: user + system µs of the node the benchmark talks "
          "to, and of the two replicas together):")
    for c in args.settled_clients:
        ref = statistics.median(r["settled"][c]["rps"] for r in results["original"]) \
            if "original" in results else None
        for label, rounds in results.items():
            rps = statistics.median(r["settled"][c]["rps"] for r in rounds)
            p50 = statistics.median(r["settled"][c]["p50_ms"] for r in rounds)
            p99 = statistics.median(r["settled"][c]["p99_ms"] for r in rounds)
            sw = statistics.median(r["settled"][c]["switches_per_job"] for r in rounds)
            ratio = f" ({rps / ref:.2f}x)" if ref else ""
            cpu = {role: [statistics.median(r["settled"][c][role][k] for r in rounds)
                          for k in (0, 1)] for role in ("producer_cpu_us", "replicas_cpu_us")}
            print(f"  c{c:<3} {label:<9} {rps:>9,.0f}/s{ratio:<9} p50 {p50:.3f} p99 {p99:.3f}"
                  f"  {sw:.2f} sw/job  producer {cpu['producer_cpu_us'][0]:.0f} + "
                  f"{cpu['producer_cpu_us'][1]:.0f} µs, replicas {cpu['replicas_cpu_us'][0]:.0f} + "
                  f"{cpu['replicas_cpu_us'][1]:.0f} µs")


if __name__ == "__main__":
    sys.exit(main())
