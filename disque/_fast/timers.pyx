# cython: language_level=3
"""Timer structure that wakes jobs for delay / retry / TTL / GC (SPEC 7.1).

A binary min-heap of (when, job) that knows where each job sits (`Job.timer_pos`): a
reschedule moves the job's entry up or down, a cancel takes it out, both in O(log n). The
heap holds exactly the scheduled jobs, so a job deleted, acknowledged or spilled long before
its due time is freed at once, not when a stale entry would have surfaced (its body stayed
in RAM, uncounted by used_memory, until then).
"""
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdlib cimport malloc, realloc, free
from disque._fast.job cimport Job

from heapq import heappop


cdef class TimerHeap:
    def __cinit__(self):
        self.capacity = 1024
        self.heap = <TimerEntry*>malloc(self.capacity * sizeof(TimerEntry))
        if self.heap == NULL:
            raise MemoryError()
        self.size = 0

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.size):
            (<Job>self.heap[i].job).timer_pos = 0
            Py_DECREF(<object>self.heap[i].job)
        free(self.heap)

    def __len__(self):
        return self.size

    @property
    def heap_size(self):
        return self.size

    @property
    def allocated(self):
        return self.capacity

    cdef inline void place(self, Py_ssize_t i, TimerEntry item) noexcept:
        self.heap[i] = item
        (<Job>item.job).timer_pos = <unsigned int>(i + 1)

    cdef void sift_up(self, Py_ssize_t i) noexcept:
        cdef TimerEntry item = self.heap[i]
        cdef Py_ssize_t parent
        while i > 0:
            parent = (i - 1) >> 1
            if item.when >= self.heap[parent].when:
                break
            self.place(i, self.heap[parent])
            i = parent
        self.place(i, item)

    cdef void sift_down(self, Py_ssize_t i) noexcept:
        cdef TimerEntry item = self.heap[i]
        cdef Py_ssize_t child
        while True:
            child = 2 * i + 1
            if child >= self.size:
                break
            if child + 1 < self.size and self.heap[child + 1].when < self.heap[child].when:
                child += 1
            if self.heap[child].when >= item.when:
                break
            self.place(i, self.heap[child])
            i = child
        self.place(i, item)

    cdef void remove_at(self, Py_ssize_t i) noexcept:
        """Take entry i out (the caller owns its reference now); the last entry fills the hole."""
        cdef long long old
        (<Job>self.heap[i].job).timer_pos = 0
        self.size -= 1
        if i < self.size:
            old = self.heap[i].when
            self.heap[i] = self.heap[self.size]
            if self.heap[i].when < old:
                self.sift_up(i)
            else:
                self.sift_down(i)
        if self.capacity > 4096 and self.size < self.capacity >> 2:
            self.shrink()

    cdef void shrink(self) noexcept:
        cdef TimerEntry *smaller = <TimerEntry*>realloc(self.heap,
                                                        (self.capacity >> 1) * sizeof(TimerEntry))
        if smaller != NULL:
            self.heap = smaller
            self.capacity >>= 1

    cpdef void schedule(self, Job job, long long when):
        """(Re)schedule `job` at `when` ms (when > 0)."""
        cdef TimerEntry *grown
        cdef Py_ssize_t i
        cdef long long old
        job.awakeme = when
        if job.timer_pos:
            i = job.timer_pos - 1
            old = self.heap[i].when
            self.heap[i].when = when
            if when < old:
                self.sift_up(i)
            else:
                self.sift_down(i)
            return
        if self.size == self.capacity:
            grown = <TimerEntry*>realloc(self.heap, 2 * self.capacity * sizeof(TimerEntry))
            if grown == NULL:
                raise MemoryError()
            self.heap = grown
            self.capacity *= 2
        Py_INCREF(job)
        self.heap[self.size].when = when
        self.heap[self.size].job = <void*>job
        self.size += 1
        self.sift_up(self.size - 1)

    cpdef void cancel(self, Job job):
        if job.timer_pos:
            job.awakeme = 0
            self.remove_at(job.timer_pos - 1)
            Py_DECREF(job)

    cpdef list pop_due(self, long long now, Py_ssize_t limit):
        """Unschedule and return up to `limit` jobs whose time is <= now, earliest first."""
        cdef list due = []
        cdef Job job
        while self.size > 0 and len(due) < limit and self.heap[0].when <= now:
            job = <Job>self.heap[0].job
            job.awakeme = 0
            self.remove_at(0)
            due.append(job)
            Py_DECREF(job)      # the heap's reference; `due` holds its own
        return due

    cpdef long long next_when(self):
        """Due time of the earliest entry, or 0 when nothing is scheduled."""
        if self.size == 0:
            return 0
        return self.heap[0].when


cpdef bint waiter_due(list heap, double now) except -1:
    """Whether a waiter still waiting has its deadline at or before `now`, in a heap of
    (deadline, seq, waiter) (disque/deadlines.py). The entries of waiters done before
    their deadline (a consumer served, a GETJOB ended) are dropped as they reach the top,
    here: a due entry of a waiter that no longer waits is not worth a turn of the worker's
    Python loop, which is what answering True costs a worker's served loop."""
    cdef tuple top
    while len(heap) > 0:
        top = <tuple>heap[0]
        if <double>top[0] > now:
            return False
        if not top[2].done:
            return True
        heappop(heap)
    return False
