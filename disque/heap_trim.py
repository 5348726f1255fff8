"""Freed C-heap memory goes back to the operating system (docs/memory.md, "RSS").

glibc keeps the pages of freed chunks inside its heap for reuse: after a drain, or while
spilled jobs leave RAM, the process keeps the RSS of its high-water mark although Python
freed the objects (a job's body, a reply, a buffer) long ago. `malloc_trim(0)` hands every
whole free page back (MADV_DONTNEED inside the heap, a shorter heap at its top).

A trim costs about a microsecond per page it returns, plus a walk of the free lists, so it
is not run on a timer alone: every ~100 ms each process reads how many bytes its heap holds
free (`mallinfo2`, a walk of the bins and no system call) and trims when that figure has
grown by TRIM_STEP since its lowest point after the last trim. The cost is at most one
trim per TRIM_STEP freed, and nothing on a node whose memory does not shrink. Less than
TRIM_STEP freed is trimmed once the heap is quiet (the same free bytes at two checks in a
row, as after a drain or a burst of connections): at most one trim per QUIET_STEP freed,
and only at rest, so that what a burst left below the step does not stay for good. The walk
grows with the free chunks: in a worker spilling ten million jobs it took 3% of the
worker's time, so a check waits at least CHECK_BUDGET times what the last walk took: the
heap's books never cost more than 1% of a process. What stays
is memory still in use and free chunks smaller than a page between live ones.

The interpreter's small objects live in its own arenas, outside malloc's heap: Python
unmaps an arena once it is empty, and PoolTrim hands back the free pools of the ones a
few survivors keep (disque/_fast/pymalloc_pools.pyx), at most once a second.
"""
import time

from disque._fast import procctl, pymalloc_pools
from disque._fast.procctl import heap_free_bytes

TRIM_STEP = 1 << 20         # bytes freed since the last trim's low point before trimming
QUIET_STEP = 64 << 10       # the same, once the heap stopped changing between two checks
CHECK_BUDGET = 100          # a check waits at least this many times the last one's cost
POOLS_EVERY_S = 1.0         # seconds between two walks of the interpreter's pools


class HeapTrim:
    """One per process; `cron()` every ~100 ms: True when it trimmed the heap (`trims`
    and `checks` count), the interpreter's pools on their own schedule (`pools`). `clock`
    (seconds) is for tests."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.low = heap_free_bytes()
        self.trims = self.checks = 0
        self.last_free = -1         # the free bytes the last check read
        self.next_at = 0.0
        self.pools = PoolTrim(clock)

    def cron(self):
        trimmed = self.trim_heap()
        self.pools.cron()
        return trimmed

    def trim_heap(self):
        if not procctl.has_heap_calls:
            return False
        start = self.clock()
        if start < self.next_at:
            return False
        self.checks += 1
        free = heap_free_bytes()
        # the walk is what a check costs; a trim costs what it gives back (at most one per
        # TRIM_STEP freed), and counting it put the check after a big one off by seconds:
        # the last pages of a drain came back that much later
        walked = self.clock()
        self.next_at = walked + (walked - start) * CHECK_BUDGET
        return self.check(free)

    def check(self, free):
        if free < self.low:
            self.low = free
        freed = free - self.low
        quiet = free == self.last_free
        self.last_free = free
        if freed < TRIM_STEP and not (quiet and freed >= QUIET_STEP):
            return False
        procctl.malloc_trim()
        self.trims += 1
        # the chunks stay free in malloc's books (their pages are gone): the next trim
        # waits for as much again to be freed
        self.low = heap_free_bytes()
        return True


class PoolTrim:
    """The pages of the interpreter's free small-object pools back to the system: a walk
    of the pool headers (about 64 per MB of arenas) at most every POOLS_EVERY_S, and at
    most 1% of the process's time. `given` counts the bytes handed back."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.next_at = 0.0
        self.walks = self.given = 0

    def cron(self):
        if not pymalloc_pools.enabled:
            return 0
        start = self.clock()
        if start < self.next_at:
            return 0
        given = pymalloc_pools.give_back()
        self.walks += 1
        self.given += given
        walked = self.clock()
        self.next_at = walked + max(POOLS_EVERY_S, (walked - start) * CHECK_BUDGET)
        return given
