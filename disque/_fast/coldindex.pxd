from libc.stdint cimport uint32_t, uint64_t

from disque._fast.coldring cimport ColdRing
from disque._fast.job cimport Job

# One spilled job in RAM (docs/design.md, "Spilled jobs"): its ID, where its record is in the
# spill log, and the two times that bring it back (its expiry and, for a job that is not
# queued, its next timer). Everything else is in the record on disk.
cdef struct ColdRec:
    char id[40]
    uint32_t seg        # segment number
    uint32_t off        # byte offset of the record in the segment
    uint32_t size       # record length; 0 = free slot (off is then the next free slot)
    uint32_t etime      # expiry, unix seconds
    uint32_t awake      # unix seconds its timer is due (0: a queued job, no timer but expiry)
    uint32_t ring       # ColdRing.ref + 1 of its queue; 0 = not queued
    uint32_t gen        # bumped when the slot is freed: ring entries of an old job go stale
    uint64_t seq        # its entry in the shard's job scan log (JSCAN), kept while spilled

cdef class ColdIndex:
    cdef ColdRec **blocks          # records in fixed blocks (no reallocation slack)
    cdef Py_ssize_t nblocks_cap
    cdef Py_ssize_t cap, used_slots
    cdef uint32_t free_head       # slot + 1 of the first free slot; 0 = none below used_slots
    cdef uint32_t *table          # by ID: 6 hash bits << 26 | slot + 1; 0 = empty
    cdef Py_ssize_t tcap
    cdef uint32_t *stable         # by scan-log seq: the same, with the seq's hash
    cdef Py_ssize_t stcap
    cdef public Py_ssize_t count
    cdef public list rings        # ColdRing by ref (None: unused ref)

    cdef ColdRec *rec(self, Py_ssize_t slot) noexcept
    cdef int add_block(self) except -1
    cdef void free_blocks(self) noexcept
    cdef Py_ssize_t bucket_of(self, const char *jid) noexcept
    cdef Py_ssize_t bucket_hashed(self, const char *jid, uint64_t h) noexcept
    cdef Py_ssize_t seq_bucket(self, uint64_t seq) noexcept
    cdef uint64_t slot_hash(self, uint32_t e, bint by_seq) noexcept
    cdef int grow(self, bint by_seq) except -1
    cdef int fill_table(self, bint by_seq, Py_ssize_t cap) except -1
    cdef void fill(self, bint by_seq, uint32_t *t, Py_ssize_t cap) noexcept
    cdef void repack_ring(self, ColdRing ring, uint32_t *moved) noexcept
    cdef void close_gap(self, bint by_seq, Py_ssize_t i) noexcept
    cpdef Py_ssize_t find(self, bytes jid)
    cpdef Py_ssize_t add(self, bytes jid, uint32_t seg, uint32_t off, uint32_t size,
                         uint32_t etime, uint32_t awake, ColdRing ring=*, bint front=*,
                         uint64_t seq=*) except -1
    cdef Py_ssize_t add_hashed(self, const char *key, uint64_t h, uint32_t seg, uint32_t off,
                               uint32_t size, uint32_t etime, uint32_t awake, ColdRing ring,
                               bint front, uint64_t seq) except -1
    cdef int add_one(self, Job job, uint64_t h, uint32_t size, uint32_t seg, uint32_t off,
                     ColdRing ring, bint front) except -1
    cdef bint entry_live(self, uint64_t e) noexcept
