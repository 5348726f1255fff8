#!/usr/bin/env python3
"""Scale benchmark of the Spark stats pipeline (disque-stats-ingest, batch mode).

Generates a day of 1-second stats lines from 10 nodes x 8 workers (86,400 x 80 = 6,912,000
lines: 6 commands, 5 top queues, bus maps, 14 histogram buckets) in schema v1 (~1.2 KB a
line) and/or v2 (the server's producer, ~0.5 KB), rotated like the server does (64 MB files,
stats.jsonl, stats.jsonl.1, ...). Then, in one Spark session on local[2], for each schema:
the bare scan (spark.read.schema(...).json -> Parquet) of the same files, the full batch job,
the bare scan again; it prints the job time, the bare scan time and their ratio, rows/s, the
CPU seconds and the peak memory of the whole process tree (this Python driver + the Spark
JVM, sampled with psutil every 0.2 s) for each, and the bytes per line.

    .venv/bin/python bench/bench_spark.py --scale 0.01      # quick: 69,120 lines per schema
    .venv/bin/python bench/bench_spark.py                   # the full day (needs ~9 GB of disk)
    .venv/bin/python bench/bench_spark.py --scale 0.1 --json /tmp/bench_spark.json
    .venv/bin/python bench/bench_spark.py --scale 0.1 --schema v2 --floor   # + the per-sample floor
    .venv/bin/python bench/bench_spark.py --scale 1 --schema v2 --new-hour  # + one new hour of the day

--scale shortens the day (seconds = 86400 * scale); nodes and workers stay 10 x 8. The
generated input goes to a temporary directory (removed unless --keep; --dir reuses one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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


COMMANDS = ("addjob", "getjob", "ackjob", "nack", "qlen", "info")
JOBS = ("added", "delivered", "acked", "nacked", "requeued", "expired", "deleted")
BUS = ("REPLJOB", "GOTJOB", "SETACK")


def v2_line(ts, nid, addr, w, x, c, j, b, lat, k, s):
    """The same sample as the v1 template, written by the server's own v2 producer."""
    from disque import statslog
    stats = {"index": w, "pid": x["pid"], "uptime_s": ts - x["start"],
             "commands": dict(zip(COMMANDS, c)), **dict(zip(JOBS, j)),
             "jobs": k + 5, "queued": k // 2, "active": k - k // 2 + 5, "queues": 5, "blocked": s % 3,
             "top_queues": [{"queue": "q%d-%d" % (w, qi), "len": q[0] + 10 * (5 - qi), "jobs_in": q[1],
                             "jobs_out": q[2], "nacks": q[3], "additional_deliveries": q[4]}
                            for qi, q in enumerate(x["q"])],
             "bus_in": dict(zip(BUS, b[:3])), "bus_out": dict(zip(BUS, b[3:])),
             "rss": 30_000_000 + 1000 * (s % 600) + 4096 * w, "cpu_user": x["cpu"] * 0.8,
             "cpu_sys": x["cpu"] * 0.2, "latency_counts": list(lat)}
    return json.dumps(statslog.line(ts, nid, addr, stats), separators=(",", ":"))


def node_id(n: int) -> str:
    return ("%08x" % (0x5eed0000 + n)) * 5


_COUNTER = None


def _init_worker(counter):
    global _COUNTER
    _COUNTER = counter


def gen_node(args):
    """Write one node's day into out_dir/node-NN/ (rotated files); returns (lines, bytes)."""
    n, seconds, workers, out_dir, bad_every, version = args
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
            if version == 2:
                line = v2_line(ts, nid, addr, w, x, c, j, b, lat, k, s) + "\n"
                chunks.append(line)
                size += len(line)
                nlines += 1
                continue
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


def generate(out_dir: str, scale: float, nodes: int, workers: int, procs: int, bad_every: int, version: int = 1):
    seconds = max(2, int(round(86400 * scale)))
    t = time.monotonic()
    jobs = [(n, seconds, workers, out_dir, bad_every, version) for n in range(nodes)]
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

    def snapshot(self):
        """(CPU seconds of the process tree so far, now), read at once."""
        for p in [self.me] + self.me.children(recursive=True):
            try:
                self._cpu(p)
            except self.psutil.Error:
                pass
        return self.cpu_seconds()

    def reset_peaks(self):
        self.peak_total = self.peak_jvm = self.peak_py = 0

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


