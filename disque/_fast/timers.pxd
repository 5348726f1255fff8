from disque._fast.job cimport Job

cdef struct TimerEntry:
    long long when
    void *job            # owned reference
    unsigned int gen

cdef class TimerHeap:
    cdef TimerEntry *heap
    cdef Py_ssize_t size
    cdef Py_ssize_t capacity
    cdef Py_ssize_t live   # jobs with a current (non-stale) entry

    cdef void sift_up(self, Py_ssize_t i) noexcept
    cdef void sift_down(self, Py_ssize_t i) noexcept
    cdef bint is_current(self, TimerEntry *e) noexcept
    cdef void push(self, Job job, long long when) except *
    cdef void compact(self)
    cdef void drop_top(self)
    cpdef void schedule(self, Job job, long long when)
    cpdef void cancel(self, Job job)
    cpdef list pop_due(self, long long now, Py_ssize_t limit)
    cpdef long long next_when(self)
