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

Framing on the socketpair link: <u32 little-endian length><payload> (ZeroMQ frames its own).
"""
import struct

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


# ---- framing (socketpair link) ----

HEADER = struct.Struct("<I")


RECV_SIZE = 256 * 1024


class FrameReader:
    """Splits a byte stream into <u32 length><payload> frames.

    Reads land in one preallocated buffer (`recv_from`): allocating a fresh large bytes
    object per read made glibc mmap/munmap it every time, which cost more than the rest
    of a command.
    """

    def __init__(self):
        self.buf = bytearray()
        self.chunk = bytearray(RECV_SIZE)
        self.view = memoryview(self.chunk)

    def recv_from(self, sock, flags=0):
        """One recv into the preallocated buffer; returns (frames, nbytes)."""
        n = sock.recv_into(self.view, RECV_SIZE, flags)
        if not n:
            return [], 0
        return self.feed(self.view[:n]), n

    def feed(self, data):
        self.buf += data
        out = []
        buf = self.buf
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            size = HEADER.unpack_from(buf, pos)[0]
            if n - pos - 4 < size:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out


def frame(payload):
    return HEADER.pack(len(payload)) + payload
