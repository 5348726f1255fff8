#!/usr/bin/env python3
"""Scale benchmark of the Spark stats pipeline (disque-stats-ingest, batch mode).

Generates a day of 1-second stats lines from 10 nodes x 8 workers (86,400 x 80 = 6,912,000
lines, schema v1, ~1.3 KB each: 6 commands, 5 top queues, bus maps, 14 histogram buckets),
rotated like the server does (64 MB files, stats.jsonl, stats.jsonl.1, ...), then runs the
batch job on local[2] and prints rows/s ingested and the peak memory of the whole process
tree (this Python driver + the Spark JVM), sampled with psutil every 0.2 s.

    .venv/bin/python bench/bench_spark.py --scale 0.01      # quick: 69,120 lines
    .venv/bin/python bench/bench_spark.py                   # the full day (needs ~9 GB of disk)
    .venv/bin/python bench/bench_spark.py --scale 0.1 --json /tmp/bench_spark.json

--scale shortens the day (seconds = 86400 * scale); nodes and workers stay 10 x 8. The
generated input goes to a temporary directory (removed unless --keep; --dir reuses one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from multiprocessing import Pool, Value

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

T0 = 1795219200.0      # 2026-11-21 00:00:00 UTC
BOUNDS = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]
ROTATE_BYTES = 64 * 1024 * 1024
# share of commands per bucket of the latency histogram (sums to 1000)
LAT_SHARE = [0, 40, 300, 380, 180, 60, 25, 9, 4, 1, 1, 0, 0, 0]

LINE = ('{"v":1,"ts":%.3f,"node":"%s","addr":"%s","worker":%d,"pid":%d,"uptime_s":%.3f,'
        '"commands":{"addjob":%d,"getjob":%d,"ackjob":%d,"nack":%d,"qlen":%d,"info":%d},'
        '"jobs":{"added":%d,"delivered":%d,"acked":%d,"nacked":%d,"requeued":%d,"expired":%d,"deleted":%d},'
        '"gauges":{"jobs":%d,"queued":%d,"active":%d,"queues":%d,"blocked":%d},'
        '"top_queues":[%s],'
        '"bus":{"in":{"REPLJOB":%d,"GOTJOB":%d,"SETACK":%d},"out":{"REPLJOB":%d,"GOTJOB":%d,"SETACK":%d}},'
        '"rss":%d,"cpu_user":%.3f,"cpu_sys":%.3f,'
        '"latency_us":{"bounds":' + json.dumps(BOUNDS, separators=(",", ":")) + ',"counts":[%s]}}\n')
QUEUE = ('{"queue":"%s","len":%d,"jobs_in":%d,"jobs_out":%d,"nacks":%d,"additional_deliveries":%d}')


def node_id(n: int) -> str:
    return ("%08x" % (0x5eed0000 + n)) * 5


_COUNTER = None


def _init_worker(counter):
    global _COUNTER
    _COUNTER = counter


def gen_node(args):
    """Write one node's day into out_dir/node-NN/ (rotated files); returns (lines, bytes)."""
    n, seconds, workers, out_dir, bad_every = args
    d = os.path.join(out_dir, "node-%02d" % n)
    os.makedirs(d, exist_ok=True)
    nid = node_id(n)
    addr = "10.0.0.%d:7711" % (n + 1)
    # per worker state: counters
    st = []
    for w in range(workers):
        st.append({"pid": 1000 + 100 * n + w, "start": T0 - 1.0 - 0.01 * w, "c": [0] * 6, "j": [0] * 7,
                   "b": [0] * 6, "lat": [0] * 14, "cpu": 0.0, "q": [[0, 0, 0, 0, 0] for _ in range(5)],
                   "frac": 0.0})
    chunks = []
    size = 0
    files = []
    nlines = 0
    total_bytes = 0
    part = [0]

    def flush(final=False):
        nonlocal chunks, size, total_bytes
        if not chunks:
            return
        data = "".join(chunks)
        # rotate: finished files get increasing suffixes, the last one is stats.jsonl
        name = "stats.jsonl" if final else "stats.jsonl.%d" % (part[0] + 1)
        part[0] += 1
        with open(os.path.join(d, name), "w") as f:
            f.write(data)
        files.append(name)
        total_bytes += len(data)
        chunks = []
        size = 0

    restart_at = seconds // 2 if n == 3 else -1
    base = 40.0 + 10.0 * n
    for s in range(seconds):
        ts = T0 + s + 0.001 * n
        # daily pattern: busier in the "afternoon"; worker w gets a share (skew)
        day = 1.0 + 0.5 * (((s % 86400) / 43200.0) - 1.0) ** 2
        for w in range(workers):
            x = st[w]
            if s == restart_at and w == 5:
                x.update({"pid": x["pid"] + 50000, "start": ts - 0.5, "c": [0] * 6, "j": [0] * 7, "b": [0] * 6,
                          "lat": [0] * 14, "cpu": 0.0, "q": [[0, 0, 0, 0, 0] for _ in range(5)]})
            r = base * day * (1.0 + 0.15 * w) + x["frac"]
            k = int(r)
            x["frac"] = r - k
            c = x["c"]
            c[0] += k; c[1] += k; c[2] += k - (k >> 4); c[3] += k >> 5; c[4] += 1; c[5] += (s % 10 == 0)
            j = x["j"]
            j[0] += k; j[1] += k + (k >> 5); j[2] += k - (k >> 4); j[3] += k >> 5; j[4] += k >> 6
            j[5] += (s % 97 == 0); j[6] += k >> 7
            b = x["b"]
            b[0] += 2; b[1] += 1; b[2] += 1; b[3] += 2; b[4] += 1; b[5] += 1
            tot = sum((k, k, k - (k >> 4)))
            lat = x["lat"]
            for i in range(14):
                lat[i] += (tot * LAT_SHARE[i]) // 1000
            x["cpu"] += 0.002 * k
            qs = []
            for qi, q in enumerate(x["q"]):
                inn = (k >> (qi + 1)) + 1
                out = inn - (1 if (qi == 0 and w == 0 and s % 3) else 0)
                q[0] = max(0, q[0] + inn - out)
                q[1] += inn; q[2] += out; q[3] += (k >> 8); q[4] += (k >> 6)
                qs.append(QUEUE % ("q%d-%d" % (w, qi), q[0] + 10 * (5 - qi), q[1], q[2], q[3], q[4]))
            up = ts - x["start"]
            line = LINE % (ts, nid, addr, w, x["pid"], up, c[0], c[1], c[2], c[3], c[4], c[5],
                           j[0], j[1], j[2], j[3], j[4], j[5], j[6],
                           k + 5, k // 2, k - k // 2 + 5, 5, s % 3,
                           ",".join(qs), b[0], b[1], b[2], b[3], b[4], b[5],
                           30_000_000 + 1000 * (s % 600) + 4096 * w, x["cpu"] * 0.8, x["cpu"] * 0.2,
                           ",".join(map(str, lat)))
            chunks.append(line)
            size += len(line)
            nlines += 1
        if bad_every and s % bad_every == bad_every - 1:
            chunks.append('{"ts": %.3f, "node": "%s", "worker": "oops"}\n' % (ts, nid))
            chunks.append("truncated {\"v\":1,\n")
            nlines += 2
        if size >= ROTATE_BYTES:
            flush()
        if _COUNTER is not None and s % 2000 == 1999:
            with _COUNTER.get_lock():
                _COUNTER.value += 2000 * workers
    flush(final=True)
    return nlines, total_bytes, len(files)


