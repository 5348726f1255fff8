"""The serialized job (SPEC 11), shared by REPLJOB / YOURJOBS on the bus and LOADJOB in the AOF.

Little-endian layout:
    u32 length of the rest | 40 id | u8 state (low nibble) + gc_retry (high) | u8 flags |
    u16 repl | u32 etime | u64 ctime | u32 delay | u32 retry | u16 nacks |
    u16 additional-deliveries | u32 + queue | u32 + body | u32 k + k * 40 node ids
    [options: u8 version (1) | u8 flags (1: dead-letter queue, 2: dead-lettered from) |
     u32 backoff | u32 max-deliveries | u32 + dead-letter queue | u32 + origin queue
     [flag 4: u64 group sequence | u32 + group key]]
The options block follows only jobs with BACKOFF / MAXDELIVERIES (docs/job-features.md)
or GROUP (docs/job-groups.md); the flags GROUPED and HELD are never written (they describe
the group's order in one worker's RAM, which a loader rebuilds):
a plain job has the same bytes as before, and a record without the block (an older file,
an older node) reads as a job without options.
Storage form (AOF) keeps etime absolute, the state and DELIVERED; message form (bus) sends
etime as remaining seconds + 1 and clears DELIVERED; the receiver makes it absolute again.

`serialize` / `deserialize` are the C versions from disque._fast.codec (measured: the Python
ones were half of a replica worker's time under replication); the Python functions below
(`serialize_reference` / `deserialize_reference`) are the readable definition the tests hold
the C versions against.
"""
import struct

from disque._fast.codec import CodecError, deserialize, serialize   # noqa: F401 (the API)

from disque._fast.job import (FLAG_BCAST_WILLQUEUE, FLAG_DELIVERED, GROUP_FLAGS,
                              Job, JobOptions,
                              mark_active, restore_state, retry_interval_msec)

FIXED = struct.Struct("<I40sBBHIQIIHH")      # through additional-deliveries: 72 bytes
U32 = struct.Struct("<I")
NODE_ID_LEN = 40
OPTIONS = struct.Struct("<BBII")
OPTIONS_VERSION = 1
OPT_DEADLETTER = 1
OPT_ORIGIN = 2
OPT_GROUP = 4
GROUP_SEQ = struct.Struct("<Q")


def options_block(ext):
    if ext is None:
        return b""
    flags = (OPT_DEADLETTER if ext.deadletter is not None else 0) | \
        (OPT_ORIGIN if ext.origin is not None else 0) | \
        (OPT_GROUP if ext.group is not None else 0)
    dl = ext.deadletter or b""
    origin = ext.origin or b""
    group = [] if ext.group is None else [GROUP_SEQ.pack(ext.group_seq),
                                          U32.pack(len(ext.group)), ext.group]
    return b"".join([OPTIONS.pack(OPTIONS_VERSION, flags, ext.backoff, ext.max_deliveries),
                     U32.pack(len(dl)), dl, U32.pack(len(origin)), origin] + group)


def serialize_reference(job, storage, now_s):
    """Bytes of `job` in storage form (AOF) or message form (bus)."""
    queue = job.queue or b""
    body = job.body or b""
    if storage:
        etime = job.etime
        flags = job.flags & ~GROUP_FLAGS
    else:
        etime = job.etime - now_s + 1 if job.etime > now_s else 1
        flags = job.flags & ~(FLAG_DELIVERED | GROUP_FLAGS)
    nodes = job.nodes_delivered
    rest = (b"".join([U32.pack(len(queue)), queue, U32.pack(len(body)), body,
                      U32.pack(len(nodes))] + [n for n in nodes]) + options_block(job.ext))
    head = FIXED.pack(0, job.id, (job.state & 15) | ((job.gc_retry & 15) << 4), flags & 255,
                      job.repl, etime, job.ctime, job.delay, job.retry,
                      min(job.nacks, 65535), min(job.additional_deliveries, 65535))
    size = len(head) - 4 + len(rest)
    return U32.pack(size) + head[4:] + rest



def read_strings(data, pos, end, count):
    """`count` length-prefixed strings (u32 length + bytes) from pos; (strings, new pos)."""
    out = []
    for _ in range(count):
        if pos + 4 > end:
            raise CodecError("truncated string length")
        n = U32.unpack_from(data, pos)[0]
        pos += 4
        if pos + n > end:
            raise CodecError("string past the end of the job")
        out.append(bytes(data[pos:pos + n]))
        pos += n
    return out, pos

def deserialize_reference(data, offset, storage, now_s, now_ms, jitter=0):
    """(Job, next offset) from `data` at `offset`; CodecError on any inconsistency.

    Like upstream: gc_retry restarts at 0; a job with RETRY gets BCAST_WILLQUEUE and
    qtime = now + (delay + retry) s + jitter, an at-most-once job qtime 0. Node IDs are
    returned as they are; the caller drops the ones it does not know.
    """
    end_of_data = len(data)
    if end_of_data - offset < FIXED.size:
        raise CodecError("truncated job header")
    (size, jid, state_byte, flags, repl, etime, ctime, delay, retry, nacks,
     adeliv) = FIXED.unpack_from(data, offset)
    end = offset + 4 + size
    if end > end_of_data:
        raise CodecError("job length %d past the end of the data" % size)
    pos = offset + FIXED.size
    fields, pos = read_strings(data, pos, end, 2)
    if pos + 4 > end:
        raise CodecError("truncated node count")
    count = U32.unpack_from(data, pos)[0]
    pos += 4
    if pos + count * NODE_ID_LEN > end:
        raise CodecError("job length does not match its content")
    nodes = tuple(bytes(data[pos + i * NODE_ID_LEN:pos + (i + 1) * NODE_ID_LEN])
                  for i in range(count))
    pos += count * NODE_ID_LEN
    ext = None
    if pos < end:
        if pos + OPTIONS.size > end:
            raise CodecError("truncated job options")
        version, oflags, backoff, maxdel = OPTIONS.unpack_from(data, pos)
        if version != OPTIONS_VERSION:
            raise CodecError("job options version %d" % version)
        pos += OPTIONS.size
        names, pos = read_strings(data, pos, end, 2)
        group, seq = None, 0
        if oflags & OPT_GROUP:
            if pos + GROUP_SEQ.size > end:
                raise CodecError("truncated job group")
            seq = GROUP_SEQ.unpack_from(data, pos)[0]
            (group,), pos = read_strings(data, pos + GROUP_SEQ.size, end, 1)
        if pos != end:
            raise CodecError("job length does not match its content")
        ext = JobOptions(backoff, maxdel, names[0] if oflags & OPT_DEADLETTER else None,
                         names[1] if oflags & OPT_ORIGIN else None, group, seq)
    queue, body = fields
    job = Job(bytes(jid), queue, body)
    job.ext = ext
    if storage:
        restore_state(job, state_byte & 15)
    else:
        mark_active(job)
    job.gc_retry = 0
    job.flags = flags if storage else flags & ~FLAG_DELIVERED
    job.repl = repl
    job.etime = etime if storage else now_s + etime
    job.ctime = ctime
    job.delay = delay
    job.retry = retry
    job.nacks = nacks
    job.additional_deliveries = adeliv
    job.nodes_delivered = nodes
    if retry:
        job.flags |= FLAG_BCAST_WILLQUEUE
        job.qtime = now_ms + delay * 1000 + retry_interval_msec(job) + jitter
    else:
        job.qtime = 0
    return job, end
