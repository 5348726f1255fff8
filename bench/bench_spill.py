"""More jobs than memory (docs/memory.md, "Spilling"), one run on this machine:

1. in memory: ours with `spill no` and room for the whole backlog (--inmem-jobs), the rates
   a spilling node is compared with;
2. spilling: --jobs jobs of --body bytes on `maxmemory` --maxmemory: ADDJOB rate, drain rate
   (GETJOB + ACKJOB), the node's CPU per job in each, GETJOB p99 during the drain,
   used_memory, RSS and index bytes per spilled job, every body checked;
3. RabbitMQ (Debian's rabbitmq-server, bench/spill_rabbitmq.py): the same backlog, durable
   classic queues in CQv2 and lazy mode, persistent messages, publisher confirms, pika.

The same client shape for ours in 1 and 2: one pipelined redis-py producer (1,000 ADDJOB per
round trip) and one consumer (GETJOB COUNT 500, then ACKJOB of those). Usage:
    python bench/bench_spill.py --jobs 10000000 --maxmemory 2gb
"""
import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import zlib

import redis

from disque.harness.node import Node, disque_argv, server_command
from disque.harness.ports import lease_port

import spill_rabbitmq as rabbit
from common.nodes import node_cpu, node_rss

QUEUES = ["bq0", "bq1", "bq2", "bq3"]
PIPELINE = 1000
GETJOB_COUNT = 500
PROGRESS_S = 5.0


def body_of(i, size, pad):
    return struct.pack("<Q", i) + pad[:size - 8]


