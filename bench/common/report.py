"""Progress lines, the benchmark's error, and small helpers of the figures."""
from __future__ import annotations

import time

T0 = time.monotonic()


class BenchError(Exception):
    pass


class StartError(BenchError):
    """A server exited, or did not answer PING, when it was started."""


def log(msg: str, width: int = 7) -> None:
    print(f"[{time.monotonic() - T0:{width}.1f}s] {msg}", flush=True)


def warn(msg: str) -> None:
    log(f"WARNING: {msg}")


def percentile(sorted_vals, q: float):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, int(round(q / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def make_body(size: int, seq: int | None = None) -> bytes:
    if seq is None:
        return (b"abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1))[:size]
    prefix = b"%010d-" % seq
    return (prefix + b"x" * size)[:size]
