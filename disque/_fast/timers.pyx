# cython: language_level=3
"""Timer structure that wakes jobs for delay / retry / TTL / GC (SPEC 7.1).

A binary min-heap of (when, job, generation). Rescheduling never searches the heap:
it bumps the job's generation and pushes a new entry, so older entries become stale
and are skipped when they surface. When stale entries outnumber live ones the heap
is compacted, so jobs deleted long before their due time are freed promptly.
"""
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdlib cimport malloc, realloc, free
from disque._fast.job cimport Job


cdef inline bint entry_less(TimerEntry *a, TimerEntry *b) noexcept nogil:
    return a.when < b.when


cdef class TimerHeap:
    def __cinit__(self):
        self.capacity = 1024
        self.heap = <TimerEntry*>malloc(self.capacity * sizeof(TimerEntry))
        if self.heap == NULL:
            raise MemoryError()
        self.size = 0
        self.live = 0

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.size):
            Py_DECREF(<object>self.heap[i].job)
        free(self.heap)

    def __len__(self):
        return self.live

    @property
    def heap_size(self):
        return self.size

    cdef void sift_up(self, Py_ssize_t i) noexcept:
        cdef TimerEntry item = self.heap[i]
        cdef Py_ssize_t parent
        while i > 0:
            parent = (i - 1) >> 1
            if not entry_less(&item, &self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            i = parent
        self.heap[i] = item

    cdef void sift_down(self, Py_ssize_t i) noexcept:
        cdef TimerEntry item = self.heap[i]
        cdef Py_ssize_t child
        while True:
            child = 2 * i + 1
            if child >= self.size:
                break
            if child + 1 < self.size and entry_less(&self.heap[child + 1], &self.heap[child]):
                child += 1
            if not entry_less(&self.heap[child], &item):
                break
            self.heap[i] = self.heap[child]
            i = child
        self.heap[i] = item

    cdef bint is_current(self, TimerEntry *e) noexcept:
        cdef Job job = <Job>e.job
        return job.awakeme != 0 and job.timer_gen == e.gen

    cdef void push(self, Job job, long long when) except *:
        cdef TimerEntry *grown
        if self.size == self.capacity:
            grown = <TimerEntry*>realloc(self.heap, 2 * self.capacity * sizeof(TimerEntry))
            if grown == NULL:
                raise MemoryError()
            self.heap = grown
            self.capacity *= 2
        Py_INCREF(job)
        self.heap[self.size].when = when
        self.heap[self.size].job = <void*>job
        self.heap[self.size].gen = job.timer_gen
        self.size += 1
        self.sift_up(self.size - 1)

    cdef void compact(self):
        """Drop stale entries and re-heapify (O(n), amortized by the doubling rule)."""
        cdef Py_ssize_t i, j = 0
        for i in range(self.size):
            if self.is_current(&self.heap[i]):
                self.heap[j] = self.heap[i]
                j += 1
            else:
                Py_DECREF(<object>self.heap[i].job)
        self.size = j
        i = (self.size >> 1) - 1
        while i >= 0:
            self.sift_down(i)
            i -= 1

    cpdef void schedule(self, Job job, long long when):
        """(Re)schedule `job` at `when` ms (when > 0)."""
        if job.awakeme == 0:
            self.live += 1
        job.timer_gen += 1
        job.awakeme = when
        self.push(job, when)
        if self.size > 4096 and self.size > 2 * self.live:
            self.compact()

    cpdef void cancel(self, Job job):
        if job.awakeme != 0:
            self.live -= 1
            job.awakeme = 0
            job.timer_gen += 1

    cdef void drop_top(self):
        Py_DECREF(<object>self.heap[0].job)
        self.size -= 1
        if self.size > 0:
            self.heap[0] = self.heap[self.size]
            self.sift_down(0)

    cpdef list pop_due(self, long long now, Py_ssize_t limit):
        """Unschedule and return up to `limit` jobs whose time is <= now, earliest first."""
        cdef list due = []
        cdef Job job
        while self.size > 0 and len(due) < limit:
            if not self.is_current(&self.heap[0]):
                self.drop_top()
                continue
            if self.heap[0].when > now:
                break
            job = <Job>self.heap[0].job
            job.awakeme = 0
            job.timer_gen += 1
            self.live -= 1
            due.append(job)
            self.drop_top()
        return due

    cpdef long long next_when(self):
        """Due time of the earliest live entry, or 0 when nothing is scheduled."""
        while self.size > 0 and not self.is_current(&self.heap[0]):
            self.drop_top()
        if self.size == 0:
            return 0
        return self.heap[0].when
