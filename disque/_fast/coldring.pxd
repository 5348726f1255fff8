from libc.stdint cimport uint32_t, uint64_t

cdef class ColdRing:
    cdef uint64_t *items        # slot << 32 | gen, oldest job first
    cdef Py_ssize_t head, count, cap
    cdef public Py_ssize_t live     # entries whose job is still spilled
    cdef public uint64_t back_ctime # the newest job's ctime at the back (0: empty)
    cdef public uint32_t ref
    cdef public object queue        # the Queue (disque/_fast/shardcore.pyx) it belongs to

    cdef int grow(self) except -1
    cdef int push_back(self, uint64_t entry) except -1
    cdef int push_front(self, uint64_t entry) except -1
