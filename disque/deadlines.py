"""The waiters a timeout ends, in one heap of (deadline, seq, waiter): a GETJOB's TIMEOUT,
for a worker's blocked consumers (disque/workers/consumers.py) and for the front-end's
GETJOBs across workers (disque/frontend/getjob.py). A waiter has a `done` flag.

A waiter answered before its timeout keeps its entry until then: taking it out of the
middle of the heap would cost a search. Such entries are dropped when they reach the top
(`due`, `take_due`), and in bulk when an `add`
finds the heap grown past twice its size at the last sweep (and past SWEEP_MIN), so a
heap of waiters that mostly still wait is never scanned again and again, and one of
waiters served long before their timeout cannot grow without bound.
"""
import heapq

from disque._fast.timers import waiter_due

SWEEP_MIN = 1024        # entries before the first sweep


class Deadlines:
    __slots__ = ("heap", "seq", "sweep_above")

    def __init__(self):
        self.heap = []          # never replaced: a worker's served loop holds it (servedloop.pyx)
        self.seq = 0
        self.sweep_above = SWEEP_MIN

    def __len__(self):
        return len(self.heap)

    def add(self, deadline, waiter):
        self.seq += 1
        heapq.heappush(self.heap, (deadline, self.seq, waiter))
        if len(self.heap) > self.sweep_above:
            self.sweep()

    def due(self, now):
        """Whether the deadline of a waiter not done has passed; the entries of waiters
        done that were due go (timers.waiter_due, which the served loop calls in C)."""
        return waiter_due(self.heap, now)

    def take_due(self, now):
        """The waiters whose deadline has passed and that are not done, earliest first."""
        heap = self.heap
        due = []
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if not waiter.done:
                due.append(waiter)
        return due

    def sweep(self):
        """Drop the entries of waiters already done, when they are over half the heap."""
        heap = self.heap
        live = [e for e in heap if not e[2].done]
        if len(live) * 2 < len(heap):
            heapq.heapify(live)
            heap[:] = live
        self.sweep_above = max(SWEEP_MIN, 2 * len(heap))

    def clear(self):
        self.heap.clear()
        self.sweep_above = SWEEP_MIN
