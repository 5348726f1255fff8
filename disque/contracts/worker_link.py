"""Messages between the front-end and its workers, whichever transport carries them
(disque.workers.link: a socketpair by default, or ZeroMQ with `worker-link zmq`).

Every link message carries a msgpack list of requests (front-end -> worker) or replies
(worker -> front-end): everything that arrived in one event-loop tick travels together.

Requests:
  [CMD, reqid, argv]                      a whole command; reply [reqid, resp_bytes]
  [GETJOB, reqid, client, count, nohang, withcounters, timeout_ms, proxy, queues]
        local (proxy=0): reply [reqid, resp_bytes, job_ids], possibly much later
        proxy (proxy=1): reply [reqid, [encoded jobs], job_ids] now (empty list: blocked
        or nothing), then at most one offer [reqid, [encoded job], [id]] later
  [UNBLOCK, client, reqid]                forget a blocked consumer's GETJOB; the reply
                                          [reqid, null-array-or-0, None] is the last
                                          message about that reqid
  [RETURN, job_ids]                       put fetched-but-undelivered jobs back; no reply
  [BUS, [[sender_id, type, flags, payload], ...]]
                                          cluster bus messages about this worker's jobs
                                          and queues; no reply. The worker's own bus
                                          messages travel in its reply batches as
                                          [BUS_REQID, [(dest ids or None, type, flags, payload)]]
  [CONTROL, reqid, name, arg]             node-level operation; reply [reqid, value]
        names: info, flushall, shutdown, ping; scan (a QSCAN/JSCAN share, Shard.scan);
        cluster (membership for Replication.set_cluster);
        memory (every ~100 ms: [level, excess, noeviction] in, memory figures and scan-log
        sequence numbers out, Memory.set_memory / Memory.memory_report)

Each kind is a named type below (disque/contracts/typed.py: one encoder, one decoder).
Framing on the socketpair link: <u32 little-endian length><payload> (ZeroMQ frames its own),
read by disque/_fast/frames.pyx.
"""
from typing import NamedTuple

from disque._fast import frames
from disque.contracts.typed import by_kind, message

CMD = 0
GETJOB = 1
UNBLOCK = 2
RETURN = 3
CONTROL = 4
BUS = 5
BUS_REQID = -1     # worker -> front-end entry [BUS_REQID, [(dests, type, flags, payload)...]]
QUEUE_ELSEWHERE = -2   # worker -> front-end entry [QUEUE_ELSEWHERE, queue, worker]: the worker
                       # holds a queue off its slot (dead letters; disque/frontend/routing.py)

READY = b"READY"   # first message of a worker: it is connected and loaded


# ---- requests (front-end -> worker) ----

@message(CMD)
class Cmd(NamedTuple):          # built inline by frontcore.pyx: the per-command path
    reqid: int
    argv: list


@message(GETJOB)
class GetJob(NamedTuple):       # contracts/getjob_options.py, GetjobRequest
    reqid: int
    client: int
    count: int
    nohang: bool
    withcounters: bool
    timeout_ms: int
    proxy: bool
    queues: list                # None with a prefix
    prefix: bytes               # FROM-PREFIX, or None


@message(UNBLOCK)
class Unblock(NamedTuple):
    client: int
    reqid: int


@message(RETURN)
class Return(NamedTuple):
    job_ids: list


@message(BUS)
class Bus(NamedTuple):
    messages: list              # bus_messages.Inbound lists


@message(CONTROL)
class Control(NamedTuple):
    reqid: int
    name: str
    arg: object


REQUESTS = by_kind(Cmd, GetJob, Unblock, Return, Bus, Control)


# ---- replies (worker -> front-end), one entry each in the batch ----

@message(None)
class Reply(NamedTuple):        # CMD and CONTROL; built inline by the cores
    reqid: int
    value: object


@message(None)
class GetJobReply(NamedTuple):
    reqid: int
    reply: object               # RESP bytes (local), encoded jobs (proxy), null or 0 (unblocked)
    job_ids: list


@message(BUS_REQID)
class BusOut(NamedTuple):
    messages: list              # bus_messages.Outbound lists


@message(QUEUE_ELSEWHERE)
class QueueElsewhere(NamedTuple):   # built inline by shardcore.pyx
    queue: bytes
    worker: int


# ---- framing (socketpair link) ----

RECV_SIZE = frames.READ_SIZE
MAX_FRAME = frames.MAX_LENGTH   # both ends are this node's processes: the header's own limit


class FrameTooLong(OSError):
    """A frame above the reader's limit: the link is closed."""


class FrameReader:
    """Splits a byte stream into <u32 length><payload> frames, in C (disque/_fast/frames.pyx).

    Reads land in one preallocated C buffer and only a partial frame is kept here:
    allocating a fresh large bytes object per read made glibc mmap/munmap it every time,
    which cost more than the rest of a command.
    """

    def __init__(self, limit=MAX_FRAME):
        self.buf = bytearray()
        self.limit = limit

    def recv_from(self, sock, flags=0):
        """One recv; returns (frames, nbytes), nbytes 0 when the peer closed. Raises
        BlockingIOError when nothing waits, FrameTooLong."""
        out = []
        n = frames.read_frames(sock.fileno(), self.buf, self.limit, self.limit, out, flags)
        if n == frames.AGAIN:
            raise BlockingIOError
        if n == frames.TOO_LONG:
            raise FrameTooLong("a frame above %d bytes" % self.limit)
        return out, n

    def feed(self, data):
        out = []
        if frames.feed(self.buf, bytes(data), self.limit, out) == frames.TOO_LONG:
            raise FrameTooLong("a frame above %d bytes" % self.limit)
        return out


frame = frames.frame
