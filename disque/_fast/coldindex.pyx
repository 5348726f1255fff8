# cython: language_level=3
"""The RAM index of a worker's spilled jobs (docs/design.md, "Spilled jobs"): a C record of
about 80 bytes per job, against ~340 bytes plus the body for a job held in memory.

ColdIndex: slots of ColdRec, an open-addressing hash table from job ID to slot (and one
from scan-log seq to slot), and one ColdRing per queue holding its spilled jobs in queue
order. A bucket is 4 bytes: the slot + 1 in its low SLOT_BITS, and 6 more bits of its
key's hash above, which a probe compares before it reads a record (with ten million
spilled jobs every record read is a cache and TLB miss). So a worker indexes at most
MAX_SLOTS spilled jobs (`room` says how many more). disque/workers/spill.py decides
what to spill and when; disque/workers/spill_log.py holds the records on disk.
"""
from libc.stdlib cimport malloc, realloc, free, calloc
from libc.string cimport memcpy, memcmp
from libc.stdint cimport uint32_t, uint64_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

from disque._fast.coldring cimport ColdRing
from disque._fast.job cimport Job
from disque._fast.cachehint cimport prefetch

DEF ID_LEN = 40
DEF NO_SLOT = -1
# records come in blocks of 1,024 (80 KB): small against any maxmemory (docs/memory.md,
# "Spilling": no allocation step of the index moves a node across a memory level by itself)
DEF BLOCK_BITS = 10
DEF BLOCK_SLOTS = 1 << BLOCK_BITS
DEF SLOT_BITS = 26
DEF SLOT_MASK = (1 << SLOT_BITS) - 1
MAX_SLOTS = SLOT_MASK           # slot + 1 must fit in SLOT_BITS
# a repack moves every live record: worth it only once the index is large and mostly free
REPACK_MIN_SLOTS = 64 * BLOCK_SLOTS
DEF MIN_TABLE = 1024
DEF FILL_AHEAD = 32             # records whose buckets a table's refill prefetches at once
DEF STALE_ENTRY = 0xffffffff00000000ULL    # a ring entry whose slot no index reaches


cdef inline uint64_t seq_hash(uint64_t x) noexcept:
    """splitmix64's finalizer: sequence numbers are consecutive, buckets must not be."""
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL
    return x ^ (x >> 31)


cdef inline uint64_t id_hash(const char *jid) noexcept:
    """The ID's five 8-byte words, each multiplied in, then splitmix64's finalizer: its
    random part spreads every bit. (FNV-1a a byte at a time was 40 dependent multiplies:
    7% of a spilling worker.)"""
    cdef uint64_t h = 0x9e3779b97f4a7c15ULL, w
    cdef int i
    for i in range(0, ID_LEN, 8):
        memcpy(&w, jid + i, 8)
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL
        h ^= h >> 29
    return seq_hash(h)


cdef inline uint32_t hash_tag(uint64_t h) noexcept:
    """The hash bits a bucket keeps: its top 6, above the slot (the bucket is its low bits)."""
    return <uint32_t>(h >> 58) << SLOT_BITS


cdef inline uint64_t renamed(uint64_t e, uint32_t *moved) noexcept:
    """A ring entry (slot << 32 | gen) with its record's slot after a repack."""
    return (<uint64_t>moved[e >> 32] << 32) | (e & 0xffffffffULL)


cdef Py_ssize_t table_cap(Py_ssize_t n) noexcept:
    """Buckets for a table remade for `n` jobs: twice as many before it grows (70% full)."""
    cdef Py_ssize_t cap = MIN_TABLE
    while cap * 7 < n * 20:
        cap *= 2
    return cap


