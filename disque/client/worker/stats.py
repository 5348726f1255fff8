"""The worker's counters: done, failed, retried, dead-lettered, timed out, running."""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StatsSnapshot:
    done: int
    failed: int
    retried: int
    dead_lettered: int
    timed_out: int
    abandoned: int
    running: int

    def as_dict(self):
        return asdict(self)

    def line(self):
        return " ".join("%s=%d" % item for item in asdict(self).items())


class WorkerStats:
    """Counted from any thread (one lock; an increment per job is all it costs)."""

    FIELDS = ("done", "failed", "retried", "dead_lettered", "timed_out", "abandoned", "running")

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, field, n=1):
        with self._lock:
            self._counts[field] += n

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(**self._counts)
