# cython: language_level=3
"""A queue's spilled jobs in queue order (docs/design.md, "Spilled jobs"): the ring of
index entries that disque/_fast/coldindex.pyx keeps per queue."""
from libc.stdlib cimport malloc, free
from libc.stdint cimport uint64_t


cdef class ColdRing:
    """A queue's spilled jobs, oldest first: a ring of (slot, gen) entries. An entry whose
    slot was freed (its job loaded back or deleted) is stale and skipped when reached."""

    def __cinit__(self):
        self.items = NULL
        self.head = self.count = self.cap = 0
        self.live = 0
        self.back_ctime = 0

    def __dealloc__(self):
        free(self.items)

    def __len__(self):
        return self.live

    cdef int grow(self) except -1:
        cdef Py_ssize_t cap = 16 if self.cap < 16 else self.cap + self.cap // 2, i
        cdef uint64_t *p = <uint64_t *>malloc(cap * sizeof(uint64_t))
        if p == NULL:
            raise MemoryError()
        for i in range(self.count):
            p[i] = self.items[(self.head + i) % self.cap]
        free(self.items)
        self.items = p
        self.cap = cap
        self.head = 0
        return 0

    cdef int push_back(self, uint64_t entry) except -1:
        if self.count == self.cap:
            self.grow()
        self.items[(self.head + self.count) % self.cap] = entry
        self.count += 1
        return 0

    cdef int push_front(self, uint64_t entry) except -1:
        if self.count == self.cap:
            self.grow()
        self.head = (self.head + self.cap - 1) % self.cap
        self.items[self.head] = entry
        self.count += 1
        return 0

    def memory(self):
        return 64 + self.cap * 8
