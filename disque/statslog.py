"""The per-worker stats log (`stats-log-file`, `stats-log-interval`): JSON lines, schema v1.

One line per worker per interval; counters are monotonic so rates can be derived (a
restart shows as uptime_s going down). The file rotates by size (`path` -> `path.1` ...
`path.<keep>`), so a long run cannot fill the disk. spark/README.md documents the schema
for the consumers; `line()` below is its single producer (the server's writer and the
`disque-stats-collect` poller both use it).
"""
import bisect
import json
import os

SCHEMA_VERSION = 1
LATENCY_BOUNDS_US = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 5
TOP_QUEUES = 10


def line(ts, node_id, addr, w):
    """One schema-v1 record from a worker's stats dict (the worker's "stats" control reply)."""
    return {
        "v": SCHEMA_VERSION,
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
        data = "".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n"
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
