# cython: language_level=3
"""The QSCAN / JSCAN log of a worker's queues and jobs (SPEC 3.11): ShardCore keeps one
of each (job_log, queue_log); disque/workers/scan_share.py walks them."""
from libc.stdlib cimport realloc, free


cdef class ScanLog:
    """The objects of a dict (a shard's jobs or queues) in insertion order, for QSCAN/JSCAN.

    Each added object gets a sequence number that never changes and only grows; a cursor is
    "the next sequence number to look at". A removed object leaves a None (found again by
    bisection on the sequence numbers) and the holes are squeezed out once they are half the
    log, which moves positions but not sequence numbers. So an object present for a whole
    scan keeps its number and is reached when the cursor passes it: returned at least once,
    whatever is added or removed meanwhile, with bounded work per call and no state kept
    between calls. Cost: two words per object, plus at most as many per removed one.
    """
    def __cinit__(self):
        self.items = []
        self.seqs = NULL
        self.cap = 0
        self.n_dead = 0
        self.next_seq = 1

    def __dealloc__(self):
        free(self.seqs)

    def __len__(self):
        return len(self.items)

    @property
    def allocated(self):
        return self.cap

    cdef unsigned long long add(self, object item) except 0:
        cdef Py_ssize_t n = len(self.items), cap
        cdef unsigned long long *p
        if n == self.cap:
            cap = 64 if self.cap < 64 else self.cap * 2
            p = <unsigned long long *>realloc(self.seqs, cap * sizeof(unsigned long long))
            if p == NULL:
                raise MemoryError()
            self.seqs = p
            self.cap = cap
        cdef unsigned long long seq = self.next_seq
        self.next_seq += 1
        self.seqs[n] = seq
        self.items.append(item)
        return seq

    cpdef Py_ssize_t position(self, unsigned long long seq):
        """Index of the first item whose sequence number is >= seq."""
        cdef Py_ssize_t lo = 0, hi = len(self.items), mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.seqs[mid] < seq:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def seq_at(self, Py_ssize_t pos):
        return self.seqs[pos]

    cdef void kill(self, unsigned long long seq):
        cdef Py_ssize_t pos = self.position(seq), n = len(self.items)
        if pos < n and self.seqs[pos] == seq and self.items[pos] is not None:
            self.items[pos] = None
            self.n_dead += 1
            if self.n_dead > 1024 and self.n_dead * 2 > n:
                self.compact()

    cpdef bint replace(self, unsigned long long seq, object item):
        """Put `item` in place of the live entry `seq` (a job spilled to disk and back keeps
        its place, so a JSCAN running meanwhile still reaches it). False: no such entry."""
        cdef Py_ssize_t pos = self.position(seq)
        if pos < len(self.items) and self.seqs[pos] == seq and self.items[pos] is not None:
            self.items[pos] = item
            return True
        return False

    cdef void compact(self):
        cdef list items = self.items, kept = []
        cdef Py_ssize_t i, j = 0, n = len(items)
        for i in range(n):
            item = items[i]
            if item is not None:
                kept.append(item)
                self.seqs[j] = self.seqs[i]
                j += 1
        self.items = kept
        self.n_dead = 0
        self.fit()

    cdef void fit(self) noexcept:
        """Give back most of the sequence array once the log is a quarter of it (after a
        drain it would otherwise keep the size of the largest backlog, 8 bytes a job)."""
        cdef Py_ssize_t n = len(self.items), cap = self.cap
        cdef unsigned long long *p
        if cap <= 64 or n * 4 > cap:
            return
        while cap > 64 and n * 2 <= cap:
            cap >>= 1
        p = <unsigned long long *>realloc(self.seqs, cap * sizeof(unsigned long long))
        if p != NULL:
            self.seqs = p
            self.cap = cap

    def clear(self):
        self.items = []
        self.n_dead = 0
        self.fit()
