#!/usr/bin/env python3
"""TTL expiry latency: how long after `ADDJOB q body 0 TTL <ttl>` the job leaves its queue.

One node (ours with --workers 1 so the load shares the job's worker, or the original C
binary). Samples are started every ~53 ms on distinct queues (so their phase against the
second boundary varies) and QLEN of every pending queue is polled in one pipeline every
--poll-ms; the expiry time of a sample is the first poll that shows QLEN 0, its latency
that time minus the time the ADDJOB reply arrived. --load N adds N background connections
that hammer the same worker with pipelined ADDJOB / GETJOB / FASTACK on another queue.

    python bench/bench_ttl_expiry.py --samples 150 --load 2           # ours
    python bench/bench_ttl_expiry.py --server orig --disque-binary <original>/src/disque-server
    python bench/bench_ttl_expiry.py --server both --disque-binary <original>/src/disque-server \
        --samples 150 --load 2 --json out.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time

import redis

from common.cluster import Proc, free_port
from disque.harness import NodeStartError, disque_argv, original_argv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(kind, workdir, binary=None):
    """Our node (--workers 1) or the original (`binary`) on a leased port; its output in
    server.log."""
    port = free_port()
    if kind == "ours":
        argv = disque_argv(port, 1)
    else:
        argv = original_argv(binary, port, workdir)
    proc = Proc(argv, workdir, port=port)
    try:
        proc.wait_ready(30)
    except NodeStartError:
        proc.kill()
        raise RuntimeError("%s server did not start" % kind)
    return port, proc


def hammer(port, stop_at):
    """Background load: pipelined ADDJOB, GETJOB and FASTACK on one queue until stop_at."""
    r = redis.Redis(port=port, protocol=2)
    n = 0
    while time.time() < stop_at:
        p = r.pipeline(transaction=False)
        for _ in range(50):
            p.execute_command("ADDJOB", "load", "x" * 100, 0)
        p.execute_command("GETJOB", "NOHANG", "COUNT", 50, "FROM", "load")
        replies = p.execute()
        jobs = replies[-1] or []
        if jobs:
            r.execute_command("FASTACK", *[j[1] for j in jobs])
        n += 50
    return n


def measure(port, samples, ttl, poll_ms, load):
    r = redis.Redis(port=port, protocol=2)
    stop_at = time.time() + samples * 0.053 + ttl + 5
    pool = None
    if load:
        pool = multiprocessing.Pool(load)
        loads = [pool.apply_async(hammer, (port, stop_at)) for _ in range(load)]
        time.sleep(0.5)
    pending = {}            # queue -> time the ADDJOB reply came
    latencies = []
    started = 0
    next_add = time.time()
    while started < samples or pending:
        now = time.time()
        if started < samples and now >= next_add:
            q = "ttl%d" % started
            r.execute_command("ADDJOB", q, "body", 0, "TTL", ttl)
            pending[q] = time.time()
            started += 1
            next_add = now + 0.053
        if pending:
            names = list(pending)
            p = r.pipeline(transaction=False)
            for q in names:
                p.execute_command("QLEN", q)
            lens = p.execute()
            t = time.time()
            for q, n in zip(names, lens):
                if n == 0:
                    latencies.append(t - pending.pop(q))
        time.sleep(poll_ms / 1000)
    loaded = 0
    if pool is not None:
        loaded = sum(x.get(60) for x in loads)
        pool.close()
        pool.join()
    return latencies, loaded


def summary(name, lat, ttl):
    lat = sorted(lat)
    q = statistics.quantiles(lat, n=10)
    late = sum(1 for x in lat if x > ttl + 0.1)
    return {"server": name, "samples": len(lat), "min": lat[0], "median": statistics.median(lat),
            "p90": q[-1], "max": lat[-1], "above_ttl_plus_100ms": late}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=("ours", "orig", "both"), default="ours")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--ttl", type=int, default=1)
    ap.add_argument("--poll-ms", type=float, default=5)
    ap.add_argument("--load", type=int, default=0, help="background load connections")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--disque-binary", default=None,
                    help="the original disque-server (for --server orig or both)")
    args = ap.parse_args()
    kinds = ("ours", "orig") if args.server == "both" else (args.server,)
    results = []
    for kind in kinds:
        if kind == "orig" and not (args.disque_binary and os.path.exists(args.disque_binary)):
            raise SystemExit("--server %s needs --disque-binary <original>/src/disque-server"
                             % args.server)
        with tempfile.TemporaryDirectory() as tmp:
            port, proc = start(kind, tmp, args.disque_binary)
            try:
                lat, loaded = measure(port, args.samples, args.ttl, args.poll_ms, args.load)
            finally:
                proc.stop()
        s = summary(kind, lat, args.ttl)
        s["load_jobs"] = loaded
        results.append(s)
        print("%-5s TTL %d, %d samples, load %d conns (%d jobs): min %.3f s, median %.3f s, "
              "p90 %.3f s, max %.3f s, %d above TTL+0.1 s"
              % (kind, args.ttl, s["samples"], args.load, loaded, s["min"], s["median"],
                 s["p90"], s["max"], s["above_ttl_plus_100ms"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
