from disque._fast.job cimport Job

cdef struct TimerEntry:
    long long when
    void *job            # owned reference; the job's timer_pos is this entry's index + 1

cdef class TimerHeap:
    cdef TimerEntry *heap
    cdef Py_ssize_t size
    cdef Py_ssize_t capacity

    cdef void place(self, Py_ssize_t i, TimerEntry item) noexcept
    cdef void sift_up(self, Py_ssize_t i) noexcept
    cdef void sift_down(self, Py_ssize_t i) noexcept
    cdef void remove_at(self, Py_ssize_t i) noexcept
    cdef void shrink(self) noexcept
    cpdef void schedule(self, Job job, long long when)
    cpdef void cancel(self, Job job)
    cpdef list pop_due(self, long long now, Py_ssize_t limit)
    cpdef long long next_when(self)

cpdef bint waiter_due(list heap, double now) except -1
