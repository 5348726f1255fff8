"""Job groups against plain jobs on the same node, in the same run (issue 48,
docs/job-groups.md): what GROUP costs a producer, a drain and RAM.

For each worker count, a fresh node per measurement, plain and grouped in turn:

* ADDJOB: redis-benchmark, 50 unpipelined connections (producers that wait for each
  reply) and 1 connection pipelining 16, `ADDJOB q <16 bytes> 0` against the same with
  `GROUP g:__rand_int__` over 10,000 keys; the node's CPU per job.
* Drain: 1,000,000 jobs preloaded (pipelined over one connection), over 10,000 groups for
  the grouped run, then 8 consumer processes each `GETJOB TIMEOUT 200 COUNT 50` + `ACKJOB`
  until the node holds no job; jobs per second and the node's CPU per job.
* RAM: RSS growth of the node per job after the preload, and per group of one job
  (100,000 groups of one job against 100,000 plain jobs).

    python bench/bench_groups.py
    python bench/bench_groups.py --workers 2 --jobs 200000 --rounds 3
    python bench/bench_groups.py --parts add --rounds 5      # the ADDJOB rows only
"""
import argparse
import multiprocessing
import shutil
import socket
import statistics
import sys
import tempfile
import time

import hiredis
import redis

from common.cluster import redis_benchmark
from common.nodes import leased_node, node_cpu, node_rss
from disque.harness.node import disque_argv

GROUPS = 10_000
CONSUMERS = 8
PIPELINE = 1000
BODY = b"x" * 16


