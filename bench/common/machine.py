"""The machine's other load: CPU used by anything else than the servers under test and this
script, measured around each figure (a noisy figure is flagged), waited out on request
(--wait-quiet), and checked before a benchmark starts."""
from __future__ import annotations

import os
import time

import psutil

from common.report import log, warn


def _busy_cpu(t) -> float:
    return (t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
            + getattr(t, "steal", 0.0))


def _own_cpu() -> float:
    t = os.times()  # includes reaped children (redis-benchmark)
    return t.user + t.system + t.children_user + t.children_system


class OtherLoad:
    """CPU used on the machine by anything else than the server under test and this script
    (and its redis-benchmark child), in cores. Tells whether a figure was disturbed."""

    def __init__(self):
        self.t = time.monotonic()
        self.sys = _busy_cpu(psutil.cpu_times())
        self.me = _own_cpu()

    def finish(self, server_cpu_s: float) -> float:
        wall = time.monotonic() - self.t
        other = (_busy_cpu(psutil.cpu_times()) - self.sys) - (_own_cpu() - self.me) - server_cpu_s
        return max(0.0, other / wall) if wall > 0 else 0.0


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> tuple[float, bool]:
    """Seconds of CPU between two snapshots (pid -> seconds); second value False if the
    process set changed."""
    total = 0.0
    for pid, t in after.items():
        total += t - before.get(pid, 0.0)
    return total, set(before) == set(after)


NOISY_CORES = 0.15


def other_note(r: dict) -> str:
    o = r.get("other_load_cores") or 0.0
    return f"  [!! other processes used {o:.2f} cores meanwhile: noisy]" if o > NOISY_CORES else ""


WAIT_QUIET = 0.0  # set from --wait-quiet (set_wait_quiet)


def set_wait_quiet(seconds: float) -> None:
    global WAIT_QUIET
    WAIT_QUIET = seconds


def other_load_now(srv, seconds: float = 1.0) -> float:
    """Cores used by other processes than this script and `srv` over the next `seconds`."""
    c0 = srv.cpu_snapshot() if srv else {}
    o = OtherLoad()
    time.sleep(seconds)
    c1 = srv.cpu_snapshot() if srv else {}
    return o.finish(cpu_delta(c0, c1)[0])


def check_machine_quiet(seconds: float = 1.0) -> float:
    """Before a benchmark starts: the CPU other processes use now, in cores, with a warning
    naming the busiest of them when it is more than NOISY_CORES. A client left spinning by
    an earlier run (a redis-benchmark whose server went away uses a whole core) skews every
    figure that follows, ratios included, since it slows the servers unevenly."""
    procs = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            p.cpu_percent(None)
            procs.append(p)
        except psutil.Error:
            pass
    load = other_load_now(None, seconds)
    if load > NOISY_CORES:
        busy = []
        for p in procs:
            try:
                pct = p.cpu_percent(None)
            except psutil.Error:
                continue
            if pct >= 10 and p.pid != os.getpid():
                cmd = " ".join(p.info.get("cmdline") or [p.info.get("name") or "?"])[:80]
                busy.append((pct, p.pid, cmd))
        busy.sort(reverse=True)
        named = "; ".join(f"pid {pid} {pct:.0f}% {cmd}" for pct, pid, cmd in busy[:3])
        warn(f"other processes use {load:.2f} cores before the benchmark starts: the figures "
             f"will be skewed ({named or 'short-lived processes'})")
    return load


def wait_quiet(srv=None) -> None:
    """Wait (up to --wait-quiet seconds) until other processes use < NOISY_CORES of CPU."""
    if WAIT_QUIET <= 0:
        return
    deadline = time.monotonic() + WAIT_QUIET
    said = False
    while True:
        load = other_load_now(srv)
        if load <= NOISY_CORES:
            if said:
                log("      machine is quiet now")
            return
        if time.monotonic() > deadline:
            log(f"      still {load:.2f} cores of other load after {WAIT_QUIET:.0f}s; measuring anyway")
            return
        if not said:
            log(f"      waiting for the machine to quiet down (other processes use {load:.2f} cores)")
            said = True


def best_of(repeat: int, fn, key: str, srv=None) -> dict:
    """Run fn() `repeat` times, keep the run with the highest `key` (all values kept)."""
    runs = []
    for i in range(max(1, repeat)):
        wait_quiet(srv)
        r = fn()
        runs.append(r)
        if repeat > 1:
            log(f"      run {i + 1}/{repeat}: {key} {r[key]:,.0f}" + other_note(r))
    best = dict(max(runs, key=lambda r: r[key]))
    if repeat > 1:
        best["all_runs_" + key] = [r[key] for r in runs]
    return best

