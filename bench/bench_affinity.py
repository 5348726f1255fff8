#!/usr/bin/env python3
"""The loads of the hop-free node (issue 12; docs/benchmarks.md, "Where a job's CPU goes"):
ours with --workers 1 and 2 against the original C Disque, in the same run.

Loads, each on a fresh server:
  plain    redis-benchmark ADDJOB, 50 connections, unpipelined
  pipe16   the same with -P 16
  cycle    redis-py: 100 ADDJOB one by one, GETJOB COUNT 100, ACKJOB of the 100
  cyclep   the same with the 100 ADDJOBs pipelined
  addp16   redis-py: ADDJOB pipelined 16 at a time
  moved    addp16 by a connection that first used another queue, of worker 0 when there are
           2 workers, while the ADDJOBs go to worker 1's (a client that moved on to
           another worker's queue: docs/design.md, "Following the queue")
  spread   redis-benchmark ADDJOB, 50 connections, unpipelined, over 1,000 queues
  repl3    3 nodes of a cluster; redis-benchmark ADDJOB ... REPLICATE 3 on the first node,
           50 connections, unpipelined (CPU: every process of the three nodes)
For each: throughput, p50/p99 where the client measures them, and the server's CPU
microseconds per job for every process (front-end and each worker; the original is one).

From the spread load's per-process CPU per job it projects the throughput at 4, 8 and 16
cores: limited by the total CPU per job (cores / total) and by the busiest single process
(1 / its share; the front-end stays one process, the workers' share divides among them),
next to the original's single-core ceiling (1 / its CPU per job).

    python bench/bench_affinity.py --disque-binary <original>/src/disque-server
    python bench/bench_affinity.py --rounds 3 --disque-binary ...   # median of 3 alternating rounds
    python bench/bench_affinity.py --quick --disque-binary ...      # a smoke run
    python bench/bench_affinity.py --loads spread --clients 4 ...   # forwarding, few connections
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from common.cluster import wait_job_links
from common.loads import run_cycle, run_redis_benchmark
from common.machine import check_machine_quiet, cpu_delta
from common.options import parse_args
from common.report import BenchError, log, make_body, warn
from common.servers import cleanup_all, new_server
from disque.harness import join

LOADS = ("plain", "pipe16", "cycle", "cyclep", "addp16", "moved", "spread", "repl3")
CLUSTER_NODES = 3
SETTLE_S = 1.0          # after the cluster forms, before the load (wait_settled)
SPREAD_QUEUES = 1000
PROJECT_CORES = (4, 8, 16)


def run_cycle_pipelined(args, srv) -> dict:
    """The cycle with its ADDJOBs sent as one pipeline per round; twice the cycle's rounds,
    so that it lasts about a second (a half-second load swung by ±25% on this VM)."""
    body = make_body(args.body_size)
    srv.flush()
    c = srv.client()
    rounds = args.rounds * 2
    jobs = rounds * args.batch
    try:
        cpu0 = srv.cpu_snapshot()
        t0 = time.perf_counter()
        for _ in range(rounds):
            p = c.pipeline(transaction=False)
            for _ in range(args.batch):
                p.execute_command("ADDJOB", "q", body, 0)
            p.execute()
            got = c.execute_command("GETJOB", "COUNT", args.batch, "FROM", "q")
            c.execute_command("ACKJOB", *[j[1] for j in got])
        elapsed = time.perf_counter() - t0
        cpu1 = srv.cpu_snapshot()
    finally:
        c.close()
    return per_job(srv, cpu0, cpu1, jobs, elapsed)


def queue_of_worker(w: int, nworkers: int = 2) -> str:
    """A queue name our node with `nworkers` workers puts on worker w (its slot)."""
    from disque._fast.jobid import queue_slot
    return next(f"q{i}" for i in range(1000) if queue_slot(f"q{i}".encode()) % nworkers == w)


def run_addjob_pipelined(args, srv, depth=16, queue="q", first=None) -> dict:
    """redis-py ADDJOB on `queue`, `depth` commands per pipeline; `first`: a queue the
    connection uses once (QLEN) before, so that with affinity it starts on its worker."""
    body = make_body(args.body_size)
    srv.flush()
    c = srv.client()
    batches = max(1, args.n_plain // depth // 2)    # 100,000 jobs: about 1.5 s
    jobs = batches * depth
    try:
        if first is not None:
            for _ in range(5):          # long enough to be handed over to first's worker
                c.execute_command("QLEN", first)
        cpu0 = srv.cpu_snapshot()
        t0 = time.perf_counter()
        for _ in range(batches):
            p = c.pipeline(transaction=False)
            for _ in range(depth):
                p.execute_command("ADDJOB", queue, body, 0)
            p.execute()
        elapsed = time.perf_counter() - t0
        cpu1 = srv.cpu_snapshot()
    finally:
        c.close()
    srv.flush()
    return per_job(srv, cpu0, cpu1, jobs, elapsed)


def per_job(srv, cpu0, cpu1, jobs, elapsed) -> dict:
    cpu_s, _ = cpu_delta(cpu0, cpu1)
    return {"jobs": jobs, "jobs_per_s": jobs / elapsed, "cpu_us_per_job": cpu_s / jobs * 1e6,
            "cpu_us_per_job_by_role": {k: round(v / jobs * 1e6, 3)
                                       for k, v in srv.cpu_by_role(cpu0, cpu1).items()}}


def from_benchmark(r: dict) -> dict:
    return {"jobs": r["n"], "jobs_per_s": r["rps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "cpu_us_per_job": r["cpu_us_per_job"],
            "cpu_us_per_job_by_role": r["cpu_us_per_job_by_role"]}


def run_load(args, srv, load: str) -> dict:
    if load == "plain":
        return from_benchmark(run_redis_benchmark(args, srv, args.n_plain, 1))
    if load == "pipe16":
        return from_benchmark(run_redis_benchmark(args, srv, args.n_pipe, 16))
    if load == "spread":
        return from_benchmark(run_redis_benchmark(args, srv, args.n_plain, 1, SPREAD_QUEUES))
    if load == "cycle":
        r = run_cycle(args, srv)
        return {"jobs": r["jobs"], "jobs_per_s": r["jobs_per_s"], "p50_ms": r["add_p50_ms"],
                "p99_ms": r["add_p99_ms"], "cpu_us_per_job": r["cpu_us_per_job"],
                "cpu_us_per_job_by_role": r["cpu_us_per_job_by_role"]}
    if load == "cyclep":
        return run_cycle_pipelined(args, srv)
    if load == "moved":
        return run_addjob_pipelined(args, srv, queue=queue_of_worker(1),
                                    first=queue_of_worker(0))
    return run_addjob_pipelined(args, srv)


def wait_settled(clients, workers: int, deadline: float) -> None:
    """After the nodes see each other: our nodes' direct job links up (every worker to
    every worker of the other nodes), then SETTLE_S more for every kind, so the one-off
    work of forming the cluster (handshakes, nodes.conf writes) is not counted per job."""
    try:
        wait_job_links(clients, workers, deadline)
    except RuntimeError as e:
        raise BenchError(str(e)) from None
    time.sleep(SETTLE_S)


def run_replicated(args, kind: str, label: str, workers: int) -> dict:
    """repl3: ADDJOB REPLICATE 3 on node 0 of a 3-node cluster; the CPU of all nodes."""
    nodes = [new_server(args, kind, f"{label}-n{i}", workers) for i in range(CLUSTER_NODES)]
    try:
        for srv in nodes:
            srv.start(args.start_timeout)
        clients = [srv.client() for srv in nodes]
        deadline = time.monotonic() + 30
        if not join(nodes, timeout=30):
            raise BenchError("the 3 nodes did not form a cluster")
        wait_settled(clients, workers, deadline)
        log(f"{label}: repl3 (cluster of {CLUSTER_NODES} formed)")
        n = args.n_plain // 2
        body = make_body(args.body_size).decode()
        argv = [args.redis_benchmark, "-h", "127.0.0.1", "-p", str(nodes[0].port),
                "-c", str(args.clients), "-n", str(n), "--csv",
                "ADDJOB", "q", body, "0", "REPLICATE", str(CLUSTER_NODES)]
        cpu0 = [srv.cpu_snapshot() for srv in nodes]
        t0 = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        elapsed = time.monotonic() - t0
        cpu1 = [srv.cpu_snapshot() for srv in nodes]
        if out.returncode != 0 or "ERR" in out.stdout:
            raise BenchError(f"redis-benchmark failed: {out.stdout[-500:]} {out.stderr[-500:]}")
        rows = [ln for ln in out.stdout.splitlines() if ln.startswith('"')]
        row = list(csv.DictReader(io.StringIO("\n".join(rows))))[-1]
        cpu = 0.0
        roles = {}
        for i, srv in enumerate(nodes):
            cpu += cpu_delta(cpu0[i], cpu1[i])[0]
            for role, v in srv.cpu_by_role(cpu0[i], cpu1[i]).items():
                roles[f"n{i}-{role}"] = round(v / n * 1e6, 3)
        queued = clients[0].execute_command("QLEN", "q")
        if queued != n:
            warn(f"{label}: repl3 queued {queued} of {n} jobs on the first node")
        return {"jobs": n, "jobs_per_s": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
                "p99_ms": float(row["p99_latency_ms"]), "wall_s": round(elapsed, 2),
                "cpu_us_per_job": cpu / n * 1e6, "cpu_us_per_job_by_role": roles}
    finally:
        for srv in nodes:
            srv.stop()


def bench(args, kind: str, label: str, workers: int) -> dict:
    out = {}
    for load in args.loads:
        if load == "repl3":
            out[load] = r = run_replicated(args, kind, label, workers)
            log(f"{label}:     -> {r['jobs_per_s']:,.0f} jobs/s, {r['cpu_us_per_job']:.2f} us CPU/job")
            continue
        srv = new_server(args, kind, label, workers)
        try:
            srv.start(args.start_timeout)
            log(f"{label}: {load}")
            out[load] = run_load(args, srv, load)
            r = out[load]
            log(f"{label}:     -> {r['jobs_per_s']:,.0f} jobs/s, {r['cpu_us_per_job']:.2f} us CPU/job "
                  f"({', '.join(f'{k} {v:.2f}' for k, v in sorted(r['cpu_us_per_job_by_role'].items()))})")
        finally:
            srv.stop()
    return out


def median_round(runs: list[dict], loads) -> dict:
    """Per load, the round with the median throughput (its CPU figures with it)."""
    out = {}
    for load in loads:
        got = sorted((r[load] for r in runs if load in r), key=lambda r: r["jobs_per_s"])
        if got:
            out[load] = got[len(got) // 2]
    return out


def forwarding_projection(ours: dict) -> list[str]:
    """The same projection with the forwarding a spread connection needs. With N workers,
    (N - 1) / N of its commands go to another worker; the cost of one forwarded command
    is read off the 1- and 2-worker runs (half forwarded with 2): 2 x (w2 - w1)."""
    spread = {w: (ours.get(f"ours_w{w}") or {}).get("spread") for w in (1, 2)}
    if not spread[1] or not spread[2]:
        return []
    one = sum(spread[1]["cpu_us_per_job_by_role"].values())
    two = spread[2]["cpu_us_per_job_by_role"]
    front = two.get("front-end", 0.0)
    hop = max(0.0, 2 * (sum(two.values()) - one))
    cells = []
    for cores in PROJECT_CORES:
        nworkers = max(1, cores - 1)
        total = one + hop * (nworkers - 1) / nworkers
        limits = [cores / total * 1e6, nworkers / (total - front) * 1e6]
        if front:
            limits.append(1e6 / front)
        cells.append(f"{cores} cores {min(limits):,.0f}/s")
    return [f"  ours, forwarding counted ({hop:.2f} us per forwarded command, from w1 and w2): "
            + ", ".join(cells)]


def projection(ours: dict, original: dict | None) -> list[str]:
    """Throughput at more cores from the spread load's CPU per job, per process."""
    lines = []
    for label, res in ours.items():
        roles = (res.get("spread") or {}).get("cpu_us_per_job_by_role")
        if not roles:
            continue
        total = sum(roles.values())
        front = roles.get("front-end", 0.0)
        workers = total - front
        cells = []
        for cores in PROJECT_CORES:
            # one front-end, the other cores' workers share the rest of a job's CPU
            nworkers = max(1, cores - 1)
            limits = [cores / total * 1e6]
            if front:
                limits.append(1e6 / front)
            if workers:
                limits.append(nworkers / workers * 1e6)
            cells.append(f"{cores} cores {min(limits):,.0f}/s")
        lines.append(f"  {label}: total {total:.2f} us/job (front-end {front:.2f}): " + ", ".join(cells))
    lines.extend(forwarding_projection(ours))
    if original and original.get("spread"):
        c = original["spread"]["cpu_us_per_job"]
        lines.append(f"  original: {c:.2f} us/job, single-core ceiling {1e6 / c:,.0f}/s at any core count")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep the servers' logs directory (it is kept anyway when a round fails)")
    ap.add_argument("--clients", type=int, default=50,
                    help="redis-benchmark connections of plain, pipe16, spread and repl3 (50)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the servers this many times; the median round is shown")
    mine = ap.parse_args(argv)
    args = parse_args(["--quick"] if mine.quick else [])
    args.disque_binary = mine.disque_binary
    args.clients = mine.clients
    args.loads = [x for x in mine.loads.split(",") if x]
    args.logdir = tempfile.mkdtemp(prefix="disque-bench-affinity-")
    targets = []
    if args.disque_binary:
        targets.append(("original", "cdisque", "C-disque", 1))
    for w in [int(x) for x in mine.workers.split(",")]:
        targets.append((f"ours_w{w}", "disque", f"ours(w={w})", w))
    rounds = {key: [] for key, *_ in targets}
    check_machine_quiet()
    done = False
    try:
        for n in range(mine.rounds):
            for key, kind, label, w in targets:       # alternating: a slow moment of the
                log(f"round {n + 1}/{mine.rounds}: {label}")   # machine hits all alike
                rounds[key].append(bench(args, kind, label, w))
        done = True
    finally:
        cleanup_all()
        if mine.keep_logs or not done:
            log(f"servers' logs kept in {args.logdir}")
        else:
            shutil.rmtree(args.logdir, ignore_errors=True)
    results = {key: median_round(runs, args.loads) for key, runs in rounds.items()}
    original = results.get("original")
    print("\nload     | " + " | ".join(f"{k:>28}" for k in results))
    for load in args.loads:
        row = []
        for k, res in results.items():
            r = res.get(load)
            if not r:
                row.append(f"{'-':>28}")
                continue
            ratio = ""
            if original and k != "original" and original.get(load):
                ratio = f" {r['jobs_per_s'] / original[load]['jobs_per_s']:.2f}x"
            row.append(f"{r['jobs_per_s']:>9,.0f}/s{ratio:>6} {r['cpu_us_per_job']:>7.2f}us")
        print(f"{load:<8} | " + " | ".join(row))
    print("\nserver CPU us/job by process:")
    for k, res in results.items():
        for load, r in res.items():
            print(f"  {k:<9} {load:<7} " + ", ".join(
                f"{role} {v:.2f}" for role, v in sorted(r["cpu_us_per_job_by_role"].items())))
    print(f"\nprojection from the spread load (1,000 queues, {args.clients} connections):")
    for line in projection({k: v for k, v in results.items() if k != "original"}, original):
        print(line)
    if mine.json:
        with open(mine.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
