# cython: language_level=3
"""Job IDs (SPEC 5) and queue slots (docs/design.md, "Slots").

ID layout: D-<node8>-<24 chars>-<ttl4>. The first two characters of the 24-char part
encode the queue slot (2 x 6 bits = 4096 slots), so any ID routes to its owning worker
without a lookup; the other 22 characters carry 132 random bits.
"""
import os
from libc.stdint cimport uint64_t, uint16_t

cdef bytes B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
cdef const unsigned char *B64C = B64
cdef signed char B64_DECODE[256]
cdef int _i
for _i in range(256):
    B64_DECODE[_i] = -1
for _i in range(64):
    B64_DECODE[B64C[_i]] = _i

NUM_SLOTS = 4096
ID_LEN = 40

# CRC16-CCITT (XMODEM), the hash Redis Cluster uses for key slots.
cdef uint16_t CRC16_TAB[256]
cdef uint16_t _crc
cdef int _j
for _i in range(256):
    _crc = <uint16_t>(_i << 8)
    for _j in range(8):
        if _crc & 0x8000:
            _crc = <uint16_t>((_crc << 1) ^ 0x1021)
        else:
            _crc = <uint16_t>(_crc << 1)
    CRC16_TAB[_i] = _crc


cpdef unsigned int crc16(bytes data):
    cdef const unsigned char *p = data
    cdef Py_ssize_t n = len(data), i
    cdef uint16_t crc = 0
    for i in range(n):
        crc = <uint16_t>((crc << 8) ^ CRC16_TAB[((crc >> 8) ^ p[i]) & 0xff])
    return crc


cpdef unsigned int queue_slot(bytes queue):
    """slot(queue) = crc16(queue) mod 4096: the same on every node and every restart."""
    return crc16(queue) & 4095


cpdef bint valid_id(bytes jid):
    """Upstream's check: 40 chars, 'D-' prefix, dashes at 10 and 35; nothing else."""
    return len(jid) == 40 and valid_id_at(jid)


cdef bint valid_id_at(const unsigned char *p) noexcept nogil:
    """valid_id for the 40 bytes at p (a job message's payload holds its ID at an offset)."""
    return p[0] == b'D' and p[1] == b'-' and p[10] == b'-' and p[35] == b'-'


cpdef int id_slot(bytes jid):
    """Slot carried by a valid ID, or -1 when its slot characters are not base64."""
    return id_slot_at(jid)


cdef int id_slot_at(const unsigned char *p) noexcept nogil:
    cdef int hi = B64_DECODE[p[11]], lo = B64_DECODE[p[12]]
    if hi < 0 or lo < 0:
        return -1
    return (hi << 6) | lo


cpdef int queue_worker(bytes queue, int nworkers):
    """The worker of a node with `nworkers` workers that owns `queue` (docs/design.md, "Slots")."""
    return queue_slot(queue) % nworkers


cpdef int id_worker(bytes jid, int nworkers):
    """The worker that owns the job of a 40-character ID: its slot's, worker 0 for an ID
    whose slot characters do not decode (another implementation's)."""
    return id_worker_at(jid, nworkers)


cdef int id_worker_at(const unsigned char *p, int nworkers) noexcept nogil:
    """id_worker for the 40 bytes at p."""
    cdef int slot = id_slot_at(p)
    return (slot if slot >= 0 else 0) % nworkers


cpdef unsigned int id_ttl_minutes(bytes jid):
    """TTL field of an ID (hex, case-insensitive; invalid digits count as 0)."""
    cdef const unsigned char *p = jid
    cdef unsigned int v = 0, d
    cdef int i
    cdef unsigned char c
    for i in range(36, 40):
        c = p[i]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            d = 0
        v = (v << 4) | d
    return v


cdef inline uint64_t splitmix64(uint64_t x) noexcept nogil:
    x += 0x9E3779B97F4A7C15ULL
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef class IdMaker:
    """Makes job IDs and creation times for one process.

    The random part comes from splitmix64 over (random seed + counter): a bijection of the
    counter, so IDs never repeat within a process, and 132 bits seeded from os.urandom keep
    processes and nodes apart.
    """
    # fields: jobid.pxd

    def __init__(self, node_id):
        if isinstance(node_id, str):
            node_id = node_id.encode()
        self.set_node(node_id)
        seed = os.urandom(16)
        self.seed_a = int.from_bytes(seed[:8], "little")
        self.seed_b = int.from_bytes(seed[8:], "little")
        self.counter = 0
        self.last_ctime = 0

    def set_node(self, bytes node_id):
        self.prefix = b"D-" + node_id[:8].lower() + b"-"

    cpdef bytes make(self, unsigned int slot, long long ttl_seconds, long long retry):
        cdef char buf[40]
        cdef const char *pre = self.prefix
        cdef int i
        for i in range(11):
            buf[i] = pre[i]
        buf[11] = B64C[(slot >> 6) & 63]
        buf[12] = B64C[slot & 63]
        self.counter += 1
        # 132 bits taken in order from the words (a, b, c); a alone is a bijection of the
        # counter, so IDs made by one process are distinct.
        cdef uint64_t w[3]
        w[0] = splitmix64(self.seed_a + self.counter)
        w[1] = splitmix64(self.seed_b + self.counter)
        w[2] = splitmix64(self.seed_a ^ self.seed_b ^ (self.counter << 1))
        cdef int off, word, sh
        cdef uint64_t v
        for i in range(22):
            off = 6 * i
            word = off >> 6
            sh = off & 63
            v = w[word] >> sh
            if sh > 58:
                v |= w[word + 1] << (64 - sh)
            buf[13 + i] = B64C[v & 63]
        buf[35] = b'-'
        cdef long long minutes = ttl_seconds // 60
        if minutes > 65535:
            minutes = 65535
        if retry > 0:
            minutes |= 1
        else:
            minutes &= ~1
        cdef const char *hexd = b"0123456789abcdef"
        buf[36] = hexd[(minutes >> 12) & 15]
        buf[37] = hexd[(minutes >> 8) & 15]
        buf[38] = hexd[(minutes >> 4) & 15]
        buf[39] = hexd[minutes & 15]
        return buf[:40]

    cpdef unsigned long long next_ctime(self, long long now_ms):
        """ms * 1e6, strictly increasing within the process (SPEC 6.3)."""
        cdef unsigned long long c = <unsigned long long>now_ms * 1000000ULL
        if c <= self.last_ctime:
            c = self.last_ctime + 1
        self.last_ctime = c
        return c
