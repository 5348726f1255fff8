"""Progress lines for a long Spark job: stage names, elapsed time, live task counts."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager


def human_bytes(n) -> str:
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} TB"


def fmt_int(n) -> str:
    return "?" if n is None else f"{int(n):,}"


class _Stage:
    def __init__(self, name: str):
        self.name = name
        self.detail = ""
        self.start = time.monotonic()
        self.seconds = 0.0


class Progress:
    """Prints ``[k/n] stage ...`` lines to a stream (stderr by default).

    While a stage runs longer than ``tick`` seconds, a background thread prints how far
    Spark's active stages are (completed/total tasks) every ``tick`` seconds.
    """

    def __init__(self, enabled: bool = True, stream=None, prefix: str = "disque-stats-ingest",
                 tick: float = 10.0, total_stages: int | None = None):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.prefix = prefix
        self.tick = tick
        self.total = total_stages
        self.done: list[tuple[str, float]] = []
        self.spark = None
        self._lock = threading.Lock()

    def say(self, msg: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.stream.write(f"{self.prefix}: {msg}\n")
            self.stream.flush()

    @contextmanager
    def stage(self, name: str):
        st = _Stage(name)
        k = len(self.done) + 1
        label = f"[{k}/{self.total}]" if self.total else f"[{k}]"
        self.say(f"{label} {name} ...")
        stop = threading.Event()
        mon = None
        if self.enabled and self.spark is not None and self.tick > 0:
            mon = threading.Thread(target=self._monitor, args=(st, label, stop), daemon=True)
            mon.start()
        try:
            yield st
        finally:
            stop.set()
            if mon is not None:
                mon.join(timeout=2)
            st.seconds = time.monotonic() - st.start
            self.done.append((name, st.seconds))
            extra = f": {st.detail}" if st.detail else ""
            self.say(f"{label} {name} done in {st.seconds:.1f}s{extra}")

    def _monitor(self, st: _Stage, label: str, stop: threading.Event) -> None:
        while not stop.wait(self.tick):
            try:
                tracker = self.spark.sparkContext.statusTracker()
                parts = []
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        parts.append(f"spark stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")
                running = "; ".join(parts) if parts else "working"
            except Exception:  # the context may be stopping
                running = "working"
            self.say(f"{label} {st.name}: {time.monotonic() - st.start:.0f}s, {running}")
