# cython: language_level=3
"""The serialized job of SPEC 11 in C: the same bytes as disque.contracts.job_codec (the readable
reference, which tests/test_job_codec.py holds this module against).

Profiled under ADDJOB REPLICATE 3: the Python codec was half of a replica worker's busy
time (a REPLJOB per job on every replica) and a seventh of the originator's.
"""
from libc.string cimport memcpy, memset
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

from disque._fast.job cimport (Job, JobOptions, mark_active, restore_state, JOB_ACTIVE, JOB_FLAG_BCAST_WILLQUEUE,
                               JOB_FLAG_DELIVERED, JOB_GROUP_FLAGS, retry_interval_ms)
from disque._fast.cachehint cimport prefetch


DEF FIXED = 72          # through additional-deliveries
DEF NODE_ID_LEN = 40
DEF OPTIONS_FIXED = 10  # u8 version, u8 flags, u32 backoff, u32 max-deliveries
DEF OPTIONS_VERSION = 1
DEF OPT_DEADLETTER = 1
DEF OPT_ORIGIN = 2
DEF OPT_GROUP = 4       # then u64 group sequence | u32 + group key
DEF SPILL_HEADER_LEN = 12   # a spill record's header, before the job (spill_records)
DEF SIZE_AHEAD = 8          # spill_sizes: how many jobs ahead a body is prefetched
SPILL_HEADER = SPILL_HEADER_LEN


class CodecError(ValueError):
    pass


cdef inline void put32(char *p, uint32_t v) noexcept:
    p[0] = <char>(v & 255); p[1] = <char>((v >> 8) & 255)
    p[2] = <char>((v >> 16) & 255); p[3] = <char>((v >> 24) & 255)


cdef inline void put16(char *p, uint16_t v) noexcept:
    p[0] = <char>(v & 255); p[1] = <char>((v >> 8) & 255)


cdef inline uint32_t get32(const uint8_t *p) noexcept:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint16_t get16(const uint8_t *p) noexcept:
    return p[0] | (<uint16_t>p[1] << 8)


cdef Py_ssize_t string_at(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end) except -1:
    """A u32-length-prefixed string at *pos: returns where its bytes start and moves *pos
    past them."""
    if pos[0] + 4 > end:
        raise CodecError("truncated string length")
    cdef Py_ssize_t n = get32(b + pos[0]), start = pos[0] + 4
    if start + n > end:
        raise CodecError("string past the end of the job")
    pos[0] = start + n
    return start


cdef Py_ssize_t job_size(Job job) except -1:
    """Bytes of `job` serialized (either form); CodecError for a malformed ID."""
    cdef Py_ssize_t k = len(job.nodes_delivered), i
    cdef Py_ssize_t total = (FIXED + 4 + (len(job.queue) if job.queue is not None else 0) + 4
                             + (len(job.body) if job.body is not None else 0) + 4 + k * NODE_ID_LEN)
    cdef JobOptions ext = job.ext
    if ext is not None:
        # the options block (see disque.contracts.job_codec): only jobs that have options
        total += (OPTIONS_FIXED + 4 + (len(ext.deadletter) if ext.deadletter is not None else 0)
                  + 4 + (len(ext.origin) if ext.origin is not None else 0))
        if ext.group is not None:
            total += 8 + 4 + len(ext.group)
    for i in range(k):
        if len(<bytes>job.nodes_delivered[i]) != NODE_ID_LEN:
            raise CodecError("node id of %d bytes" % len(<bytes>job.nodes_delivered[i]))
    if len(job.id) != 40:
        raise CodecError("job id of %d bytes" % len(job.id))
    return total


cpdef bytes serialize(Job job, bint storage, long long now_s):
    """Bytes of `job` in storage form (AOF) or message form (bus)."""
    cdef Py_ssize_t total = job_size(job)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    write_job(job, storage, now_s, PyBytes_AS_STRING(out), total)
    return out


def spill_records(list jobs):
    """The spill log's records of `jobs` (disque/workers/spill_log.py), one after the other
    in one bytes, and each record's size. A record is SPILL_HEADER_LEN bytes (requeue time,
    i64; flags; state; two spare bytes), then the job in storage form."""
    sizes, total = spill_sizes(jobs)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    write_spill_records(jobs, sizes, PyBytes_AS_STRING(out))
    return out, sizes


def spill_sizes(list jobs):
    """(each record's size, their total) of `jobs` as spill records. A spilled job's body
    was added long ago (its header is a cache miss): the bodies SIZE_AHEAD jobs on are
    prefetched, so that the misses overlap."""
    cdef Py_ssize_t n = len(jobs), i, total = 0, size
    cdef list sizes = [None] * n
    for i in range(n):
        if i + SIZE_AHEAD < n:
            prefetch(<void *>(<Job>jobs[i + SIZE_AHEAD]).body)
        size = SPILL_HEADER_LEN + job_size(<Job>jobs[i])
        sizes[i] = size
        total += size
    return sizes, total