def run_ours(label, n, body_size, workers, extra, workdir, command=None):
    lease = lease_port()
    port = lease.port
    os.makedirs(workdir, exist_ok=True)
    node = Node(disque_argv(port, workers, "--dir", workdir, *extra, command=command),
                port=port, cwd=workdir,
                log_path=os.path.join(workdir, "node.log"))
    node.start(children=workers)
    try:
        c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
        pad = os.urandom(body_size)
        crc = 0
        peak_used = peak_rss = 0
        peak = {}
        pipe = c.pipeline(transaction=False)
        cpu0 = node_cpu(node.pid)
        t0 = last = time.monotonic()
        for i in range(n):
            b = body_of(i, body_size, pad)
            crc ^= zlib.crc32(b)
            pipe.execute_command("ADDJOB", QUEUES[i & 3], b, 0)
            if i % PIPELINE == PIPELINE - 1 or i == n - 1:
                for reply in pipe.execute(raise_on_error=False):
                    if isinstance(reply, Exception):
                        raise SystemExit("%s: ADDJOB refused after %d jobs: %s" % (label, i, reply))
                now = time.monotonic()
                if now - last >= PROGRESS_S or i == n - 1:
                    last = now
                    info = c.info("memory")
                    rss = node_rss(node.pid)
                    peak_used, peak_rss = max(peak_used, info["used_memory"]), max(peak_rss, rss)
                    if info["spilled_jobs"] >= peak.get("spilled_jobs", 0):
                        peak = info
                    print("  %s add %d/%d %.0f/s used %.0f MB rss %.0f MB spilled %d"
                          % (label, i + 1, n, (i + 1) / (now - t0), info["used_memory"] / 1e6,
                             rss / 1e6, info["spilled_jobs"]), flush=True)
        add_s = time.monotonic() - t0
        add_cpu = node_cpu(node.pid) - cpu0
        seen = 0
        crc2 = 0
        lat = []
        cpu0 = node_cpu(node.pid)
        t0 = last = time.monotonic()
        while seen < n:
            g0 = time.perf_counter()
            jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", GETJOB_COUNT, "FROM", *QUEUES)
            lat.append(time.perf_counter() - g0)
            if not jobs:
                time.sleep(0.001)
                continue
            for _q, _jid, body in jobs:
                crc2 ^= zlib.crc32(body)
            c.execute_command("ACKJOB", *[j[1] for j in jobs])
            seen += len(jobs)
            now = time.monotonic()
            if now - last >= PROGRESS_S:
                last = now
                print("  %s drain %d/%d %.0f/s" % (label, seen, n, seen / (now - t0)), flush=True)
        drain_s = time.monotonic() - t0
        drain_cpu = node_cpu(node.pid) - cpu0
        lat.sort()
        end = c.info("memory")
        return {"label": label, "jobs": n, "add_rate": n / add_s, "drain_rate": n / drain_s,
                "add_cpu_us": add_cpu * 1e6 / n, "drain_cpu_us": drain_cpu * 1e6 / n,
                "getjob_p50_ms": lat[len(lat) // 2] * 1e3, "getjob_p99_ms": lat[len(lat) * 99 // 100] * 1e3,
                "peak_used_memory": peak_used, "peak_rss": peak_rss,
                "spilled_at_peak": peak.get("spilled_jobs", 0),
                "index_bytes_per_spilled": (peak["spill_index_bytes"] / peak["spilled_jobs"]
                                            if peak.get("spilled_jobs") else 0),
                "rss_per_job": peak_rss / n, "disk_peak": peak.get("spill_disk_bytes", 0),
                "compactions": end.get("spill_compactions", 0),
                "bodies_ok": crc == crc2, "used_after_drain": end["used_memory"]}
    finally:
        node.stop()
        lease.release()


def run_rabbit(mode, n, body_size, workdir):
    lease = lease_port()        # AMQP port; the helper checks port + 10000 / + 20000 itself
    handle = rabbit.start_rabbitmq(os.path.join(workdir, "rabbit-" + mode), lease.port)
    try:
        return rabbit.run_rabbitmq_backlog(n, body_size, mode, lease.port, handle=handle,
                                           progress=lambda s: print("  rabbitmq " + s, flush=True))
    finally:
        rabbit.stop_rabbitmq(handle)
        lease.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000_000)
    ap.add_argument("--inmem-jobs", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--maxmemory", default="2gb")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rabbitmq", default="lazy,cqv2", help="modes, or 'none'")
    ap.add_argument("--rabbitmq-jobs", type=int, default=None, help="default: --jobs")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--server-cmd", default=os.environ.get("DISQUE_SERVER_CMD"),
                    help="command for our server (default: this interpreter's -m disque)")
    a = ap.parse_args()
    command = server_command(a.server_cmd) if a.server_cmd else None
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-spill-")
    results = []
    try:
        print("1. in memory: %d jobs, spill no" % a.inmem_jobs, flush=True)
        inmem = run_ours("in-memory", a.inmem_jobs, a.body, a.workers,
                         ["--maxmemory", "16gb", "--spill", "no"], os.path.join(workdir, "inmem"),
                         command)
        print("  result", json.dumps(inmem), flush=True)
        print("2. spilling: %d jobs on maxmemory %s" % (a.jobs, a.maxmemory), flush=True)
        spill = run_ours("spilling", a.jobs, a.body, a.workers, ["--maxmemory", a.maxmemory],
                         os.path.join(workdir, "spill"), command)
        print("  result", json.dumps(spill), flush=True)
        shutil.rmtree(os.path.join(workdir, "spill"), ignore_errors=True)
        results += [inmem, spill]
        modes = [] if a.rabbitmq == "none" else a.rabbitmq.split(",")
        rabbits = []
        for mode in modes:
            print("3. RabbitMQ %s: %d messages" % (mode, a.rabbitmq_jobs or a.jobs), flush=True)
            rabbits.append(run_rabbit(mode, a.rabbitmq_jobs or a.jobs, a.body, workdir))
            print("  result", json.dumps(rabbits[-1]), flush=True)
        print()
        print("| run | jobs | add/publish per s | drain per s | node CPU per job, add / drain | "
              "GETJOB p99 ms | peak RSS MB | RAM per job | bodies |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in results:
            print("| ours, %s | %d | %.0f | %.0f | %.1f / %.1f µs | %.1f | %.0f | %s | %s |" % (
                r["label"], r["jobs"], r["add_rate"], r["drain_rate"], r["add_cpu_us"],
                r["drain_cpu_us"], r["getjob_p99_ms"],
                r["peak_rss"] / 1e6, ("index %.0f B / spilled job, RSS %.0f B / job"
                                       % (r["index_bytes_per_spilled"], r["rss_per_job"]))
                if r["spilled_at_peak"] else "RSS %.0f B / job" % r["rss_per_job"],
                "ok" if r["bodies_ok"] else "BAD"))
        for r in rabbits:
            print("| RabbitMQ 3.10, %s | %d | %.0f | %.0f | - | - | %.0f | RSS %.0f B / job | %s |" % (
                r["mode"], r["jobs"], r["publish_rate"], r["drain_rate"], r["rss_peak_bytes"] / 1e6,
                r["rss_peak_bytes"] / r["jobs"], "ok" if r["ok"] else "BAD"))
        print()
        print("spilling / in memory: ADDJOB %.2fx, drain %.2fx; node CPU per job %.2fx / %.2fx; "
              "used_memory peak %.0f MB; spill disk peak %.0f MB; compactions %d"
              % (spill["add_rate"] / inmem["add_rate"], spill["drain_rate"] / inmem["drain_rate"],
                 spill["add_cpu_us"] / inmem["add_cpu_us"], spill["drain_cpu_us"] / inmem["drain_cpu_us"],
                 spill["peak_used_memory"] / 1e6, spill["disk_peak"] / 1e6, spill["compactions"]))
        for r in rabbits:
            print("ours spilling / RabbitMQ %s: publish %.2fx, drain %.2fx"
                  % (r["mode"], spill["add_rate"] / r["publish_rate"],
                     spill["drain_rate"] / r["drain_rate"]))
        ok = all(r["bodies_ok"] for r in results) and all(r["ok"] for r in rabbits)
        return 0 if ok else 1
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
