#!/usr/bin/env python3
"""The fault harness' workload on a fault-free cluster, without namespaces (issue 46): the
nodes' CPU per job, split, and the job messages behind it, ours against the original.

Five nodes listen on 127.0.0.1 to 127.0.0.5, one port for all, so the workload module of
the fault harness (faults/workload.py: 4 producers sending REPLICATE 2 or 3 ADDJOBs to a
random node and waiting for each, 4 consumers doing GETJOB TIMEOUT 300 COUNT 20 + ACKJOB
on random nodes) runs against them unchanged. Per setup and round: the adds/s the
workload counts (its fault-free rate), and over the middle of the run, per job added,
the user and system CPU and context switches of the nodes' processes, the workload's own
CPU, and for ours the job messages sent (INFO workerstats) and the turns the workers took
through their Python loop (INFO workers, `loop_turns`). Setups alternate within a round.

    python bench/bench_busy_cluster.py --disque-binary <original>/src/disque-server
    python bench/bench_busy_cluster.py --server before=/tmp/old/.venv/bin/disque-server \\
        --server after=.venv/bin/disque-server --rounds 3
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import psutil

from common.cluster import start_joined
from common.options import add_server_options, rows_by_setup, server_setups
from disque.harness.node import original_argv
from disque.harness.ports import lease_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS = ["127.0.0.%d" % i for i in range(1, 6)]
WARMUP_S = 1.0              # the workload's connections open: not measured


def node_argv(head, host, port, workers, workdir, binary):
    if head is None:
        return original_argv(binary, port, workdir, host=host)
    return head + ["--port", str(port), "--workers", str(workers), "--bind", host,
                   "--dir", workdir]


def processes(nodes):
    out = []
    for node in nodes:
        try:
            p = psutil.Process(node.proc.pid)
            out += [p] + p.children(recursive=True)
        except psutil.Error:
            pass
    return out


def cpu_sample(procs):
    """user s, system s, context switches over `procs` (their threads included)."""
    user = system = switches = 0
    for p in procs:
        try:
            t = p.cpu_times()
            c = p.num_ctx_switches()
        except psutil.Error:
            continue
        user += t.user
        system += t.system
        switches += c.voluntary + c.involuntary
    return user, system, switches


def worker_counters(nodes):
    """(job messages sent, Python loop turns), summed over our nodes' workers."""
    sent = turns = 0
    for node in nodes:
        text = node.call("INFO", "workers") + node.call("INFO", "workerstats")
        for line in text.decode().splitlines():
            key, _, value = line.partition(":")
            if not key.startswith("worker"):
                continue
            if value.startswith("{"):
                sent += sum(json.loads(value).get("bo", {}).values())
            else:
                fields = dict(kv.split("=", 1) for kv in value.split(","))
                turns = None if turns is None or "loop_turns" not in fields else (
                    turns + int(fields["loop_turns"]))      # None: an install without it
    return sent, turns


def one_run(label, head, args, workdir):
    lease = lease_port()
    nodes = []
    try:
        start_joined(len(HOSTS), lambda i, d: (
            node_argv(head, HOSTS[i], lease.port, args.workers, d, args.disque_binary),
            lease.port, HOSTS[i]), workdir, label, nodes)
        out = os.path.join(workdir, "%s-workload.json" % label)
        workload = subprocess.Popen(
            [sys.executable, "-m", "faults.workload", "--addrs", ",".join(HOSTS),
             "--port", str(lease.port), "--warmup", str(args.seconds), "--quiet", "2",
             "--out", out], cwd=REPO)
        try:
            procs = processes(nodes)
            wl = psutil.Process(workload.pid)
            time.sleep(WARMUP_S)
            counters0 = None if head is None else worker_counters(nodes)
            u0, s0, c0 = cpu_sample(procs)
            w0 = sum(wl.cpu_times()[:2])
            t0 = time.monotonic()
            time.sleep(args.seconds - WARMUP_S - 0.5)
            u1, s1, c1 = cpu_sample(procs)
            w1 = sum(wl.cpu_times()[:2])
            t1 = time.monotonic()
            counters1 = None if head is None else worker_counters(nodes)
            time.sleep(0.5)
            workload.send_signal(signal.SIGUSR1)    # "healed": the workload drains and ends
            workload.wait(timeout=120)
        finally:
            if workload.poll() is None:
                workload.kill()
        with open(out) as f:
            rate = json.load(f)["baseline_rate"]
        jobs = rate * (t1 - t0)
        row = {"rate": rate, "user_us": (u1 - u0) / jobs * 1e6, "sys_us": (s1 - s0) / jobs * 1e6,
               "switches": (c1 - c0) / jobs, "workload_us": (w1 - w0) / jobs * 1e6}
        if counters0 is not None:
            row["messages"] = (counters1[0] - counters0[0]) / jobs
            if counters1[1] is not None:
                row["loop_turns"] = (counters1[1] - counters0[1]) / jobs
        return row
    finally:
        for node in nodes:
            node.stop()
        lease.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6.0, help="the workload's fault-free run")
    args = ap.parse_args()
    setups = server_setups(ap, args)
    rows = rows_by_setup(setups, args.rounds, "bench-busy-",
                         lambda name, head, workdir: one_run(name, head, args, workdir),
                         lambda row: "  ".join("%s %.1f" % kv for kv in row.items()))
    base = statistics.median(r["rate"] for r in rows["original"]) if "original" in rows else None
    print("\n5 nodes, --workers %d: medians of %d rounds, per job added (CPU in us)"
          % (args.workers, args.rounds))
    for label, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0]}
        ratio = " (%.2fx the original)" % (med["rate"] / base) if base and label != "original" else ""
        print("  %-9s %s%s" % (label, "  ".join("%s %.1f" % kv for kv in med.items()), ratio))


if __name__ == "__main__":
    main()