def spill_records_into(list jobs, list sizes, unsigned char[::1] buf, Py_ssize_t pad_to):
    """spill_records written at the start of `buf` (the spill log's write buffer: no bytes
    object in between), zeros after them up to `pad_to`. `sizes` from spill_sizes."""
    cdef Py_ssize_t total = 0, i
    for i in range(len(sizes)):
        total += <Py_ssize_t>sizes[i]
    if total > pad_to or pad_to > buf.shape[0] or len(sizes) != len(jobs):
        raise ValueError("spill records past their buffer")
    if pad_to == 0:
        return
    cdef char *p = <char *>&buf[0]
    write_spill_records(jobs, sizes, p)
    memset(p + total, 0, pad_to - total)


cdef void write_spill_records(list jobs, list sizes, char *p) noexcept:
    cdef Py_ssize_t i, size
    cdef Job job
    cdef uint64_t qtime
    for i in range(len(jobs)):
        job = <Job>jobs[i]
        size = <Py_ssize_t>sizes[i]
        qtime = <uint64_t>job.qtime
        put32(p, <uint32_t>(qtime & 0xffffffffULL))
        put32(p + 4, <uint32_t>(qtime >> 32))
        p[8] = <char>job.flags
        p[9] = <char>job.state
        p[10] = p[11] = 0
        write_job(job, True, 0, p + SPILL_HEADER_LEN, size - SPILL_HEADER_LEN)
        p += size


def spill_header(bytes rec):
    """(requeue time, flags, state) of a spill record."""
    if len(rec) < SPILL_HEADER_LEN:
        raise CodecError("spill record of %d bytes" % len(rec))
    cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(rec)
    cdef uint64_t qtime = get32(b) | (<uint64_t>get32(b + 4) << 32)
    return <long long>qtime, b[8], b[9]


cdef void write_job(Job job, bint storage, long long now_s, char *p, Py_ssize_t total) noexcept:
    """`job` serialized into `total` bytes at `p` (job_size's count)."""
    cdef bytes queue = job.queue if job.queue is not None else b""
    cdef bytes body = job.body if job.body is not None else b""
    cdef tuple nodes = job.nodes_delivered
    cdef Py_ssize_t k = len(nodes), i
    cdef bytes n
    cdef JobOptions ext = job.ext
    cdef bytes dl = b"", origin = b""
    if ext is not None:
        if ext.deadletter is not None:
            dl = ext.deadletter
        if ext.origin is not None:
            origin = ext.origin
    cdef uint32_t etime
    cdef unsigned char flags
    if storage:
        etime = job.etime
        flags = job.flags & ~JOB_GROUP_FLAGS
    else:
        etime = <uint32_t>(job.etime - now_s + 1) if job.etime > now_s else 1
        flags = job.flags & ~(JOB_FLAG_DELIVERED | JOB_GROUP_FLAGS)
    put32(p, <uint32_t>(total - 4))
    memcpy(p + 4, PyBytes_AS_STRING(job.id), 40)
    p[44] = <char>((job.state & 15) | ((job.gc_retry & 15) << 4))
    p[45] = <char>flags
    put16(p + 46, job.repl)
    put32(p + 48, etime)
    cdef uint64_t ctime = job.ctime
    put32(p + 52, <uint32_t>(ctime & 0xffffffffULL))
    put32(p + 56, <uint32_t>(ctime >> 32))
    put32(p + 60, job.delay)
    put32(p + 64, job.retry)
    put16(p + 68, job.nacks if job.nacks < 65535 else 65535)
    put16(p + 70, job.additional_deliveries if job.additional_deliveries < 65535 else 65535)
    cdef Py_ssize_t pos = FIXED
    put32(p + pos, <uint32_t>len(queue))
    memcpy(p + pos + 4, PyBytes_AS_STRING(queue), len(queue))
    pos += 4 + len(queue)
    put32(p + pos, <uint32_t>len(body))
    memcpy(p + pos + 4, PyBytes_AS_STRING(body), len(body))
    pos += 4 + len(body)
    put32(p + pos, <uint32_t>k)
    pos += 4
    for i in range(k):
        n = <bytes>nodes[i]
        memcpy(p + pos, PyBytes_AS_STRING(n), NODE_ID_LEN)
        pos += NODE_ID_LEN
    if ext is not None:
        p[pos] = <char>OPTIONS_VERSION
        p[pos + 1] = <char>((OPT_DEADLETTER if ext.deadletter is not None else 0)
                            | (OPT_ORIGIN if ext.origin is not None else 0)
                            | (OPT_GROUP if ext.group is not None else 0))
        put32(p + pos + 2, ext.backoff)
        put32(p + pos + 6, ext.max_deliveries)
        pos += OPTIONS_FIXED
        put32(p + pos, <uint32_t>len(dl))
        memcpy(p + pos + 4, PyBytes_AS_STRING(dl), len(dl))
        pos += 4 + len(dl)
        put32(p + pos, <uint32_t>len(origin))
        memcpy(p + pos + 4, PyBytes_AS_STRING(origin), len(origin))
        pos += 4 + len(origin)
        if ext.group is not None:
            put32(p + pos, <uint32_t>(ext.group_seq & 0xffffffffULL))
            put32(p + pos + 4, <uint32_t>(ext.group_seq >> 32))
            put32(p + pos + 8, <uint32_t>len(ext.group))
            memcpy(p + pos + 12, PyBytes_AS_STRING(ext.group), len(ext.group))


