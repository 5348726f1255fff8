cdef class ScanLog:
    cdef public list items           # logged objects in insertion order; None = removed
    cdef unsigned long long *seqs    # seqs[i]: the ever-increasing number of items[i]
    cdef Py_ssize_t cap
    cdef public Py_ssize_t n_dead
    cdef public unsigned long long next_seq
    cdef unsigned long long add(self, object item) except 0
    cdef void kill(self, unsigned long long seq)
    cdef void compact(self)
    cdef void fit(self) noexcept
    cpdef bint replace(self, unsigned long long seq, object item)
    cpdef Py_ssize_t position(self, unsigned long long seq)
