"""The per-worker stats log (`stats-log-file`, `stats-log-interval`): JSON lines, schema v2.

One line per worker per interval; counters are monotonic so rates can be derived (a
restart shows as uptime_s going down). The file rotates by size (`path` -> `path.1` ...
`path.<keep>`), so a long run cannot fill the disk. docs/stats-schema.md documents both
schema versions; `line()` below (v2) is the single producer the server's writer and the
`disque-stats-collect` poller use. `line_v1()` keeps the older, wordier record (readers
accept both, also mixed in one file).

v2 is v1 made lean: short keys, zero counters and empty maps left out, top queues as
`{"name": [len, in, out, nacks, additional_deliveries]}` with trailing zeros trimmed, and
the latency histogram as its counts only (trailing zeros trimmed): the bounds are those of
the version (LATENCY_BOUNDS_US), so a line carries `lb` only when its bounds differ.
"""
import bisect
import json
import os

SCHEMA_VERSION = 2
LATENCY_BOUNDS_US = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 5
TOP_QUEUES = 10


#: v2 short keys of the job counters and the gauges (docs/stats-schema.md)
V2_JOBS = (("added", "add"), ("delivered", "dlv"), ("acked", "ack"), ("nacked", "nak"), ("requeued", "rq"),
           ("expired", "exp"), ("deleted", "del"))
V2_GAUGES = (("jobs", "jobs"), ("queued", "qd"), ("active", "act"), ("queues", "qs"), ("blocked", "blk"))
V2_QUEUE_FIELDS = ("len", "jobs_in", "jobs_out", "nacks", "additional_deliveries")


def _trim(values):
    """A list without its trailing zeros."""
    n = len(values)
    while n and not values[n - 1]:
        n -= 1
    return values[:n]


def _nonzero(d):
    return {k: v for k, v in d.items() if v}


SPILL_FIELDS = (("spilled_jobs", "n"), ("spill_disk_bytes", "d"), ("spill_jobs_written", "w"),
                ("spill_jobs_read", "r"), ("spill_compactions", "c"), ("spill_errors", "e"))


def line(ts, node_id, addr, w):
    """One schema-v2 record from a worker's stats dict (the worker's "stats" control reply)."""
    active = w.get("active", max(0, w.get("jobs", 0) - w.get("queued", 0)))
    rec = {"v": SCHEMA_VERSION, "t": round(ts, 3), "n": node_id, "a": addr, "w": w["index"], "p": w["pid"],
           "up": round(w.get("uptime_s", 0.0), 3)}
    parts = (
        ("c", _nonzero(w.get("commands", {}))),
        ("j", {short: w.get(name, 0) for name, short in V2_JOBS if w.get(name, 0)}),
        ("g", {short: (active if name == "active" else w.get(name, 0)) for name, short in V2_GAUGES
               if (active if name == "active" else w.get(name, 0))}),
        ("q", {q["queue"]: _trim([q.get(f, 0) for f in V2_QUEUE_FIELDS]) or [0]
               for q in list(w.get("top_queues", []))[:TOP_QUEUES]}),
        ("bi", _nonzero(w.get("bus_in", {}))),
        ("bo", _nonzero(w.get("bus_out", {}))),
        # jobs moved to a dead-letter queue, by origin queue (docs/job-features.md)
        ("dl", _nonzero(w.get("dead_lettered", {}))),
        # jobs spilled to disk (docs/memory.md, "Spilling"): held, disk bytes, written, read,
        # compactions, errors
        ("sp", _nonzero({short: w.get("spill", {}).get(name, 0) for name, short in SPILL_FIELDS})),
    )
    for key, value in parts:
        if value:
            rec[key] = value
    rec["m"] = w.get("rss", 0)
    for key, name in (("cu", "cpu_user"), ("cs", "cpu_sys")):
        if w.get(name):
            rec[key] = round(w[name], 3)
    lat = _trim(list(w.get("latency_counts", ())))
    if lat:
        rec["l"] = lat
    return rec


def line_v1(ts, node_id, addr, w):
    """One schema-v1 record from a worker's stats dict (the worker's "stats" control reply)."""
    return {
        "v": 1,
        "ts": round(ts, 3),
        "node": node_id,
        "addr": addr,
        "worker": w["index"],
        "pid": w["pid"],
        "uptime_s": round(w.get("uptime_s", 0.0), 3),
        "commands": dict(w.get("commands", {})),
        "jobs": {k: w.get(k, 0) for k in
                 ("added", "delivered", "acked", "nacked", "requeued", "expired", "deleted")},
        "gauges": {"jobs": w.get("jobs", 0), "queued": w.get("queued", 0),
                   "active": w.get("active", max(0, w.get("jobs", 0) - w.get("queued", 0))),
                   "queues": w.get("queues", 0), "blocked": w.get("blocked", 0)},
        "top_queues": list(w.get("top_queues", []))[:TOP_QUEUES],
        # cumulative jobs moved to a dead-letter queue, by origin queue (docs/job-features.md);
        # an added key: readers with the v1 schema ignore it
        "dead_lettered": dict(w.get("dead_lettered", {})),
        "bus": {"in": dict(w.get("bus_in", {})), "out": dict(w.get("bus_out", {}))},
        "rss": w.get("rss", 0),
        "cpu_user": round(w.get("cpu_user", 0.0), 3),
        "cpu_sys": round(w.get("cpu_sys", 0.0), 3),
        "latency_us": {"bounds": list(LATENCY_BOUNDS_US),
                       "counts": list(w.get("latency_counts", [0] * (len(LATENCY_BOUNDS_US) + 1)))},
    }


class StatsLog:
    def __init__(self, path, max_bytes=DEFAULT_MAX_BYTES, keep=DEFAULT_KEEP):
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.lines_written = 0
        self.errors = 0

    def write(self, records):
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n"
                       for r in records).encode()
        try:
            if os.path.exists(self.path) and os.path.getsize(self.path) + len(data) > self.max_bytes:
                self.rotate()
            with open(self.path, "ab") as f:
                f.write(data)
        except OSError:
            self.errors += 1
            return False
        self.lines_written += len(records)
        return True

    def rotate(self):
        for k in range(self.keep - 1, 0, -1):
            src = "%s.%d" % (self.path, k)
            if os.path.exists(src):
                os.replace(src, "%s.%d" % (self.path, k + 1))
        os.replace(self.path, self.path + ".1")


class LatencyHistogram:
    """Cumulative counts of command service times in LATENCY_BOUNDS_US buckets."""
    __slots__ = ("counts",)

    def __init__(self):
        self.counts = [0] * (len(LATENCY_BOUNDS_US) + 1)

    def add(self, usec):
        self.counts[bisect.bisect_left(LATENCY_BOUNDS_US, usec)] += 1
