#!/usr/bin/env python3
"""A replicated ADDJOB at one connection, process by process (issue 46): installs of ours
side by side and the original, alternating within each round.

Three nodes on 127.0.0.1 joined with CLUSTER MEET; 3 s later `redis-benchmark -c 1 ADDJOB
q <100 bytes> 0 REPLICATE 3` against the first. Per setup: the rate, p50, and for every
process of the three nodes the user and system CPU and the voluntary context switches per
job (psutil, the processes' own counters). bench_first_second.py measures the same load
from the cluster's first second with CPU summed per node; this one keeps the processes
apart and alternates setups run by run, so that a few µs per job stand out of the
machine's swing.

    python bench/bench_repl_processes.py --server before=/tmp/old/.venv/bin/disque-server \\
        --server after=.venv/bin/disque-server --disque-binary <original>/src/disque-server
"""
import argparse
import statistics
import sys
import time

import psutil

from common.cluster import redis_benchmark, start_joined
from common.options import add_server_options, rows_by_setup, server_setups
from disque.harness.node import original_argv
from disque.harness.ports import lease_port

NODES = 3
SETTLE_S = 3.0
BODY = "x" * 100


def node_argv(head, port, workers, workdir, binary):
    if head is None:
        return original_argv(binary, port, workdir)
    return head + ["--port", str(port), "--workers", str(workers), "--bind", "127.0.0.1",
                   "--dir", workdir]


def process_roles(nodes):
    """[(role, psutil.Process)]: 'n0 front-end', 'n0 worker-0' ... ('n0 server' for the
    original's one process); node 0 is the one the benchmark talks to."""
    out = []
    for i, node in enumerate(nodes):
        root = psutil.Process(node.proc.pid)
        kids = sorted(root.children(recursive=True), key=lambda p: p.pid)
        out.append(("n%d %s" % (i, "front-end" if kids else "server"), root))
        out += [("n%d worker-%d" % (i, w), p) for w, p in enumerate(kids)]
    return out


def sample(roles):
    out = {}
    for role, p in roles:
        try:
            t = p.cpu_times()
            out[role] = (t.user, t.system, p.num_ctx_switches().voluntary)
        except psutil.Error:
            pass
    return out


def one_run(label, head, args, workdir):
    leases = [lease_port() for _ in range(NODES)]
    nodes = []
    try:
        start_joined(NODES, lambda i, d: (
            node_argv(head, leases[i].port, args.workers, d, args.disque_binary),
            leases[i].port, "127.0.0.1"), workdir, label, nodes)
        time.sleep(SETTLE_S)
        roles = process_roles(nodes)
        before = sample(roles)
        r = redis_benchmark(nodes[0].port, args.jobs, 1,
                            ["ADDJOB", "q", BODY, "0", "REPLICATE", str(NODES)])
        after = sample(roles)
        per = {}
        for role in before.keys() & after.keys():
            u0, s0, v0 = before[role]
            u1, s1, v1 = after[role]
            per[role] = ((u1 - u0) / args.jobs * 1e6, (s1 - s0) / args.jobs * 1e6,
                         (v1 - v0) / args.jobs)
        return {"rps": r["rps"], "p50_ms": r["p50_ms"], "processes": per}
    finally:
        for node in nodes:
            node.stop()
        for lease in leases:
            lease.release()


def summary(runs):
    """Medians over rounds: rate, p50, and per role user / sys µs and switches per job;
    roles that used under 0.5 µs of CPU per job in every round are left out."""
    med = {"rps": statistics.median(r["rps"] for r in runs),
           "p50_ms": statistics.median(r["p50_ms"] for r in runs)}
    roles = sorted({role for r in runs for role in r["processes"]})
    med["processes"] = {}
    for role in roles:
        vals = [r["processes"][role] for r in runs if role in r["processes"]]
        if all(u + s < 0.5 for u, s, _ in vals):
            continue
        med["processes"][role] = tuple(statistics.median(v[k] for v in vals) for k in range(3))
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap, workers=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=20000)
    args = ap.parse_args()
    setups = server_setups(ap, args)
    runs = rows_by_setup(setups, args.rounds, "bench-repl-processes-",
                         lambda name, head, workdir: one_run(name, head, args, workdir),
                         lambda row: "%8.0f/s" % row["rps"])
    meds = {label: summary(rs) for label, rs in runs.items()}
    base = meds["original"]["rps"] if "original" in meds else None
    print("\n3 nodes, --workers %d, 1 connection, %d jobs: medians of %d rounds; per process, "
          "per job: user + system µs, voluntary switches" % (args.workers, args.jobs, args.rounds))
    for label, med in meds.items():
        ratio = " (%.2fx the original)" % (med["rps"] / base) if base and label != "original" else ""
        print("  %-9s %7.0f/s%s p50 %.3f ms" % (label, med["rps"], ratio, med["p50_ms"]))
        for role, (user, system, vol) in med["processes"].items():
            print("      %-14s %5.1f + %5.1f µs  %.2f sw" % (role, user, system, vol))


if __name__ == "__main__":
    sys.exit(main())