def generate(out_dir: str, scale: float, nodes: int, workers: int, procs: int, bad_every: int):
    seconds = max(2, int(round(86400 * scale)))
    t = time.monotonic()
    jobs = [(n, seconds, workers, out_dir, bad_every) for n in range(nodes)]
    lines = nbytes = nfiles = 0
    total = nodes * workers * seconds
    counter = Value("q", 0)
    with Pool(procs, initializer=_init_worker, initargs=(counter,)) as pool:
        pending = pool.map_async(gen_node, jobs)
        while not pending.ready():
            pending.wait(5.0)
            el = time.monotonic() - t
            done = counter.value
            print(f"  generating: {done:,}/{total:,} lines ({100.0 * done / total:.0f}%), {el:.0f}s, "
                  f"{done / el:,.0f} lines/s", flush=True)
        for nl, nb, nf in pending.get():
            lines += nl
            nbytes += nb
            nfiles += nf
    return {"seconds_of_stats": seconds, "lines": lines, "bytes": nbytes, "files": nfiles,
            "gen_seconds": time.monotonic() - t}


class MemorySampler(threading.Thread):
    """Peak RSS of this process + all descendants (the Spark JVM), sampled."""

    def __init__(self, interval=0.2):
        super().__init__(daemon=True)
        import psutil
        self.psutil = psutil
        self.me = psutil.Process(os.getpid())
        self.interval = interval
        self.stop = threading.Event()
        self.peak_total = self.peak_jvm = self.peak_py = 0
        self.cpu = {}          # pid -> last seen user+sys CPU seconds
        self.cpu0 = {}

    def cpu_seconds(self):
        return sum(v - self.cpu0.get(p, 0.0) for p, v in self.cpu.items())

    def _cpu(self, p):
        t = p.cpu_times()
        v = t.user + t.system
        if p.pid not in self.cpu0:
            self.cpu0[p.pid] = v if p.pid == self.me.pid else 0.0
        self.cpu[p.pid] = v

    def run(self):
        while not self.stop.wait(self.interval):
            try:
                py = self.me.memory_info().rss
                self._cpu(self.me)
                jvm = 0
                for ch in self.me.children(recursive=True):
                    try:
                        rss = ch.memory_info().rss
                        self._cpu(ch)
                    except self.psutil.Error:
                        continue
                    jvm += rss
            except self.psutil.Error:
                continue
            self.peak_py = max(self.peak_py, py)
            self.peak_jvm = max(self.peak_jvm, jvm)
            self.peak_total = max(self.peak_total, py + jvm)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the day (default 1.0 = 6.9M lines)")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--procs", type=int, default=2, help="generator processes")
    ap.add_argument("--bad-every", type=int, default=3600, help="2 bad lines per node every N seconds (0: none)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir); input reused if present")
    ap.add_argument("--keep", action="store_true", help="keep the generated input and the output")
    ap.add_argument("--no-report", action="store_true", help="skip the HTML report stage")
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)

    try:
        from disque_spark import ingest
    except ImportError:
        sys.stderr.write("install the spark extra first: .venv/bin/pip install -e '.[spark]'\n")
        return 2

    work = args.dir or tempfile.mkdtemp(prefix="bench-spark-")
    inp, out = os.path.join(work, "in"), os.path.join(work, "out")
    expected = args.nodes * args.workers * max(2, int(round(86400 * args.scale)))
    print(f"bench_spark: {args.nodes} nodes x {args.workers} workers x "
          f"{max(2, int(round(86400 * args.scale))):,} s = {expected:,} stats lines; work dir {work}")
    if os.path.isdir(inp) and os.listdir(inp):
        gen = {"reused": True}
        print("  reusing the input in", inp)
    else:
        gen = generate(inp, args.scale, args.nodes, args.workers, args.procs, args.bad_every)
        print(f"generated {gen['lines']:,} lines, {gen['bytes'] / 1e6:,.0f} MB in {gen['files']} files, "
              f"{gen['gen_seconds']:.1f}s ({gen['lines'] / gen['gen_seconds']:,.0f} lines/s)")

    sampler = MemorySampler()
    sampler.start()
    time.sleep(0.5)
    t = time.monotonic()
    res = ingest.run(inp, out, master=args.master, driver_memory=args.driver_memory, report=not args.no_report)
    wall = time.monotonic() - t
    sampler.stop.set()
    sampler.join()
    job = sum(s for _, s in res.stages)
    load = os.getloadavg()
    fig = {
        "lines": res.rows_read, "bad_lines": res.bad_lines, "input_bytes": res.input_bytes,
        "files": res.files, "master": args.master, "driver_memory": args.driver_memory,
        "wall_seconds_incl_spark_start": wall, "job_seconds": job,
        "rows_per_s": res.rows_read / job if job else None,
        "rows_per_s_incl_spark_start": res.rows_read / wall,
        "mb_per_s": (res.input_bytes or 0) / 1e6 / job if job else None,
        "peak_rss_total": sampler.peak_total, "peak_rss_jvm": sampler.peak_jvm, "peak_rss_python": sampler.peak_py,
        "cpu_seconds": sampler.cpu_seconds(),
        "rows_per_cpu_s": res.rows_read / sampler.cpu_seconds() if sampler.cpu_seconds() else None,
        "stages": res.stages, "tables": res.tables, "generation": gen, "scale": args.scale,
        "loadavg_at_end": load, "cpus": os.cpu_count(),
    }
    print()
    print(f"ingested {res.rows_read:,} lines ({(res.input_bytes or 0) / 1e6:,.0f} MB, {res.bad_lines} bad) "
          f"on {args.master}")
    print(f"  job time      {job:8.1f} s   (wall incl. Spark start {wall:.1f} s)")
    print(f"  rows/s        {fig['rows_per_s']:10,.0f}   ({fig['mb_per_s']:.1f} MB/s of JSON)")
    print(f"  CPU time      {fig['cpu_seconds']:8.1f} s   (JVM + Python; {fig['rows_per_cpu_s']:,.0f} rows per "
          f"CPU-second: the figure that does not depend on other load on the machine)")
    print(f"  peak memory   {sampler.peak_total / 2**20:8,.0f} MiB total "
          f"(JVM {sampler.peak_jvm / 2**20:,.0f} MiB, Python {sampler.peak_py / 2**20:,.0f} MiB)")
    for name, s in res.stages:
        print(f"    {name:48s} {s:8.1f} s")
    print("  tables: " + ", ".join(f"{k} {v:,}" for k, v in res.tables.items()))
    print(f"  load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} cpus)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(fig, f, indent=2, default=str)
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
