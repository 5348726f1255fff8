#!/usr/bin/env python3
"""Direct job links on a secured cluster (TLS with certificates derived from `cluster-secret`,
docs/design.md "Direct job links") against an open cluster's plaintext links: ADDJOB
REPLICATE 3 on 3 nodes, in one run. The target (issue 34): secured >= 0.9x open.

Two 3-node clusters run side by side (same --workers, `cluster-job-links direct`), their links
up before the load; redis-benchmark (50 connections, unpipelined, a 100-byte body) drives node
0 of each in alternating rounds (open, secured, secured, open ...), so both see the same
machine load. Reported per round and as medians: jobs/s, the secured/open ratio, the CPU of
every process of the three nodes per job, and how many job messages went over the links and
how many by the bus (the secured run must use its links, not fall back to the bus).

    python bench/bench_secured_links.py                         # 5 rounds of 50k ADDJOBs
    python bench/bench_secured_links.py --rounds 1 -n 5000      # a smoke run
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time

from bench_affinity import wait_settled
from bench_bus_secret import SECRET, cluster_cpu
from common.cluster import BODY, medians, log, redis_benchmark, start_cluster

SETUPS = (("open", []), ("secured", ["--cluster-secret", SECRET]))
COUNTERS = ("cluster_job_messages_direct_sent", "cluster_job_messages_by_bus",
            "cluster_job_frames_direct_sent")


def link_counters(clients):
    """Job messages sent over the direct links and by the bus, and frames sent over the
    links, summed over the nodes."""
    total = dict.fromkeys(COUNTERS, 0)
    for c in clients:
        fields = c.info("cluster")
        for k in COUNTERS:
            total[k] += int(fields.get(k, 0))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=50000, help="ADDJOBs per redis-benchmark run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2, choices=(1, 2))
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    if not shutil.which("redis-benchmark"):
        sys.exit("redis-benchmark is needed (apt-get install redis-tools)")
    tmp = tempfile.mkdtemp(prefix="bench-secured-links-")
    procs = []
    runs = {name: [] for name, _ in SETUPS}
    try:
        setups = {}
        for name, extra in SETUPS:
            log("starting 3 %s nodes with --workers %d" % (name, args.workers))
            args_i = ["--cluster-job-links", "direct", *extra]
            nodes, clients = start_cluster(3, args.workers, tmp, lambda i, a=args_i: a, name)
            procs.extend(p for _, p in nodes)
            wait_settled(clients, args.workers, time.monotonic() + 30)
            fields = clients[0].info("cluster")
            assert fields.get("cluster_bus_secured") == (name == "secured"), fields
            assert fields.get("cluster_job_links_tls", 0) == (name == "secured"), fields
            setups[name] = (nodes[0][0], [p for _, p in nodes], clients)
        for r in range(args.rounds):
            order = list(setups.items())
            if r % 2:
                order.reverse()         # neither side always runs first
            for name, (port, node_procs, clients) in order:
                cpu0, links0 = cluster_cpu(node_procs), link_counters(clients)
                res = redis_benchmark(port, args.n, args.clients,
                                      ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"])
                res["cpu_us_per_job"] = (cluster_cpu(node_procs) - cpu0) / args.n * 1e6
                links1 = link_counters(clients)
                res.update({k: links1[k] - links0[k] for k in COUNTERS})
                log("round %d %-8s %8.0f jobs/s  p50 %.3f ms  p99 %.3f ms  %.0f us CPU/job  "
                    "job messages: %d over links, %d by the bus, %d frames"
                    % (r + 1, name, res["rps"], res["p50_ms"], res["p99_ms"],
                       res["cpu_us_per_job"], *(res[k] for k in COUNTERS)))
                runs[name].append(res)
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = medians(runs)
    print()
    print("ADDJOB REPLICATE 3, 3 nodes x %d workers, %d connections, %d x %d jobs (medians)"
          % (args.workers, args.clients, args.rounds, args.n))
    print("%-10s %10s %9s %9s %14s" % ("links", "jobs/s", "p50 ms", "p99 ms", "CPU us/job"))
    for name, s in summary.items():
        print("%-10s %10.0f %9.3f %9.3f %14.0f" % (name, s["rps"], s["p50_ms"], s["p99_ms"],
                                                   s["cpu_us_per_job"]))
    o, s = summary["open"], summary["secured"]
    ratio = s["rps"] / o["rps"]
    print("secured / open: throughput %.2fx (target >= 0.90x), CPU per job %.2fx"
          % (ratio, s["cpu_us_per_job"] / o["cpu_us_per_job"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "ratio": ratio}, f, indent=2)


if __name__ == "__main__":
    main()
