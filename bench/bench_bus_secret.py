#!/usr/bin/env python3
"""What a secured cluster bus costs (docs/security.md): ADDJOB REPLICATE 3 on 3 nodes, with and
without `cluster-secret` (ZeroMQ CURVE on every bus frame), in one run.

Two 3-node clusters run side by side (same --workers); redis-benchmark (50 connections,
unpipelined) drives node 0 of each in alternating rounds (open, secured, open, secured ...),
so both see the same machine load. Reported: median req/s and p50/p99 over the rounds, and
the secured/open ratio. REPLICATE 3 is synchronous: every ADDJOB waits for two copies to
cross the bus and their GOTJOB to come back, so the bus is on the latency path.

    python bench/bench_bus_secret.py                 # 5 rounds of 50k requests
    python bench/bench_bus_secret.py --quick         # 3 rounds of 10k
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile

import psutil

from common.cluster import BODY, medians, free_port, log, redis_benchmark, start_cluster

SECRET = "bench-" + "0123456789abcdef" * 2


def cluster_cpu(procs):
    """user+sys seconds of every process of these nodes (front-ends and workers)."""
    total = 0.0
    for proc in procs:
        try:
            top = psutil.Process(proc.p.pid)
            for p in [top] + top.children(recursive=True):
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total
TRANSPORT_FRAME = 1024          # bytes: about a JOBS frame of a few replicated 100-byte jobs


def transport_rate(secured, frames, base_port):
    """Frames/s one Transport DEALER pushes into another's ROUTER (both in this process), and
    the CPU time per frame (sender + receiver, less sensitive to a loaded machine than the
    rate): the bus alone, without Disque around it."""
    import time
    import zmq
    from disque.bus.secret import BusKeys
    from disque.bus.transport import Transport
    keys = BusKeys(SECRET) if secured else None
    ctx_a, ctx_b = zmq.Context(), zmq.Context()
    a = Transport(ctx_a, "a" * 40, ["127.0.0.1"], base_port, keys)
    b = Transport(ctx_b, "b" * 40, ["127.0.0.1"], base_port + 1, keys)
    try:
        b.connect("a" * 40, "127.0.0.1", base_port)
        data = b"x" * TRANSPORT_FRAME
        while not b.send("a" * 40, data):
            a.guard.on_readable()           # the ZAP handler answers the CURVE handshake
            time.sleep(0.01)
        got = 0
        c0 = time.process_time()        # every thread of the process: libzmq's I/O threads too
        t0 = time.perf_counter()
        sent = 1
        while got < frames:
            while sent < frames and sent - got < 5000 and b.send("a" * 40, data):
                sent += 1
            a.router.poll(100)
            got += len(a.recv_all())
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"frames_s": frames / wall, "cpu_us_per_frame": cpu / frames * 1e6}
    finally:
        a.close()
        b.close()
        ctx_a.term()
        ctx_b.term()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=None, help="requests per redis-benchmark run")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--transport-frames", type=int, default=200000)
    args = ap.parse_args()
    n = args.n or (10000 if args.quick else 50000)
    rounds = args.rounds or (3 if args.quick else 5)
    if not shutil.which("redis-benchmark"):
        sys.exit("redis-benchmark is needed (apt-get install redis-tools)")
    tmp = tempfile.mkdtemp(prefix="bench-bus-secret-")
    procs = []
    runs = {"open": [], "secured": []}
    transport = {"open": [], "secured": []}
    for r in range(rounds):
        for name in transport:
            transport[name].append(transport_rate(name == "secured", args.transport_frames,
                                                  free_port()))
        o, c = transport["open"][-1], transport["secured"][-1]
        log("transport round %d: open %.0f frames/s %.1f us CPU/frame, CURVE %.0f frames/s "
            "%.1f us CPU/frame" % (r + 1, o["frames_s"], o["cpu_us_per_frame"], c["frames_s"],
                                   c["cpu_us_per_frame"]))
    try:
        setups = {}
        for name, extra in (("open", []), ("secured", ["--cluster-secret", SECRET])):
            log("starting 3 %s nodes with --workers %d" % (name, args.workers))
            nodes, clients = start_cluster(3, args.workers, tmp, lambda i, extra=extra: extra, name)
            procs.extend(p for _, p in nodes)
            secured = clients[0].info("cluster").get("cluster_bus_secured") == 1
            assert secured == (name == "secured"), "bus security is not what was asked"
            setups[name] = (nodes[0][0], [p for _, p in nodes])
        for r in range(rounds):
            order = list(setups.items())
            if r % 2:
                order.reverse()         # neither side always runs first
            for name, (port, node_procs) in order:
                cpu0 = cluster_cpu(node_procs)
                res = redis_benchmark(port, n, 50, ["ADDJOB", "q", BODY, "0", "REPLICATE", "3"])
                # CPU of the 3 nodes per ADDJOB (3 copies): steadier than req/s under load
                res["cpu_us_per_job"] = (cluster_cpu(node_procs) - cpu0) / n * 1e6
                log("round %d %-7s %8.0f req/s  p50 %.3f ms  p99 %.3f ms  %.0f us CPU/job"
                    % (r + 1, name, res["rps"], res["p50_ms"], res["p99_ms"],
                       res["cpu_us_per_job"]))
                runs[name].append(res)
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = medians(runs)
    print()
    print("ADDJOB REPLICATE 3, 3 nodes x %d workers, 50 connections, %d x %d requests (medians)"
          % (args.workers, rounds, n))
    print("%-22s %10s %9s %9s %14s" % ("bus", "req/s", "p50 ms", "p99 ms", "CPU us/job"))
    for name, s in summary.items():
        print("%-22s %10.0f %9.3f %9.3f %14.0f" % (name, s["rps"], s["p50_ms"], s["p99_ms"],
                                                   s["cpu_us_per_job"]))
    o, s = summary["open"], summary["secured"]
    print("secured / open: throughput %.2fx, p99 %.2fx, CPU per job %.2fx"
          % (s["rps"] / o["rps"], s["p99_ms"] / o["p99_ms"], s["cpu_us_per_job"] / o["cpu_us_per_job"]))
    t = medians(transport, ("frames_s", "cpu_us_per_frame"))
    to, ts = t["open"], t["secured"]
    print("bus transport alone, %d-byte frames (medians): open %.0f frames/s, %.1f us CPU/frame; "
          "CURVE %.0f frames/s (%.2fx), %.1f us CPU/frame (+%.1f us)"
          % (TRANSPORT_FRAME, to["frames_s"], to["cpu_us_per_frame"], ts["frames_s"],
             ts["frames_s"] / to["frames_s"], ts["cpu_us_per_frame"],
             ts["cpu_us_per_frame"] - to["cpu_us_per_frame"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "transport": transport}, f, indent=2)


if __name__ == "__main__":
    main()
