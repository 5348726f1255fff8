"""RSS the operating system sees while a node spills and after a drain (issue 47).

One node (`--workers N`, `maxmemory` M, defaults otherwise), fresh: its RSS and PSS summed
over the front-end and the workers. Then --jobs jobs of --body bytes pipelined into it (one
redis-py producer, 1,000 ADDJOB per round trip over 4 queues), drained (GETJOB COUNT 500 then
ACKJOB), and --after seconds of rest. A thread samples the processes' RSS every 100 ms from
the first ADDJOB to the end. Printed: the rates and the node's CPU per job of the fill and
the drain, the fresh node, the peak, the end, and both against the
bounds issue 47 sets: peak <= 1.1 x maxmemory + fresh RSS; after the drain <= 1.2 x fresh +
16 MB. With --pause-at F the drain stops for --after seconds once a fraction F of the jobs
came back, and prints used_memory, the spill index and RSS there (a backlog partly drained).

    python bench/bench_rss.py                         # 600,000 x 1 KB on maxmemory 256mb
    python bench/bench_rss.py --jobs 10000000 --maxmemory 2gb
    python bench/bench_rss.py --jobs 2000000 --pause-at 0.8
"""
import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

import psutil
import redis

from common.nodes import leased_node, node_cpu, node_processes, node_rss, rss_by_process
from disque.harness.node import disque_argv

QUEUES = ["rq0", "rq1", "rq2", "rq3"]
PIPELINE = 1000
GETJOB_COUNT = 500
SAMPLE_S = 0.1
MB = 1 << 20


def parse_size(text):
    units = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
    text = text.lower()
    for unit, mult in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * mult)
    return int(text)


def pss_total(pid):
    total = 0
    for p in node_processes(pid):
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass
    return total


class Sampler(threading.Thread):
    """RSS summed over the node's processes every 100 ms; the peak and when it was."""

    def __init__(self, node):
        super().__init__(daemon=True)
        self.node = node
        self.peak = 0
        self.peak_parts = {}
        self.peak_phase = ""
        self.phase = "fill"
        self.last = 0
        self.samples = 0
        self.done = threading.Event()
        self.trace = []             # (seconds, phase, RSS per process), with --trace
        self.t0 = time.monotonic()

    def run(self):
        while not self.done.is_set():
            parts = rss_by_process(self.node.pid)
            total = sum(parts.values())
            self.last = total
            self.trace.append((time.monotonic() - self.t0, self.phase, list(parts.values())))
            self.samples += 1
            if total > self.peak:
                self.peak, self.peak_parts, self.peak_phase = total, parts, self.phase
            self.done.wait(SAMPLE_S)


