"""Bytes per job: INFO used_memory (what maxmemory is held against) vs the RSS growth.

Starts one node, adds N jobs (pipelined, one client), reads INFO memory before and after,
then acks every job and reads it again. With --disque-binary it measures the original C
server the same way. See docs/memory.md.

    python bench/mem_per_job.py --jobs 1000000 --body 100 --workers 2
    python bench/mem_per_job.py --jobs 1000000 --body 100 --disque-binary <original>/src/disque-server
"""
import argparse
import shutil
import tempfile
import time

import redis

from common.cluster import Proc
from disque.harness import NodeStartError, disque_argv, lease_port, original_argv


def info_memory(c):
    info = c.info("memory")
    return int(info["used_memory"]), int(info["used_memory_rss"])


def settle(c, seconds=1.0):
    """INFO memory once the figures stop moving (the RSS lags the frees a little)."""
    last = info_memory(c)
    for _ in range(20):
        time.sleep(seconds / 4)
        cur = info_memory(c)
        if cur == last:
            break
        last = cur
    return last


def start(args, workdir, port):
    if args.disque_binary:
        argv = original_argv(args.disque_binary, port, workdir)
    else:
        argv = disque_argv(port, args.workers)
    proc = Proc(argv, workdir, port=port)
    try:
        proc.wait_ready(30)
    except NodeStartError as e:
        proc.stop()
        raise SystemExit("server did not start: %s" % e)
    # RESP2: the original answers redis-py's default HELLO 3 with an error
    return proc, redis.Redis(port=port, socket_timeout=120, protocol=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--body", type=int, default=100, help="body bytes")
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--disque-binary", help="the original disque-server (default: ours)")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="mem-per-job-")
    lease = lease_port()
    proc, c = start(args, workdir, lease.port)
    try:
        body = b"x" * args.body
        used0, rss0 = settle(c)
        ids = []
        for base in range(0, args.jobs, 1000):
            pipe = c.pipeline(transaction=False)
            for i in range(base, min(base + 1000, args.jobs)):
                pipe.execute_command("ADDJOB", "q%d" % (i % args.queues), body, 0)
            ids += pipe.execute()
        used1, rss1 = settle(c)
        for base in range(0, len(ids), 1000):
            c.execute_command("ACKJOB", *ids[base:base + 1000])
        used2, rss2 = settle(c)
        n = args.jobs
        print("server=%s jobs=%d body=%d" % (args.disque_binary or "ours --workers %d" % args.workers,
                                               n, args.body))
        print("  fresh:      used_memory=%d used_memory_rss=%d" % (used0, rss0))
        print("  with jobs:  used_memory=%d (+%.1f B/job) used_memory_rss=%d (+%.1f B/job)" % (
            used1, (used1 - used0) / n, rss1, (rss1 - rss0) / n))
        print("  acked:      used_memory=%d used_memory_rss=%d" % (used2, rss2))
    finally:
        proc.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