def addjob_command(queue, i, grouped, groups):
    args = [b"ADDJOB", queue, BODY, b"0"]
    if grouped:
        args += [b"GROUP", b"g:%d" % (i % groups)]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def preload(port, n, grouped, groups, queue=b"drain"):
    """n ADDJOBs pipelined over one connection, replies read with hiredis."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        reader = hiredis.Reader()
        for lo in range(0, n, PIPELINE):
            count = min(PIPELINE, n - lo)
            sock.sendall(b"".join(addjob_command(queue, i, grouped, groups)
                                  for i in range(lo, lo + count)))
            while count:
                reply = reader.gets()
                if reply is False:
                    reader.feed(sock.recv(1 << 16))
                elif isinstance(reply, hiredis.ReplyError):
                    raise SystemExit("preload: %s" % reply)
                else:
                    count -= 1


def consume(port, stop, queue):
    c = redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_timeout=30)
    while not stop.is_set():
        jobs = c.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 50, "FROM", queue)
        if jobs:
            c.execute_command("ACKJOB", *[j[1] for j in jobs])


def registered_jobs(c):
    return int(c.info("jobs")["registered_jobs"])


def run_drain(label, workers, n, grouped, workdir):
    with leased_node(label, lambda port: disque_argv(port, workers), workers, workdir) as node:
        c = redis.Redis(host="127.0.0.1", port=node.port, protocol=2, socket_timeout=60)
        c.ping()
        time.sleep(0.5)
        rss0 = node_rss(node.pid)
        preload(node.port, n, grouped, GROUPS)
        time.sleep(0.5)
        per_job = (node_rss(node.pid) - rss0) / n
        stop = multiprocessing.Event()
        procs = [multiprocessing.Process(target=consume, args=(node.port, stop, "drain"))
                 for _ in range(CONSUMERS)]
        cpu0 = node_cpu(node.pid)
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        try:
            while registered_jobs(c):
                time.sleep(0.02)
            seconds = time.perf_counter() - t0
            cpu = node_cpu(node.pid) - cpu0
        finally:
            stop.set()
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.terminate()
        return {"rate": n / seconds, "cpu_us": cpu / n * 1e6, "rss_per_job": per_job}


def run_per_group(label, workers, n, grouped, workdir):
    """RSS growth for n groups of one job (or n plain jobs)."""
    with leased_node(label, lambda port: disque_argv(port, workers), workers, workdir) as node:
        c = redis.Redis(host="127.0.0.1", port=node.port, protocol=2)
        c.ping()
        time.sleep(0.5)
        rss0 = node_rss(node.pid)
        preload(node.port, n, grouped, n, queue=b"one-each")
        time.sleep(0.5)
        return (node_rss(node.pid) - rss0) / n


def run_addjob(label, workers, n, grouped, clients, pipeline, workdir):
    with leased_node(label, lambda port: disque_argv(port, workers), workers, workdir) as node:
        redis.Redis(host="127.0.0.1", port=node.port, protocol=2).ping()
        cmd = ["-P", str(pipeline), "-r", str(GROUPS), "ADDJOB", "q", BODY.decode(), "0"]
        if grouped:
            cmd += ["GROUP", "g:__rand_int__"]
        cpu0 = node_cpu(node.pid)
        row = redis_benchmark(node.port, n, clients, cmd)
        row["cpu_us"] = (node_cpu(node.pid) - cpu0) / n * 1e6
        return row


def median_row(rows, key):
    return statistics.median(r[key] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--jobs", type=int, default=1_000_000, help="jobs of the drain")
    ap.add_argument("--adds", type=int, default=200_000, help="ADDJOBs per redis-benchmark run")
    ap.add_argument("--one-job-groups", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--parts", default="add,drain,ram", help="which of add, drain, ram to run")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if not shutil.which("redis-benchmark"):
        sys.exit("bench_groups: redis-benchmark is not installed (apt-get install redis-tools)")
    workdir = tempfile.mkdtemp(prefix="bench-groups-")
    lines = []
    try:
        for w in [int(x) for x in a.workers.split(",")]:
            res = {k: {False: [], True: []} for k in ("c50", "p16", "drain", "one")}
            for r in range(a.rounds):
                for grouped in (False, True):
                    kind = "grouped" if grouped else "plain"
                    label = "w%d-%s-r%d" % (w, kind, r + 1)
                    if "add" in parts:
                        res["c50"][grouped].append(run_addjob(label, w, a.adds, grouped, 50, 1,
                                                              workdir))
                        res["p16"][grouped].append(run_addjob(label, w, a.adds * 2, grouped, 1,
                                                              16, workdir))
                        print("  %s: ADDJOB 50 connections %.0f/s (%.1f us), P16 %.0f/s "
                              "(%.1f us)" % (label, res["c50"][grouped][-1]["rps"],
                                             res["c50"][grouped][-1]["cpu_us"],
                                             res["p16"][grouped][-1]["rps"],
                                             res["p16"][grouped][-1]["cpu_us"]), flush=True)
                    if "drain" in parts:
                        res["drain"][grouped].append(run_drain(label, w, a.jobs, grouped, workdir))
                        print("  %s: drain %.0f/s (%.1f us), %.0f B per job" % (
                            label, res["drain"][grouped][-1]["rate"],
                            res["drain"][grouped][-1]["cpu_us"],
                            res["drain"][grouped][-1]["rss_per_job"]), flush=True)
                    if "ram" in parts:
                        res["one"][grouped].append({"rss": run_per_group(
                            label, w, a.one_job_groups, grouped, workdir)})
            for key, what, rate in (("c50", "ADDJOB, 50 connections", "rps"),
                                    ("p16", "ADDJOB, 1 connection, pipeline 16", "rps"),
                                    ("drain", "drain of %d jobs, 8 consumers" % a.jobs, "rate")):
                if not res[key][False]:
                    continue
                plain, grouped = (median_row(res[key][g], rate) for g in (False, True))
                cpu_p, cpu_g = (median_row(res[key][g], "cpu_us") for g in (False, True))
                lines.append("| w%d | %s | %.0f/s (%.1f us) | %.0f/s (%.1f us) | %.2fx |" % (
                    w, what, plain, cpu_p, grouped, cpu_g, grouped / plain))
            if res["drain"][False]:
                per_job = [median_row(res["drain"][g], "rss_per_job") for g in (False, True)]
                lines.append("| w%d | RSS per job (%d jobs, %d groups) | %.0f B | %.0f B | %+.0f B |"
                             % (w, a.jobs, GROUPS, per_job[0], per_job[1], per_job[1] - per_job[0]))
            if res["one"][False]:
                one = [median_row(res["one"][g], "rss") for g in (False, True)]
                lines.append("| w%d | RSS per group of one job (%d groups) | %.0f B | %.0f B | "
                             "%+.0f B |" % (w, a.one_job_groups, one[0], one[1], one[1] - one[0]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n| workers | load | plain (node CPU per job) | grouped (node CPU per job) | "
          "grouped / plain |\n|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