cdef class ColdIndex:
    def __cinit__(self):
        self.blocks = NULL
        self.nblocks_cap = 0
        self.cap = self.used_slots = 0
        self.free_head = 0
        self.tcap = MIN_TABLE
        self.table = <uint32_t *>calloc(self.tcap, sizeof(uint32_t))
        self.stcap = MIN_TABLE
        self.stable = <uint32_t *>calloc(self.stcap, sizeof(uint32_t))
        if self.table == NULL or self.stable == NULL:
            raise MemoryError()
        self.count = 0
        self.rings = []

    def __dealloc__(self):
        self.free_blocks()
        free(self.table)
        free(self.stable)

    def __len__(self):
        return self.count

    def memory(self):
        """Bytes held: the record array, the hash table and the rings."""
        cdef Py_ssize_t n = (self.cap * sizeof(ColdRec) + (self.tcap + self.stcap) * 4
                             + self.nblocks_cap * 8)
        for r in self.rings:
            if r is not None:
                n += (<ColdRing>r).memory()
        return n

    @property
    def slot_limit(self):
        """Slots ever used: a cursor over [0, slot_limit) sees every spilled job."""
        return self.used_slots

    @property
    def room(self):
        """How many more jobs the index takes (MAX_SLOTS in all)."""
        return MAX_SLOTS - self.count

    # ---- record blocks ---------------------------------------------------------------------

    cdef inline ColdRec *rec(self, Py_ssize_t slot) noexcept:
        return &self.blocks[slot >> BLOCK_BITS][slot & (BLOCK_SLOTS - 1)]

    cdef int add_block(self) except -1:
        cdef Py_ssize_t n = self.cap >> BLOCK_BITS
        cdef ColdRec **b
        if n == self.nblocks_cap:
            b = <ColdRec **>realloc(self.blocks, (n * 2 + 8) * sizeof(ColdRec *))
            if b == NULL:
                raise MemoryError()
            self.blocks = b
            self.nblocks_cap = n * 2 + 8
        self.blocks[n] = <ColdRec *>malloc(BLOCK_SLOTS * sizeof(ColdRec))
        if self.blocks[n] == NULL:
            raise MemoryError()
        self.cap += BLOCK_SLOTS
        return 0

    cdef void free_blocks(self) noexcept:
        cdef Py_ssize_t i
        for i in range(self.cap >> BLOCK_BITS):
            free(self.blocks[i])
        free(self.blocks)
        self.blocks = NULL
        self.nblocks_cap = 0
        self.cap = 0

    # ---- the hash table ------------------------------------------------------------------

    cdef Py_ssize_t bucket_of(self, const char *jid) noexcept:
        """The bucket holding `jid`, or the empty bucket where it would go."""
        return self.bucket_hashed(jid, id_hash(jid))

    cdef Py_ssize_t bucket_hashed(self, const char *jid, uint64_t h) noexcept:
        """bucket_of with the ID's hash already known."""
        cdef uint32_t tag = hash_tag(h), e
        cdef Py_ssize_t mask = self.tcap - 1, b = h & mask
        while True:
            e = self.table[b]
            if e == 0 or ((e & ~SLOT_MASK) == tag
                          and memcmp(self.rec((e & SLOT_MASK) - 1).id, jid, ID_LEN) == 0):
                return b
            b = (b + 1) & mask

    cdef Py_ssize_t seq_bucket(self, uint64_t seq) noexcept:
        """The bucket holding `seq`, or the empty bucket where it would go."""
        cdef uint64_t h = seq_hash(seq)
        cdef uint32_t tag = hash_tag(h), e
        cdef Py_ssize_t mask = self.stcap - 1, b = h & mask
        while True:
            e = self.stable[b]
            if e == 0 or ((e & ~SLOT_MASK) == tag and self.rec((e & SLOT_MASK) - 1).seq == seq):
                return b
            b = (b + 1) & mask

    cdef uint64_t slot_hash(self, uint32_t e, bint by_seq) noexcept:
        """The hash of the job a bucket entry names, for one of the two tables."""
        cdef ColdRec *r = self.rec((e & SLOT_MASK) - 1)
        return seq_hash(r.seq) if by_seq else id_hash(r.id)

    cdef int grow(self, bint by_seq) except -1:
        """Double one of the two tables (by ID, or by scan-log seq)."""
        return self.fill_table(by_seq, (self.stcap if by_seq else self.tcap) * 2)

    cdef int fill_table(self, bint by_seq, Py_ssize_t cap) except -1:
        """Make one of the two tables anew with `cap` buckets (a power of two)."""
        cdef uint32_t *t = <uint32_t *>calloc(cap, sizeof(uint32_t))
        if t == NULL:
            raise MemoryError()
        self.fill(by_seq, t, cap)
        return 0

    cdef void fill(self, bint by_seq, uint32_t *t, Py_ssize_t cap) noexcept:
        """The zeroed table `t` of `cap` buckets filled from the live records (in the seq
        table, those with a seq) in slot order, and in place of the old one. FILL_AHEAD
        records' buckets are prefetched before the first is written: one after the other,
        the misses of a table of millions were 80% of a growth."""
        cdef Py_ssize_t mask = cap - 1, slot = 0, b, n, k
        cdef uint64_t hs[FILL_AHEAD]
        cdef uint32_t ss[FILL_AHEAD]
        cdef ColdRec *r
        while slot < self.used_slots:
            n = 0
            while n < FILL_AHEAD and slot < self.used_slots:
                r = self.rec(slot)
                slot += 1
                if r.size == 0 or (by_seq and r.seq == 0):
                    continue
                hs[n] = seq_hash(r.seq) if by_seq else id_hash(r.id)
                ss[n] = <uint32_t>slot          # a bucket holds slot + 1
                prefetch(&t[hs[n] & mask])
                n += 1
            for k in range(n):
                b = hs[k] & mask
                while t[b]:
                    b = (b + 1) & mask
                t[b] = hash_tag(hs[k]) | ss[k]
        if by_seq:
            free(self.stable)
            self.stable, self.stcap = t, cap
        else:
            free(self.table)
            self.table, self.tcap = t, cap

    cdef void close_gap(self, bint by_seq, Py_ssize_t i) noexcept:
        """Empty bucket i of one table and shift back the entries after it (linear probing
        without tombstones)."""
        cdef uint32_t *t = self.stable if by_seq else self.table
        cdef Py_ssize_t mask = (self.stcap if by_seq else self.tcap) - 1, j = i, k
        t[i] = 0
        while True:
            j = (j + 1) & mask
            if t[j] == 0:
                return
            k = self.slot_hash(t[j], by_seq) & mask
            # move j's entry into the hole i unless its home bucket k lies in (i, j]
            if (j > i and (k <= i or k > j)) or (j < i and (k <= i and k > j)):
                t[i] = t[j]
                t[j] = 0
                i = j

    def find_seq(self, uint64_t seq):
        """The slot of the spilled job whose scan-log entry is `seq`, or -1."""
        if seq == 0 or self.count == 0:
            return NO_SLOT
        cdef uint32_t e = self.stable[self.seq_bucket(seq)]
        return <Py_ssize_t>(e & SLOT_MASK) - 1 if e else NO_SLOT

    def seq_of(self, Py_ssize_t slot):
        return self.rec(slot).seq

    cpdef Py_ssize_t find(self, bytes jid):
        """The slot of a spilled job, or -1."""
        if len(jid) != ID_LEN or self.count == 0:
            return NO_SLOT
        cdef uint32_t e = self.table[self.bucket_of(PyBytes_AS_STRING(jid))]
        return <Py_ssize_t>(e & SLOT_MASK) - 1 if e else NO_SLOT

    # ---- records -------------------------------------------------------------------------

    cpdef Py_ssize_t add(self, bytes jid, uint32_t seg, uint32_t off, uint32_t size,
                         uint32_t etime, uint32_t awake, ColdRing ring=None, bint front=False,
                         uint64_t seq=0) except -1:
        """Index a job just written to the spill log; it joins `ring` at the back (newer
        than every spilled job of its queue) or the front (older). Returns its slot."""
        if len(jid) != ID_LEN or size == 0:
            raise ValueError("bad spilled job")
        cdef const char *key = PyBytes_AS_STRING(jid)
        return self.add_hashed(key, id_hash(key), seg, off, size, etime, awake, ring, front,
                               seq)

    cdef Py_ssize_t add_hashed(self, const char *key, uint64_t h, uint32_t seg, uint32_t off,
                               uint32_t size, uint32_t etime, uint32_t awake, ColdRing ring,
                               bint front, uint64_t seq) except -1:
        """add, for an ID of ID_LEN bytes whose hash is known."""
        if self.count >= MAX_SLOTS:
            raise MemoryError("the spill index is full")
        # both tables grow before the record is written (grow refills them from the records)
        if (self.count + 1) * 10 > self.tcap * 7:
            self.grow(False)
        if seq and (self.count + 1) * 10 > self.stcap * 7:
            self.grow(True)
        cdef Py_ssize_t b = self.bucket_hashed(key, h)
        if self.table[b]:
            raise KeyError("job already spilled")
        cdef Py_ssize_t slot
        if self.free_head:
            slot = self.free_head - 1
            self.free_head = self.rec(slot).off
        else:
            if self.used_slots == self.cap:
                self.add_block()
            slot = self.used_slots
            self.used_slots += 1
            self.rec(slot).gen = 0
        cdef ColdRec *r = self.rec(slot)
        memcpy(r.id, key, ID_LEN)
        r.seg, r.off, r.size, r.etime, r.awake, r.ring, r.seq = seg, off, size, etime, awake, 0, seq
        self.table[b] = hash_tag(h) | <uint32_t>(slot + 1)
        if seq:
            self.stable[self.seq_bucket(seq)] = hash_tag(seq_hash(seq)) | <uint32_t>(slot + 1)
        self.count += 1
        cdef uint64_t entry = (<uint64_t>slot << 32) | r.gen
        if ring is not None:
            r.ring = ring.ref + 1
            if front:
                ring.push_front(entry)
            else:
                ring.push_back(entry)
            ring.live += 1
        return slot

    def add_tail(self, ColdRing ring, list jobs, list sizes, uint32_t seg, uint32_t off):
        """Index a queue's tail just written to the spill log: `jobs` newest first (as a
        batch is picked), their records of `sizes` one after the other from `off` of
        segment `seg`. Each goes before the ring's jobs, each before the last; any newer
        than the ring's newest (added since its last batch) goes after them, oldest first.
        The tables grow once for the whole batch, then every job's two buckets are
        prefetched before the first is written: a bucket of a table of millions is a cache
        miss, and the batch's misses overlap instead of following one another."""
        cdef Py_ssize_t n = len(jobs), i
        if n == 0:
            return
        if len(sizes) != n:
            raise ValueError("a size per spilled job")
        cdef bint had = ring.live > 0
        cdef uint64_t newest = ring.back_ctime
        cdef list newer = []
        cdef Job job
        cdef uint64_t *hashes = <uint64_t *>malloc(n * sizeof(uint64_t))
        cdef uint32_t *offs = <uint32_t *>malloc(n * sizeof(uint32_t))
        try:
            if hashes == NULL or offs == NULL:
                raise MemoryError()
            for i in range(n):
                offs[i] = off
                off += <uint32_t>sizes[i]
            while (self.count + n) * 10 > self.tcap * 7:
                self.grow(False)
            while (self.count + n) * 10 > self.stcap * 7:
                self.grow(True)
            for i in range(n):
                job = <Job>jobs[i]
                if len(job.id) != ID_LEN:
                    raise ValueError("bad spilled job")
                hashes[i] = id_hash(PyBytes_AS_STRING(job.id))
                prefetch(&self.table[hashes[i] & (self.tcap - 1)])
                prefetch(&self.stable[seq_hash((<uint64_t>job.scan_hi << 32) | job.scan_lo)
                                      & (self.stcap - 1)])
            for i in range(n):
                job = <Job>jobs[i]
                if had and job.ctime > newest:
                    newer.append(i)
                    continue
                self.add_one(job, hashes[i], sizes[i], seg, offs[i], ring, True)
                if not had and ring.back_ctime < job.ctime:
                    ring.back_ctime = job.ctime
            for i in reversed(newer):
                job = <Job>jobs[i]
                self.add_one(job, hashes[i], sizes[i], seg, offs[i], ring, False)
                ring.back_ctime = job.ctime
        finally:
            free(hashes)
            free(offs)

    cdef int add_one(self, Job job, uint64_t h, uint32_t size, uint32_t seg, uint32_t off,
                     ColdRing ring, bint front) except -1:
        if size == 0:
            raise ValueError("bad spilled job")
        self.add_hashed(PyBytes_AS_STRING(job.id), h, seg, off, size, job.etime, 0,
                        ring, front, (<uint64_t>job.scan_hi << 32) | job.scan_lo)
        return 0

    def remove(self, Py_ssize_t slot):
        """Forget a spilled job (loaded back, or deleted): its slot is free, its ring entry
        stale, and the hash table closes the gap (backward shift, no tombstones)."""
        cdef ColdRec *r = self.rec(slot)
        if r.size == 0:
            return
        self.close_gap(False, self.bucket_of(r.id))
        cdef Py_ssize_t b
        if r.seq:
            b = self.seq_bucket(r.seq)
            if self.stable[b]:
                self.close_gap(True, b)
        cdef ColdRing ring
        if r.ring:
            ring = self.rings[r.ring - 1]
            ring.live -= 1
            if ring.live == 0:
                ring.head = ring.count = 0
                ring.back_ctime = 0
        r.size = 0
        r.gen += 1
        r.off = self.free_head
        self.free_head = <uint32_t>(slot + 1)
        self.count -= 1

    def location(self, Py_ssize_t slot):
        """(segment, offset, size) of a live slot; size 0 for a free one."""
        cdef ColdRec *r = self.rec(slot)
        if r.size == 0:
            return (0, 0, 0)
        return (r.seg, r.off, r.size)

    def move(self, Py_ssize_t slot, uint32_t seg, uint32_t off):
        """The record was copied elsewhere (compaction)."""
        self.rec(slot).seg = seg
        self.rec(slot).off = off

    def job_id(self, Py_ssize_t slot):
        return PyBytes_FromStringAndSize(self.rec(slot).id, ID_LEN)

    def is_queued(self, Py_ssize_t slot):
        return self.rec(slot).size != 0 and self.rec(slot).ring != 0

    # ---- rings ---------------------------------------------------------------------------

    def new_ring(self, queue):
        cdef ColdRing ring = ColdRing()
        ring.queue = queue
        cdef Py_ssize_t i
        for i in range(len(self.rings)):
            if self.rings[i] is None:
                ring.ref = <uint32_t>i
                self.rings[i] = ring
                return ring
        ring.ref = <uint32_t>len(self.rings)
        self.rings.append(ring)
        return ring

    def drop_ring(self, ColdRing ring):
        """An empty ring leaves (its queue is deleted or emptied)."""
        if ring.live:
            raise ValueError("ring still holds spilled jobs")
        if ring.ref < len(self.rings) and self.rings[ring.ref] is ring:
            self.rings[ring.ref] = None

    cdef bint entry_live(self, uint64_t e) noexcept:
        cdef Py_ssize_t slot = <Py_ssize_t>(e >> 32)
        return slot < self.used_slots and self.rec(slot).size != 0 \
            and self.rec(slot).gen == <uint32_t>(e & 0xffffffffULL)

    def take_front(self, ColdRing ring, Py_ssize_t n):
        """Pop up to `n` live slots from the front of `ring`, oldest first. They stay
        indexed (and counted in ring.live) until `remove`; `put_front` undoes the pop."""
        cdef list out = []
        cdef uint64_t e
        while ring.count and len(out) < n:
            e = ring.items[ring.head]
            ring.head = (ring.head + 1) % ring.cap
            ring.count -= 1
            if self.entry_live(e):
                out.append(<Py_ssize_t>(e >> 32))
        return out

    def put_front(self, ColdRing ring, list slots):
        """Give slots taken by `take_front` back in their order (a failed read), those still
        spilled: a slot freed meanwhile would name whichever job takes it next."""
        cdef Py_ssize_t i, slot
        for i in range(len(slots) - 1, -1, -1):
            slot = slots[i]
            if self.rec(slot).size != 0:
                ring.push_front((<uint64_t>slot << 32) | self.rec(slot).gen)

    def peek(self, ColdRing ring, Py_ssize_t n, bint from_back=False):
        """Up to `n` live slots from the front (or the back), without taking them."""
        cdef list out = []
        cdef Py_ssize_t i = 0, pos
        cdef uint64_t e
        while i < ring.count and len(out) < n:
            pos = (ring.head + (ring.count - 1 - i if from_back else i)) % ring.cap
            e = ring.items[pos]
            if self.entry_live(e):
                out.append(<Py_ssize_t>(e >> 32))
            i += 1
        return out

    # ---- walks ---------------------------------------------------------------------------

    def due(self, Py_ssize_t start, Py_ssize_t steps, uint32_t until_s):
        """Slots among [start, start + steps) whose expiry or timer comes by `until_s`:
        ([slots], next start, 0 when the walk wrapped)."""
        cdef list out = []
        cdef Py_ssize_t i = start, end = start + steps
        cdef ColdRec *r
        if end > self.used_slots:
            end = self.used_slots
        while i < end:
            r = self.rec(i)
            if r.size and (r.etime <= until_s or (r.awake and r.awake <= until_s)):
                out.append(i)
            i += 1
        return out, (0 if i >= self.used_slots else i)

    def live_slots(self, Py_ssize_t start, Py_ssize_t steps):
        """Live slots among [start, start + steps) and the next start (-1: done)."""
        cdef list out = []
        cdef Py_ssize_t i = start, end = start + steps
        if end > self.used_slots:
            end = self.used_slots
        while i < end:
            if self.rec(i).size:
                out.append(i)
            i += 1
        return out, (-1 if i >= self.used_slots else i)

    def clear(self):
        """Forget everything (FLUSHALL); the rings' queues drop theirs."""
        cdef Py_ssize_t slot
        for slot in range(self.used_slots):
            self.rec(slot).size = 0
        for r in self.rings:
            if r is not None:
                (<ColdRing>r).live = 0
        self.count = 0
        self.repack()

    def shrink(self):
        """With no spilled job left, give the arrays back (used_memory falls with them)."""
        if self.count == 0:
            self.repack()

    def sparse(self):
        """Whether `repack` would give back most of the records' memory: 3/4 slots free."""
        return self.used_slots >= REPACK_MIN_SLOTS and self.count * 4 <= self.used_slots

    def repack(self):
        """Move the live records down to the lowest slots, in slot order, and give back the
        blocks, buckets and ring entries left over (a partial drain shrinks the index).
        Every live job's slot changes: no slot may be held across it (taken from a ring, a
        walk's cursor). What it needs is allocated first: out of memory, nothing changes."""
        cdef Py_ssize_t used = self.used_slots, slot, k = 0, i, nblocks, cap
        cdef ColdRec *r
        cdef uint32_t *moved = <uint32_t *>malloc((used if used else 1) * sizeof(uint32_t))
        if moved == NULL:
            raise MemoryError()
        for slot in range(used):                # where each live record goes
            if self.rec(slot).size:
                moved[slot] = <uint32_t>k
                k += 1
        cap = table_cap(k)
        cdef uint32_t *by_id = <uint32_t *>calloc(cap, sizeof(uint32_t))
        cdef uint32_t *by_seq = <uint32_t *>calloc(cap, sizeof(uint32_t))
        if by_id == NULL or by_seq == NULL:
            free(moved)
            free(by_id)
            free(by_seq)
            raise MemoryError()
        for r_ in self.rings:
            if r_ is not None:
                self.repack_ring(<ColdRing>r_, moved)
        for slot in range(used):                # k <= slot: nothing unread is overwritten
            r = self.rec(slot)
            if r.size and moved[slot] != slot:
                memcpy(self.rec(moved[slot]), r, sizeof(ColdRec))
        free(moved)
        nblocks = (k + BLOCK_SLOTS - 1) >> BLOCK_BITS
        for i in range(nblocks, self.cap >> BLOCK_BITS):
            free(self.blocks[i])
            self.blocks[i] = NULL
        self.cap = nblocks << BLOCK_BITS
        if nblocks == 0:
            free(self.blocks)
            self.blocks = NULL
            self.nblocks_cap = 0
        self.used_slots = k
        self.free_head = 0
        self.fill(False, by_id, cap)
        self.fill(True, by_seq, cap)

    cdef void repack_ring(self, ColdRing ring, uint32_t *moved) noexcept:
        """A ring's live entries renamed to their records' new slots, in their order, and
        stale ones dropped: in a new array cut to fit, or (out of memory) in place, a stale
        entry then naming no slot."""
        cdef Py_ssize_t i, pos, n = 0, live = 0
        cdef uint64_t e
        cdef uint64_t *items = NULL
        for i in range(ring.count):
            if self.entry_live(ring.items[(ring.head + i) % ring.cap]):
                live += 1
        if live:
            items = <uint64_t *>malloc(live * sizeof(uint64_t))
        if live and items == NULL:
            for i in range(ring.count):
                pos = (ring.head + i) % ring.cap
                e = ring.items[pos]
                ring.items[pos] = renamed(e, moved) if self.entry_live(e) else STALE_ENTRY
            return
        for i in range(ring.count):
            e = ring.items[(ring.head + i) % ring.cap]
            if self.entry_live(e):
                items[n] = renamed(e, moved)
                n += 1
        if n == 0:
            ring.back_ctime = 0
        free(ring.items)
        ring.items, ring.head, ring.count, ring.cap = items, 0, n, n