def fill_and_drain(port, n, body_size, sampler, info_every, pause_at=None, pause_s=0.0):
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
    pad = os.urandom(body_size)
    pipe = c.pipeline(transaction=False)
    pid = sampler.node.pid
    cpu0 = node_cpu(pid)
    t0 = time.monotonic()
    for i in range(n):
        pipe.execute_command("ADDJOB", QUEUES[i & 3], pad, 0)
        if i % PIPELINE == PIPELINE - 1 or i == n - 1:
            for reply in pipe.execute(raise_on_error=False):
                if isinstance(reply, Exception):
                    raise SystemExit("ADDJOB refused after %d jobs: %s" % (i, reply))
            if (i + 1) % info_every < PIPELINE or i == n - 1:
                m = c.info("memory")
                print("  add %d/%d used %.0f MB rss %.0f MB (sampled peak %.0f) spilled %d"
                      % (i + 1, n, m["used_memory"] / MB, sampler.last / MB,
                         sampler.peak / MB, m.get("spilled_jobs", 0)), flush=True)
    add_s = time.monotonic() - t0
    add_cpu = node_cpu(pid) - cpu0
    sampler.phase = "drain"
    cpu0 = node_cpu(pid)
    seen = 0
    t0 = time.monotonic()
    paused = 0.0
    while seen < n:
        if pause_at is not None and seen >= pause_at * n:
            pause_at = None
            p0 = time.monotonic()
            time.sleep(pause_s)
            m = c.info("memory")
            print("  drain paused at %d/%d for %.0f s: used %.1f MB, spill index %.1f MB, "
                  "spilled %d, RSS %.1f MB" % (seen, n, pause_s, m["used_memory"] / MB,
                                               m.get("spill_index_bytes", 0) / MB,
                                               m.get("spilled_jobs", 0), sampler.last / MB),
                  flush=True)
            paused = time.monotonic() - p0
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", GETJOB_COUNT, "FROM", *QUEUES)
        if not jobs:
            time.sleep(0.001)
            continue
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
        seen += len(jobs)
        if seen % info_every < GETJOB_COUNT:
            print("  drain %d/%d rss %.0f MB" % (seen, n, sampler.last / MB), flush=True)
    drain_s = time.monotonic() - t0 - paused
    drain_cpu = node_cpu(pid) - cpu0
    c.close()
    return add_s, drain_s, add_cpu, drain_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=600_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--maxmemory", default="256mb")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--after", type=float, default=3.0, help="seconds of rest after the drain")
    ap.add_argument("--extra", default="", help="more server options, space separated")
    ap.add_argument("--trace", default=None, help="write every sample (MB per process) here")
    ap.add_argument("--pause-at", type=float, default=None,
                    help="pause the drain for --after seconds once this fraction came back")
    a = ap.parse_args()
    maxmem = parse_size(a.maxmemory)
    workdir = tempfile.mkdtemp(prefix="bench-rss-")

    def argv_of(port):
        return disque_argv(port, a.workers, "--dir", workdir, "--maxmemory", a.maxmemory,
                           *a.extra.split())
    try:
        with leased_node("node", argv_of, a.workers, workdir) as node:
            time.sleep(1.0)             # the fresh node settles (first memory polls, imports)
            fresh = node_rss(node.pid)
            fresh_parts = rss_by_process(node.pid)
            fresh_pss = pss_total(node.pid)
            print("fresh node: RSS %.1f MB, PSS %.1f MB" % (fresh / MB, fresh_pss / MB), flush=True)
            sampler = Sampler(node)
            sampler.start()
            add_s, drain_s, add_cpu, drain_cpu = fill_and_drain(node.port, a.jobs, a.body, sampler,
                                            max(PIPELINE, a.jobs // 10), a.pause_at, a.after)
            sampler.phase = "rest"
            time.sleep(a.after)
            end = node_rss(node.pid)
            end_parts = rss_by_process(node.pid)
            sampler.done.set()
            sampler.join()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if a.trace:
        with open(a.trace, "w") as f:
            for t, phase, parts in sampler.trace:
                f.write("%.1f %s %s\n" % (t, phase, " ".join("%.0f" % (v / MB) for v in parts)))
    peak_bound = 1.1 * maxmem + fresh
    end_bound = 1.2 * fresh + 16 * MB
    print()
    print("jobs %d x %d B, maxmemory %s, --workers %d: add %.0f/s, drain %.0f/s"
          % (a.jobs, a.body, a.maxmemory, a.workers, a.jobs / add_s, a.jobs / drain_s))
    print("node CPU per job: add %.1f us, drain %.1f us"
          % (add_cpu / a.jobs * 1e6, drain_cpu / a.jobs * 1e6))
    print("fresh RSS %.1f MB; peak RSS %.1f MB (during %s; per process %s; %d samples)"
          % (fresh / MB, sampler.peak / MB, sampler.peak_phase,
             " ".join("%.0f" % (v / MB) for v in sampler.peak_parts.values()), sampler.samples))
    print("peak bound 1.1 x maxmemory + fresh = %.1f MB: %s"
          % (peak_bound / MB, "within" if sampler.peak <= peak_bound else "OVER"))
    print("RSS %.0f s after the drain %.1f MB; bound 1.2 x fresh + 16 MB = %.1f MB: %s"
          % (a.after, end / MB, end_bound / MB, "within" if end <= end_bound else "OVER"))
    print("per process (front-end, workers), fresh %s MB, after the drain %s MB"
          % (" ".join("%.1f" % (v / MB) for v in fresh_parts.values()),
             " ".join("%.1f" % (v / MB) for v in end_parts.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
