"""The RSS the operating system sees follows `maxmemory` (docs/memory.md, "RSS"): a node
spilling far past its limit stays within 1.1 x maxmemory + its fresh RSS at every sample,
and comes back down after a drain. The 600,000-job and 10 M-job forms of the same
measurement are bench/bench_rss.py."""
import os
import threading

import pytest

import spill_helpers
from support.waits import wait_until

QUEUES = ["rssq0", "rssq1", "rssq2", "rssq3"]
MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_S = 0.05


def rss_of(pid):
    try:
        with open("/proc/%d/statm" % pid, "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


def node_rss(pids):
    return sum(rss_of(pid) for pid in pids)


class PeakRss(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = 0
        self.peak_parts = []
        self.samples = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            parts = [rss_of(pid) for pid in self.pids]
            if sum(parts) > self.peak:
                self.peak, self.peak_parts = sum(parts), parts
            self.samples += 1
            self.stop.wait(SAMPLE_S)


def settled_rss(pids):
    """The fresh node's RSS once two samples 200 ms apart agree within 1 MB."""
    last = [node_rss(pids)]

    def steady():
        now = node_rss(pids)
        ok = abs(now - last[0]) < MB
        last[0] = now
        return ok
    wait_until(steady, timeout=10, interval=0.2, message="the fresh node's RSS did not settle")
    return last[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_rss_within_maxmemory_while_spilling_and_back_after_drain(start_server, workers):
    maxmemory = 64 * MB
    n = 200_000                              # ~280 MB of jobs: 4.4x maxmemory
    srv = start_server(workers=workers, extra_args=["--maxmemory", "64mb"])
    pids = [srv.pid] + srv.worker_pids()
    assert len(pids) == workers + 1
    c = spill_helpers.client(srv)
    fresh = settled_rss(pids)
    sampler = PeakRss(pids)
    sampler.start()
    try:
        ids, crc, _ = spill_helpers.fill([c], n, QUEUES, maxmemory=maxmemory)
        assert spill_helpers.memory(c)["spilled_jobs"] > n // 2
        got_crc, seen = spill_helpers.drain([c], n, QUEUES)
    finally:
        sampler.stop.set()
        sampler.join()
    assert seen == set(ids) and got_crc == crc
    assert sampler.samples > 20
    bound = 1.1 * maxmemory + fresh
    assert sampler.peak <= bound, "peak RSS %.1f MB (%s) over %.1f MB (fresh %.1f MB)" % (
        sampler.peak / MB, " + ".join("%.1f" % (p / MB) for p in sampler.peak_parts),
        bound / MB, fresh / MB)
    after = 1.2 * fresh + 16 * MB
    try:
        wait_until(lambda: node_rss(pids) <= after, timeout=10)
    except AssertionError:
        raise AssertionError("RSS %.1f MB after the drain, over %.1f MB (fresh %.1f MB)" % (
            node_rss(pids) / MB, after / MB, fresh / MB)) from None


def test_heap_trim_gives_freed_heap_back_once_per_step():
    """In-process: freeing 64 MB of 1 KB blocks makes the next cron trim once and the RSS
    fall; a second cron with nothing more freed does not trim again."""
    from disque.heap_trim import HeapTrim
    from disque.memstat import rss
    keep = [bytes(1024) + b"%d" % i for i in range(2000)]      # a live block at the top
    blocks = [bytes(1024) + b"%d" % i for i in range(64 * 1024)]
    top = [bytes(1024) + b"%d" % i for i in range(2000)]
    trim = HeapTrim(clock=lambda: 0.0)      # a check costs nothing: none is put off
    assert not trim.cron()
    before = rss()
    del blocks
    assert trim.cron() and trim.trims == 1
    assert rss() < before - 32 * MB, (before, rss())
    assert not trim.cron() and trim.trims == 1
    assert keep and top


def test_heap_trim_checks_cost_at_most_a_hundredth_of_the_time():
    """A check that took 2 ms puts the next one off by CHECK_BUDGET x 2 ms."""
    from disque.heap_trim import CHECK_BUDGET, HeapTrim
    now = [0.0]

    def clock():
        t = now[0]
        now[0] += 0.002 if t == 10.0 else 0.0    # the check starting at 10 s takes 2 ms
        return t

    trim = HeapTrim(clock=clock)
    now[0] = 10.0
    trim.cron()
    assert trim.checks == 1 and abs(trim.next_at - (10.002 + 0.002 * CHECK_BUDGET)) < 1e-9
    for t in (10.05, 10.1, 10.2):
        now[0] = t
        trim.cron()
    assert trim.checks == 1
    now[0] = 10.21
    trim.cron()
    assert trim.checks == 2


def test_less_than_a_step_freed_is_trimmed_once_the_heap_is_quiet(monkeypatch):
    """What a burst frees below TRIM_STEP (a front-end's read buffers after a few big
    pipelines: 1.6 MB measured) goes back once two checks in a row read the same free
    bytes, once, and never while the heap keeps changing."""
    from disque import heap_trim
    trims = []
    free = [0]
    monkeypatch.setattr(heap_trim.procctl, "malloc_trim", lambda: trims.append(free[0]))
    monkeypatch.setattr(heap_trim, "heap_free_bytes", lambda: free[0])
    trim = heap_trim.HeapTrim(clock=lambda: 0.0)
    for kb in (100, 300, 500, 700, 900):        # busy: the free bytes move at every check
        free[0] = kb << 10
        assert not trim.cron()
    assert trim.cron() and trims == [900 << 10]  # the same as the last check: quiet
    assert not trim.cron() and not trim.cron()   # nothing freed since: no second trim
    free[0] += heap_trim.QUIET_STEP - 1          # less than QUIET_STEP more, quiet or not
    assert not trim.cron() and not trim.cron()
    assert trims == [900 << 10]


def test_a_long_trim_does_not_put_off_the_next_check(monkeypatch):
    """Only the walk of the free lists counts against CHECK_BUDGET: a trim that gave back a
    lot (a second here) used to put the next check off by a hundred times that, so the
    last pages of a drain came back that much later."""
    from disque import heap_trim
    now = [0.0]
    free = [0]

    def slow_trim():
        now[0] += 1.0

    monkeypatch.setattr(heap_trim.procctl, "malloc_trim", slow_trim)
    monkeypatch.setattr(heap_trim, "heap_free_bytes", lambda: free[0])
    trim = heap_trim.HeapTrim(clock=lambda: now[0])
    now[0], free[0] = 5.0, 64 * MB
    assert trim.cron() and trim.trims == 1 and now[0] == 6.0
    assert trim.next_at == 5.0                  # the walk took no time
    free[0] = 64 * MB + 2 * MB                  # more freed since: the next cron trims again
    assert trim.cron() and trim.trims == 2
