"""Job groups against plain jobs on a 3-node cluster, in the same run (issue 48,
docs/job-groups.md, "Adding a job to a group"): what a group's home costs a producer.

A fresh cluster of 3 nodes (`--workers` each) per figure, plain and grouped in turn (the
first of the two alternating between rounds). redis-benchmark sends to one node
`ADDJOB q <16 bytes> 0 REPLICATE r` against the same with `GROUP g:__rand_int__` over
10,000 keys, from 1 and from 50 unpipelined connections (producers that wait for each
reply): a third of the groups have that node as their home (their place is given there,
as for a plain job); for the others the job goes to its holders as GROUPSEQ and the home's
answer gives its place, in the same round trip, then PLACED tells them the place. The
cluster's CPU per job, and the p50 latency. Then a drain: `--jobs` jobs added through the
3 nodes in turn (over 1,000 groups for the grouped run), taken by 8 consumers spread over
the 3 nodes (GETJOB COUNT 50 + ACKJOB) until no node holds a job.

    python bench/bench_groups_cluster.py
    python bench/bench_groups_cluster.py --replicate 2,3 --rounds 3 --workers 1
"""
import argparse
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time

import redis

from common.cluster import redis_benchmark, start_cluster, wait_job_links
from common.nodes import node_cpu

GROUPS = 10_000
DRAIN_GROUPS = 1_000
CONSUMERS = 8
BODY = "x" * 16


def cluster_cpu(nodes):
    return sum(node_cpu(proc.p.pid) for _, proc in nodes)


def run_addjob(nodes, n, clients, replicate, grouped):
    port = nodes[0][0]
    cmd = ["-r", str(GROUPS), "ADDJOB", "q", BODY, "0", "REPLICATE", str(replicate)]
    if grouped:
        cmd += ["GROUP", "g:__rand_int__"]
    cpu0 = cluster_cpu(nodes)
    row = redis_benchmark(port, n, clients, cmd)
    row["cpu_us"] = (cluster_cpu(nodes) - cpu0) / n * 1e6
    return row


def produce(port, lo, hi, grouped, replicate):
    c = redis.Redis(port=port, protocol=2)
    pipe = c.pipeline(transaction=False)
    for i in range(lo, hi):
        extra = ["GROUP", "d:%d" % (i % DRAIN_GROUPS)] if grouped else []
        pipe.execute_command("ADDJOB", "drain", BODY, 0, "REPLICATE", replicate, *extra)
        if len(pipe) >= 200:
            pipe.execute()
    pipe.execute()


def consume(port, stop):
    c = redis.Redis(port=port, protocol=2)
    while not stop.is_set():
        got = c.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 50, "FROM", "drain")
        if got:
            c.execute_command("ACKJOB", *[j[1] for j in got])


def run_drain(nodes, clients, n, replicate, grouped):
    """n jobs added through the 3 nodes (the groups' jobs in turn through every node, each
    node's share pipelined, so a group's order follows the nodes' replies), then drained."""
    ports = [p for p, _ in nodes]
    for c in clients:
        c.execute_command("DEBUG", "FLUSHALL")      # what the ADDJOB runs left
    share = n // len(ports)
    producers = [multiprocessing.Process(target=produce, args=(p, k * share, (k + 1) * share,
                                                               grouped, replicate))
                 for k, p in enumerate(ports)]
    for p in producers:
        p.start()
    for p in producers:
        p.join()
    stop = multiprocessing.Event()
    consumers = [multiprocessing.Process(target=consume, args=(ports[k % len(ports)], stop))
                 for k in range(CONSUMERS)]
    cpu0, t0 = cluster_cpu(nodes), time.monotonic()
    for p in consumers:
        p.start()
    while any(int(c.info("jobs").get("registered_jobs", 0)) for c in clients):
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    stop.set()
    for p in consumers:
        p.join(10)
    return {"rps": share * len(ports) / elapsed,
            "cpu_us": (cluster_cpu(nodes) - cpu0) / (share * len(ports)) * 1e6}


def measure(workers, part, grouped, args, replicate, connections=None):
    """One figure on a fresh cluster: jobs left by another measurement would weigh on this
    one (tables, timers), and the order of plain and grouped would decide the ratio."""
    tmp = tempfile.mkdtemp(prefix="bench-groups-cluster-")
    nodes = []
    try:
        nodes, clients = start_cluster(3, workers, tmp)
        wait_job_links(clients, workers, time.monotonic() + 30)
        if part == "add":
            return run_addjob(nodes, args.adds if connections > 1 else args.adds // 10,
                              connections, replicate, grouped)
        return run_drain(nodes, clients, args.jobs, replicate, grouped)
    finally:
        for _, proc in nodes:
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def one_round(workers, args, replicate, k):
    """Every figure of a round, plain and grouped in turn, the first of them alternating
    between rounds."""
    order = (False, True) if k % 2 == 0 else (True, False)
    rows = {("add%d" % c, grouped): measure(workers, "add", grouped, args, replicate, c)
            for c in args.clients for grouped in order}
    rows.update({("drain", grouped): measure(workers, "drain", grouped, args, replicate)
                 for grouped in order})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--replicate", default="3", help="comma separated REPLICATE levels")
    ap.add_argument("--adds", type=int, default=50_000, help="ADDJOBs per redis-benchmark run")
    ap.add_argument("--clients", default="1,50",
                    help="comma separated connection counts of the ADDJOB runs")
    ap.add_argument("--jobs", type=int, default=60_000, help="jobs of the drain")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    print("3 nodes, --workers %d, %d rounds (medians); ratio: grouped / plain" % (
        args.workers, args.rounds), flush=True)
    for replicate in [int(r) for r in args.replicate.split(",")]:
        rounds = []
        for k in range(args.rounds):
            rounds.append(one_round(args.workers, args, replicate, k))
            print("  REPLICATE %d round %d done" % (replicate, k + 1), file=sys.stderr, flush=True)
        parts = [("add%d" % c, "ADDJOB, %d connection%s" % (c, "s" if c > 1 else ""))
                 for c in args.clients]
        parts.append(("drain", "drain of %d jobs, 8 consumers on 3 nodes" % args.jobs))
        for part, what in parts:
            plain = statistics.median(r[(part, False)]["rps"] for r in rounds)
            grouped = statistics.median(r[(part, True)]["rps"] for r in rounds)
            cpu_p = statistics.median(r[(part, False)]["cpu_us"] for r in rounds)
            cpu_g = statistics.median(r[(part, True)]["cpu_us"] for r in rounds)
            lat = ""
            if "p50_ms" in rounds[0][(part, False)]:
                lat = " | p50 %.3f / %.3f ms" % tuple(
                    statistics.median(r[(part, g)]["p50_ms"] for r in rounds) for g in (False, True))
            print("REPLICATE %d %-45s plain %9.0f/s %6.1f us CPU/job | grouped %9.0f/s "
                  "%6.1f us CPU/job | %.2fx%s" % (replicate, what, plain, cpu_p, grouped, cpu_g,
                                                  grouped / plain, lat), flush=True)


if __name__ == "__main__":
    main()