THREAD_KINDS = (("JIT compiler", ("C1 CompilerThre", "C2 CompilerThre")),
                ("tasks", ("Executor task",)),   # /proc comm keeps 15 characters
                ("GC", ("GC Thread", "G1 ")))


def jvm_thread_cpu(sampler) -> dict:
    """CPU seconds of the Spark JVM's live threads by kind (Linux /proc; {} elsewhere): how much
    of a run is the JIT compiling Spark's generated code rather than the tasks running it."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for ch in sampler.me.children(recursive=True):
        task_dir = f"/proc/{ch.pid}/task"
        if not os.path.isdir(task_dir) or "java" not in ch.name():
            continue
        for tid in os.listdir(task_dir):
            try:
                with open(f"{task_dir}/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"{task_dir}/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            kind = next((k for k, prefixes in THREAD_KINDS if name.startswith(prefixes)), "other")
            out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_cpu_delta(before: dict, after: dict) -> dict:
    return {k: max(0.0, after.get(k, 0.0) - before.get(k, 0.0)) for k in after}


def bare_scan(spark, inp: str, out: str, version: int) -> float:
    """What Spark alone costs for the same files: read with the explicit schema, write Parquet."""
    from disque_spark import schema
    sch = schema.STATS_SCHEMA if version == 1 else schema.STATS_SCHEMA_V2
    t = time.monotonic()
    (spark.read.schema(sch).option("recursiveFileLookup", "true").option("pathGlobFilter", "*.jsonl*")
     .json(inp).write.mode("overwrite").parquet(out))
    return time.monotonic() - t


def per_sample_floor(spark, inp: str, out: str) -> float:
    """The cheapest write we know of the per-sample rows the job's two big tables hold.

    The pipeline's own parser over the same files, then one row per good line (identity,
    job counters, gauges: no rates, maps or histogram) and one row per (line, top queue) (a
    single explode), each written to Parquet straight from the text: no window, no shuffle,
    no cache, no computed column. The job also computes every delta, rate and percentile,
    node_rates, the summaries, the state and the report, so its time cannot go below this
    (docs/spark.md#what-it-costs: the floor).
    """
    from pyspark.sql import functions as F

    from disque_spark import schema, transform

    def good():
        text = (spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.jsonl*").text(inp))
        return schema.parse_lines(text).where(F.col("bad_reason").isNull())

    t = time.monotonic()
    date = transform.date_of(F.col("ts")).alias("date")
    (good().select("ts", "node", "worker", "pid", "uptime_s", *schema.JOB_COUNTERS, *schema.GAUGES, date)
     .write.mode("overwrite").partitionBy("date").parquet(os.path.join(out, "workers")))
    qs = transform.queue_samples(good().select("node", "worker", "pid", "ts", "uptime_s", "top_queues", "qmap"))
    qs.select("*", date).write.mode("overwrite").partitionBy("date").parquet(os.path.join(out, "queues"))
    return time.monotonic() - t


TS_RE = None


def line_ts(line: bytes):
    """A stats line's ts (v1 "ts" or v2 "t"), None for a line without one (a bad line)."""
    global TS_RE
    if TS_RE is None:
        import re
        TS_RE = re.compile(rb'"ts?": ?([0-9.]+)')
    m = TS_RE.search(line, 0, 80)
    return float(m.group(1)) if m else None


def hold_back(src: str, dst: str, cutoff: float) -> dict:
    """A copy of the input without its lines at or after ``cutoff`` (the day's last hour).

    Files wholly before the cutoff are hard links; the file the cutoff falls in is copied up
    to it; later files are left out. Returns {copied file: the held-back lines (bytes), in
    time order}: appended to that file, they make the input whole again the way a server
    appends to its open file (same inode, so an incremental run reads only them).
    """
    held = {}
    for root, _, names in os.walk(src):
        # the generator's rotation: stats.jsonl.1 is the oldest, stats.jsonl the newest
        order = sorted(names, key=lambda n: int(n.rsplit(".", 1)[1]) if n[-1].isdigit() else 1 << 30)
        out_dir = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(out_dir, exist_ok=True)
        target, rest = None, []
        for name in order:
            path = os.path.join(root, name)
            if target is not None:
                with open(path, "rb") as f:
                    rest.append(f.read())
                continue
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - 8192))
                tail = f.read()
            last = None
            for line in tail.splitlines()[:0:-1]:      # the first one may be cut
                last = line_ts(line)
                if last is not None:
                    break
            if last is not None and last < cutoff:
                os.link(path, os.path.join(out_dir, name))
                continue
            with open(path, "rb") as f:
                data = f.read()
            pos = 0
            for line in data.splitlines(keepends=True):
                t = line_ts(line)
                if t is not None and t >= cutoff:
                    break
                pos += len(line)
            target = os.path.join(out_dir, name)
            with open(target, "wb") as f:
                f.write(data[:pos])
            rest.append(data[pos:])
        if target is not None:
            held[target] = b"".join(rest)
    return held