cpdef tuple deserialize(data, Py_ssize_t offset, bint storage, long long now_s, long long now_ms,
                        long long jitter=0):
    """(Job, next offset) from `data` (bytes) at `offset`; CodecError on any inconsistency.
    See disque.contracts.job_codec.deserialize for the rules."""
    cdef bytes buf = data if type(data) is bytes else bytes(data)
    cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t end_of_data = len(buf)
    if offset < 0 or end_of_data - offset < FIXED:
        raise CodecError("truncated job header")
    cdef const uint8_t *h = b + offset
    cdef Py_ssize_t end = offset + 4 + get32(h)
    if end > end_of_data:
        raise CodecError("job length %d past the end of the data" % get32(h))
    cdef Py_ssize_t pos = offset + FIXED, count, i
    cdef Py_ssize_t qpos = string_at(b, &pos, end)
    cdef Py_ssize_t qlen = pos - qpos
    cdef Py_ssize_t bpos = string_at(b, &pos, end)
    cdef Py_ssize_t blen = pos - bpos
    if pos + 4 > end:
        raise CodecError("truncated node count")
    count = get32(b + pos)
    pos += 4
    if pos + count * NODE_ID_LEN > end:
        raise CodecError("job length does not match its content")
    cdef const char *c = <const char *>b
    nodes = tuple([PyBytes_FromStringAndSize(c + pos + i * NODE_ID_LEN, NODE_ID_LEN)
                   for i in range(count)])
    pos += count * NODE_ID_LEN
    cdef JobOptions ext = None
    cdef Py_ssize_t dpos, dlen, opos, olen, gpos
    cdef unsigned char oflags
    if pos < end:
        if pos + OPTIONS_FIXED > end:
            raise CodecError("truncated job options")
        if b[pos] != OPTIONS_VERSION:
            raise CodecError("job options version %d" % b[pos])
        oflags = b[pos + 1]
        ext = JobOptions(get32(b + pos + 2), get32(b + pos + 6))
        pos += OPTIONS_FIXED
        dpos = string_at(b, &pos, end)
        dlen = pos - dpos
        opos = string_at(b, &pos, end)
        olen = pos - opos
        if oflags & OPT_GROUP:
            if pos + 8 > end:
                raise CodecError("truncated job group")
            ext.group_seq = get32(b + pos) | (<uint64_t>get32(b + pos + 4) << 32)
            pos += 8
            gpos = string_at(b, &pos, end)
            ext.group = PyBytes_FromStringAndSize(c + gpos, pos - gpos)
        if pos != end:
            raise CodecError("job length does not match its content")
        if oflags & OPT_DEADLETTER:
            ext.deadletter = PyBytes_FromStringAndSize(c + dpos, dlen)
        if oflags & OPT_ORIGIN:
            ext.origin = PyBytes_FromStringAndSize(c + opos, olen)
    cdef Job job = Job(PyBytes_FromStringAndSize(c + offset + 4, 40),
                       PyBytes_FromStringAndSize(c + qpos, qlen),
                       PyBytes_FromStringAndSize(c + bpos, blen))
    cdef unsigned char flags = h[45]
    if storage:
        restore_state(job, h[44] & 15)
    else:
        mark_active(job)
    job.gc_retry = 0
    job.flags = flags if storage else flags & ~JOB_FLAG_DELIVERED
    job.repl = get16(h + 46)
    cdef uint32_t etime = get32(h + 48)
    job.etime = etime if storage else <unsigned int>(now_s + etime)
    job.ctime = get32(h + 52) | (<uint64_t>get32(h + 56) << 32)
    job.delay = get32(h + 60)
    job.retry = get32(h + 64)
    job.nacks = get16(h + 68)
    job.additional_deliveries = get16(h + 70)
    job.nodes_delivered = nodes
    job.ext = ext
    if job.retry:
        job.flags |= JOB_FLAG_BCAST_WILLQUEUE
        job.qtime = now_ms + <long long>job.delay * 1000 + retry_interval_ms(job) + jitter
    else:
        job.qtime = 0
    return job, end
