"""Freed C-heap memory goes back to the operating system (docs/memory.md, "RSS").

glibc keeps the pages of freed chunks inside its heap for reuse: after a drain, or while
spilled jobs leave RAM, the process keeps the RSS of its high-water mark although Python
freed the objects (a job's body, a reply, a buffer) long ago. `malloc_trim(0)` hands every
whole free page back (MADV_DONTNEED inside the heap, a shorter heap at its top).

A trim costs about a microsecond per page it returns, plus a walk of the free lists, so it
is not run on a timer alone: every ~100 ms each process reads how many bytes its heap holds
free (`mallinfo2`, a walk of the bins and no system call) and trims when that figure has
grown by TRIM_STEP since its lowest point after the last trim. The cost is at most one
trim per TRIM_STEP freed, and nothing on a node whose memory does not shrink. The walk
grows with the free chunks: in a worker spilling ten million jobs it took 3% of the
worker's time, so a check waits at least CHECK_BUDGET times what the last walk took: the
heap's books never cost more than 1% of a process. What stays
is memory still in use, free chunks smaller than a page between live ones, and the
interpreter's small-object arenas (freed whole when they empty, by Python itself).
"""
import time

from disque._fast import procctl
from disque._fast.procctl import heap_free_bytes

TRIM_STEP = 1 << 20         # bytes freed since the last trim's low point before trimming
CHECK_BUDGET = 100          # a check waits at least this many times the last one's cost


class HeapTrim:
    """One per process; `cron()` every ~100 ms: True when it trimmed (`trims` and
    `checks` count). `clock` (seconds) is for tests."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.low = heap_free_bytes()
        self.trims = self.checks = 0
        self.next_at = 0.0

    def cron(self):
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
        if free - self.low < TRIM_STEP:
            return False
        procctl.malloc_trim()
        self.trims += 1
        # the chunks stay free in malloc's books (their pages are gone): the next trim
        # waits for as much again to be freed
        self.low = heap_free_bytes()
        return True