def new_hour_run(spark, inp: str, work: str, sampler, seconds: int, no_report: bool):
    """One new hour of an ingested day: a run over the day without its last hour, then the
    hour appended to each node's open file and an incremental run timed (it reads only those
    bytes, and the state's last samples for the rates at the boundary). The same incremental
    run is timed twice: in this session (its JVM warm from the day) and as a cron job runs it,
    ``disque-stats-ingest`` in a new process (a new JVM), over a copy of the day's output."""
    from disque_spark import ingest
    part, out = os.path.join(work, "in-hour"), os.path.join(work, "out-hour")
    cold_out = out + "-new-process"
    shutil.rmtree(part, ignore_errors=True)
    shutil.rmtree(cold_out, ignore_errors=True)
    held = hold_back(inp, part, T0 + seconds - 3600)
    _, before, _, _, _ = measure(sampler, lambda: ingest.run(
        part, out, spark=spark, report=not no_report, full=True, progress=False))
    subprocess.run(["cp", "-a", out, cold_out], check=True)
    for path, data in held.items():
        with open(path, "ab") as f:
            f.write(data)
    res, hour, cpu, _, _ = measure(sampler, lambda: ingest.run(
        part, out, spark=spark, report=not no_report, progress=True))
    cmd = [sys.executable, "-c", "import sys; from disque_spark.ingest import main; sys.exit(main())",
           "--input", part, "--output", cold_out, "--master", "local[2]", "-q"] + (["--no-report"] if no_report else [])
    t = time.monotonic()
    subprocess.run(cmd, check=True, env=dict(os.environ, SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")))
    cold = time.monotonic() - t
    shutil.rmtree(part, ignore_errors=True)
    shutil.rmtree(cold_out, ignore_errors=True)
    return {"day_but_last_hour_seconds": before, "new_hour_seconds": hour, "new_hour_cpu_seconds": cpu,
            "new_hour_new_process_seconds": cold,
            "new_hour_bytes": res.new_bytes, "new_hour_lines": sum(d.count(b"\n") for d in held.values()),
            "mode": res.mode, "stages": res.stages}


def measure(sampler, fn):
    sampler.reset_peaks()
    c0 = sampler.snapshot()
    t = time.monotonic()
    value = fn()
    wall = time.monotonic() - t
    return value, wall, sampler.snapshot() - c0, sampler.peak_total, sampler.peak_jvm


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the day (default 1.0 = 6.9M lines)")
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--schema", choices=("v1", "v2", "both"), default="both", help="line format(s) to measure")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--procs", type=int, default=2, help="generator processes")
    ap.add_argument("--bad-every", type=int, default=3600, help="2 bad lines per node every N seconds (0: none)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir); input reused if present")
    ap.add_argument("--keep", action="store_true", help="keep the generated input and the output")
    ap.add_argument("--no-report", action="store_true", help="skip the HTML report stage")
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    ap.add_argument("--floor", action="store_true",
                    help="also time the per-sample floor: only the rows of worker_rates and queue_backlog "
                         "written from the parsed lines, nothing computed (see per_sample_floor)")
    ap.add_argument("--new-hour", action="store_true",
                    help="also time one new hour of an ingested day: a run over the day without its last "
                         "hour, then that hour appended and an incremental run (see new_hour_run)")
    ap.add_argument("--warm-run", action="store_true",
                    help="run the job a second time in the same session and print that time too "
                         "(the first run pays the JIT warm-up of every generated plan)")
    args = ap.parse_args(argv)

    try:
        from disque_spark import ingest
        from disque_spark.session import make_session
    except ImportError:
        sys.stderr.write("install the spark extra first: pip install -e '.[spark]'\n")
        return 2

    work = args.dir or tempfile.mkdtemp(prefix="bench-spark-")
    seconds = max(2, int(round(86400 * args.scale)))
    versions = [1, 2] if args.schema == "both" else [int(args.schema[1])]
    print(f"bench_spark: {args.nodes} nodes x {args.workers} workers x {seconds:,} s = "
          f"{args.nodes * args.workers * seconds:,} stats lines per schema; work dir {work}")
    gens = {}
    for v in versions:
        inp = os.path.join(work, f"in-v{v}")
        if os.path.isdir(inp) and os.listdir(inp):
            gens[v] = {"reused": True}
            print(f"  v{v}: reusing the input in {inp}")
        else:
            gens[v] = generate(inp, args.scale, args.nodes, args.workers, args.procs, args.bad_every, v)
            g = gens[v]
            print(f"  v{v}: generated {g['lines']:,} lines, {g['bytes'] / 1e6:,.0f} MB in {g['files']} files "
                  f"({g['bytes'] / g['lines']:.0f} bytes per line), {g['gen_seconds']:.1f}s")

    sampler = MemorySampler()
    sampler.start()
    t = time.monotonic()
    spark = make_session(master=args.master, driver_memory=args.driver_memory)
    start_s = time.monotonic() - t
    print(f"Spark session ({args.master}) started in {start_s:.1f}s")
    # warm the JVM (class loading, JIT) on a slice before anything is timed
    first = sorted(os.path.join(r, f) for r, _, fs in os.walk(os.path.join(work, f"in-v{versions[0]}"))
                   for f in fs)[0]
    bare_scan(spark, first, os.path.join(work, "warm"), versions[0])

    figs = {"scale": args.scale, "master": args.master, "spark_start_s": start_s, "cpus": os.cpu_count(),
            "versions": {}}
    for v in versions:
        inp, out = os.path.join(work, f"in-v{v}"), os.path.join(work, f"out-v{v}")
        scan_out = os.path.join(work, f"bare-v{v}")
        _, b1, b1cpu, b1mem, _ = measure(sampler, lambda: bare_scan(spark, inp, scan_out, v))
        threads0 = jvm_thread_cpu(sampler)
        res, job, cpu, peak, peak_jvm = measure(sampler, lambda: ingest.run(
            inp, out, spark=spark, report=not args.no_report, full=True, progress=True))
        threads = thread_cpu_delta(threads0, jvm_thread_cpu(sampler))
        _, b2, b2cpu, _, _ = measure(sampler, lambda: bare_scan(spark, inp, scan_out, v))
        bare = min(b1, b2)
        warm = None
        if args.warm_run:       # the same job again in this JVM: what is left once the JIT is warm
            _, warm, warm_cpu, _, _ = measure(sampler, lambda: ingest.run(
                inp, out, spark=spark, report=not args.no_report, full=True, progress=False))
        floor = None
        if args.floor:
            _, floor, floor_cpu, _, _ = measure(sampler, lambda: per_sample_floor(
                spark, inp, os.path.join(work, f"floor-v{v}")))
        f = {"lines": res.rows_read, "bad_lines": res.bad_lines, "input_bytes": res.input_bytes,
             "bytes_per_line": (res.input_bytes or 0) / max(1, res.rows_read), "files": res.files,
             "job_seconds": job, "bare_scan_seconds": [b1, b2], "ratio": job / bare if bare else None,
             "rows_per_s": res.rows_read / job, "cpu_seconds": cpu, "bare_scan_cpu_seconds": [b1cpu, b2cpu],
             "cpu_ratio": cpu / min(b1cpu, b2cpu) if min(b1cpu, b2cpu) else None,
             "peak_rss_total": peak, "peak_rss_jvm": peak_jvm, "bare_scan_peak_rss": b1mem,
             "stages": res.stages, "tables": res.tables, "generation": gens[v], "loadavg": os.getloadavg(),
             "jvm_thread_cpu_seconds": threads,
             "warm_job_seconds": warm, "warm_ratio": warm / bare if warm and bare else None,
             "warm_cpu_seconds": warm_cpu if warm else None,
             "floor_seconds": floor, "floor_ratio": floor / bare if floor and bare else None,
             "floor_cpu_seconds": floor_cpu if floor else None}
        figs["versions"][f"v{v}"] = f
        print()
        print(f"schema v{v}: {res.rows_read:,} lines, {(res.input_bytes or 0) / 1e6:,.0f} MB "
              f"({f['bytes_per_line']:.0f} bytes per line), {res.bad_lines} bad, on {args.master}")
        print(f"  pipeline job time  {job:8.1f} s   ({f['rows_per_s']:,.0f} rows/s, report "
              f"{'off' if args.no_report else 'included'})")
        print(f"  bare scan          {bare:8.1f} s   (before {b1:.1f} s, after {b2:.1f} s: schema read + Parquet write)")
        print(f"  ratio              {f['ratio']:8.2f} x  (job / faster bare scan)")
        print(f"  CPU seconds        {cpu:8.1f} s   (bare scan {min(b1cpu, b2cpu):.1f} s, ratio {f['cpu_ratio']:.2f} x; "
              f"the figures that depend least on other load)")
        print(f"  peak memory        {peak / 2**20:8,.0f} MiB total (JVM {peak_jvm / 2**20:,.0f} MiB); "
              f"bare scan {b1mem / 2**20:,.0f} MiB")
        if warm:
            print(f"  same job, warm JVM {warm:8.1f} s   (ratio {warm / bare:.2f} x, CPU {warm_cpu:.1f} s: run again "
                  f"in the same session)")
        if floor:
            print(f"  per-sample floor   {floor:8.1f} s   ({floor / bare:.2f} x the bare scan, CPU {floor_cpu:.1f} s: "
                  f"only the worker and queue rows written, nothing computed; job / floor {job / floor:.2f} x)")
        if threads:
            print("  JVM CPU by thread   " + ", ".join(f"{k} {threads.get(k, 0.0):.1f} s" for k in
                                                      ("tasks", "JIT compiler", "GC", "other")))
        for name, sec in res.stages:
            print(f"    {name:48s} {sec:8.1f} s")
        print("  tables: " + ", ".join(f"{k} {n:,}" for k, n in res.tables.items()))
        la = os.getloadavg()
        print(f"  load average: {la[0]:.1f} {la[1]:.1f} {la[2]:.1f} ({os.cpu_count()} cpus)", flush=True)
        if args.json:       # written now too: the new-hour runs below take as long again
            with open(args.json, "w") as fh:
                json.dump(figs, fh, indent=2, default=str)
        if args.new_hour:
            hour = f["new_hour"] = new_hour_run(spark, inp, work, sampler, seconds, args.no_report)
            print(f"  one new hour       {hour['new_hour_seconds']:8.1f} s   "
                  f"({hour['new_hour_seconds'] / job:.3f} of the job over the whole input; {hour['new_hour_lines']:,} new lines, {hour['mode']}; CPU "
                  f"{hour['new_hour_cpu_seconds']:.1f} s; the run over all but the last hour before it: "
                  f"{hour['day_but_last_hour_seconds']:.1f} s)")
            for name, sec in hour["stages"]:
                print(f"      {name:46s} {sec:8.1f} s")
            cold = hour["new_hour_new_process_seconds"]
            print(f"  the same hour in a new process (disque-stats-ingest, a new JVM, as cron runs it) "
                  f"{cold:.1f} s ({cold / job:.3f} of the job over the whole input)")
    spark.stop()
    sampler.stop.set()
    sampler.join()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figs, fh, indent=2, default=str)
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
