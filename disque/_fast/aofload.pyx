# cython: language_level=3, boundscheck=False, wraparound=False
"""The AOF load's per-job loops in C (disque/workers/aof_load.py drives them in slices).

scan_chunk: the records our writer writes, `LOADJOB <payload>` and `DELJOB <id>` in that
exact spelling, applied to the map of the jobs this worker keeps, with no Python per record.
Anything else (another spelling, damage, a payload too short to be a job) stops the scan at
that record's first byte, where the reference parser (disque/contracts/aof_format
.read_records) takes over and gives the exact error with its offset.

restore_slice: the surviving jobs back in the shard, as their records say."""
from disque._fast.codec cimport deserialize
from disque._fast.codec import CodecError
from disque._fast.job cimport (JOB_FLAG_BCAST_QUEUED, JOB_FLAG_DELIVERED, JOB_QUEUED, Job,
                               JobOptions, mark_active)
from disque._fast.jobid cimport id_worker
from disque._fast.shardcore cimport ShardCore
from disque.contracts.aof_format import AofCorrupt

cdef extern from "string.h":
    int memcmp(const void *a, const void *b, size_t n)

cdef const char *LOAD_HEAD = b"*2\r\n$7\r\nLOADJOB\r\n$"     # then <n>\r\n<payload>\r\n
cdef const char *DEL_HEAD = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"    # then <id>\r\n
cdef Py_ssize_t LOAD_HEAD_LEN = 18, DEL_HEAD_LEN = 21, DEL_RECORD_LEN = 63

# why a scan stopped at `pos`
MORE = 0        # the chunk ends there, or inside a record: read on (at the end of the file,
                # the reference parser says how the record is cut)
SLOW = 1        # a record not in the writer's spelling, or not a job's: the reference parser
FOREIGN = 2     # own_only, and a record of a job another worker owns
BATCH = 3       # `limit` records done: the caller looks at its clock


def scan_chunk(bytes buf, Py_ssize_t pos, Py_ssize_t limit, int me, int nworkers,
               bint own_only, dict alive, object path, long long base, Py_ssize_t min_payload):
    """Records of buf from pos: a LOADJOB of one of this worker's jobs puts
    {id: (payload, path, base + offset)} in `alive`, a DELJOB takes it out.
    Returns (why it stopped, pos)."""
    cdef const char *p = buf
    cdef Py_ssize_t n = len(buf), a, b, i, digits, length
    cdef Py_ssize_t done = 0
    cdef bytes jid
    while done < limit:
        if n - pos < DEL_HEAD_LEN:
            return MORE, pos
        if memcmp(p + pos, LOAD_HEAD, LOAD_HEAD_LEN) == 0:
            i = pos + LOAD_HEAD_LEN
            length = 0
            digits = 0
            while i < n and i < pos + 30 and 48 <= <unsigned char>p[i] <= 57:
                length = length * 10 + (p[i] - 48)
                digits += 1
                i += 1
            if i + 1 >= n:
                return MORE, pos
            if digits == 0 or p[i] != b'\r' or p[i + 1] != b'\n':
                return SLOW, pos
            a = i + 2
            b = a + length
            if b + 2 > n:
                return MORE, pos
            if p[b] != b'\r' or p[b + 1] != b'\n' or length < min_payload:
                return SLOW, pos
            jid = p[a + 4:a + 44]
            if id_worker(jid, nworkers) == me:
                alive[jid] = (p[a:b], path, base + pos)
            elif own_only:
                return FOREIGN, pos
            pos = b + 2
        elif memcmp(p + pos, DEL_HEAD, DEL_HEAD_LEN) == 0:
            if n - pos < DEL_RECORD_LEN:
                return MORE, pos
            b = pos + DEL_RECORD_LEN - 2
            if p[b] != b'\r' or p[b + 1] != b'\n':
                return SLOW, pos
            jid = p[pos + DEL_HEAD_LEN:b]
            if id_worker(jid, nworkers) == me:
                alive.pop(jid, None)
            elif own_only:
                return FOREIGN, pos
            pos = b + 2
        else:
            return SLOW, pos
        done += 1
    return BATCH, pos


cdef class Restored:
    """What a restore counted, over its slices."""
    cdef public long long loaded, queued, expired


def restore_slice(ShardCore shard, list survivors, Py_ssize_t start, Py_ssize_t limit,
                  dict names, bint enqueue_once, Restored counts):
    """survivors[start:start + limit] ((job id, (payload, path, offset)) pairs) back in the
    shard: registered, queued or scheduled as their records say; expired ones dropped,
    duplicates ignored. Returns where the next slice starts."""
    cdef Py_ssize_t i, end = min(start + limit, len(survivors))
    cdef Job job
    cdef bint was_queued
    cdef unsigned short nacks, additional
    cdef long long now_s = shard.now_s, now_ms = shard.now_ms
    cdef dict jobs = shard.jobs
    for i in range(start, end):
        jid, record = survivors[i]
        if jid in jobs:
            continue
        payload, path, offset = record
        try:
            job, stop = deserialize(payload, 0, True, now_s, now_ms, shard.rand_err())
            if stop != len(payload):
                raise CodecError("%d bytes after the job" % (len(payload) - stop))
        except CodecError as e:
            raise AofCorrupt(path, offset, "bad serialized job: %s" % e)
        if job.etime <= now_s:
            counts.expired += 1
            continue
        was_queued = job.state == JOB_QUEUED
        mark_active(job)
        if shard.node_id not in job.nodes_delivered:
            # written under another node ID: this node holds the job, as it did then
            job.nodes_delivered = shard.self_nodes
        job.queue = names.setdefault(job.queue, job.queue)
        shard.register_job(job)
        counts.loaded += 1
        if (job.ext is not None and (<JobOptions>job.ext).group is not None
                and (<JobOptions>job.ext).origin is None):
            # its group's order first (by sequence number): the gate in enqueue keeps
            # every job but the head out of the queue (a dead letter left its group)
            if shard.load_grouped(job) and enqueue_once:
                was_queued = True
        if enqueue_once:
            if was_queued:
                nacks, additional = job.nacks, job.additional_deliveries
                if not job.qtime:
                    job.qtime = now_ms      # RETRY 0: restored too (docs/differences.md)
                # putting it back where it was is no redelivery: no counter grows and
                # no dead-letter move (MAXDELIVERIES, docs/job-features.md)
                job.flags &= ~JOB_FLAG_BCAST_QUEUED
                if shard.enqueue(job):
                    counts.queued += 1
                    job.nacks, job.additional_deliveries = nacks, additional
                    continue
            elif not job.retry and not job.flags & JOB_FLAG_DELIVERED:
                # a RETRY 0 job still waiting for its DELAY: queue it when that ends
                job.qtime = max(now_ms, <long long>(job.ctime // 1000000) + job.delay * 1000)
        shard.schedule(job)
    return end
