"""Client connections moving between the front-end and a worker (`connection-affinity yes`,
docs/design.md "Connections served by their worker").

Each worker has, next to its link, a second Unix stream socketpair: the hand-over channel.
It carries frames <u32 length><msgpack list> in both directions, in order; the frames of
the kinds HANDOFF and HANDBACK carry one file descriptor each (SCM_RIGHTS, sent with the
frame's first byte), which the receiver matches to frames in order.

front-end -> worker:
  [HANDOFF, client_id, resp3, unparsed_input, pump]   + the client's socket: serve it from
        now on; `pump` >= 0: the socket is the plaintext end of that worker's TLS
        connection `pump` (TLS_CONN below), which it serves itself from now on
  [RECALL]                                      hand every served connection back
  [KILL, client_id]                             close that connection (CLIENT KILL, timeout)
  [PEER, worker]                                + a socket: the new link to that worker,
                                                which was restarted (disque/workers/peer_links.py)
  [TLS_ACCEPT, host, port]                      + a connection accepted on `tls-port`: the
        worker runs its TLS (handshake and all), disque/workers/tls_clients.py
worker -> front-end:
  [HANDBACK, client_id, unsent_output, unparsed_input, last_cmd, reason, totals] + the
        socket: the worker stops serving it; the front-end writes `unsent_output` first,
        then runs `unparsed_input` (which starts with the command the worker could not
        serve); `totals` as in SERVED below, so INFO on that connection counts them
  [GONE, client_id]                             the peer closed the connection
  [SLOWLOG, [[client_id, argv, duration_us], ...]]  slow commands it served (SLOWLOG),
                                                sent before their replies are written
  [TLS_CONN, pump, host, port]                  + the plaintext end of a socketpair: a TLS
        connection (from `host`:`port`) whose handshake is done; the worker carries its
        bytes between the two (its "pump") while the front-end serves the connection

Each kind is a named type below (disque/contracts/typed.py: one encoder, one decoder).

Reports a worker puts in its ordinary reply batches (link entries with reserved reqids):
  [SERVED_REQID, worker, totals]    (Served) totals of the commands it served itself: {"commands",
                            "net_in", "net_out", "calls": {name: n}}, every 100 ms if changed
"""
import array
import logging
import os
import socket
from collections import deque
from typing import NamedTuple

import msgpack

from disque._fast import frames
from disque.contracts.typed import by_kind, message

log = logging.getLogger("disque")

HANDOFF = 0
RECALL = 1
KILL = 2
HANDBACK = 3
GONE = 4
SLOWLOG = 5
PEER = 6
TLS_ACCEPT = 7
TLS_CONN = 8
CARRIES_FD = (HANDOFF, HANDBACK, PEER, TLS_ACCEPT, TLS_CONN)
NO_PUMP = -1                    # Handoff.pump of a plaintext connection

SERVED_REQID = -3


@message(HANDOFF)
class Handoff(NamedTuple):
    client: int
    resp3: bool
    unparsed: bytes
    pump: int                   # NO_PUMP, or the worker's TLS connection (TlsConn.pump)


@message(RECALL)
class Recall(NamedTuple):
    pass


@message(KILL)
class Kill(NamedTuple):
    client: int


@message(PEER)
class Peer(NamedTuple):
    worker: int


@message(TLS_ACCEPT)
class TlsAccept(NamedTuple):
    host: str
    port: int


@message(TLS_CONN)
class TlsConn(NamedTuple):
    pump: int
    host: str
    port: int


@message(HANDBACK)
class Handback(NamedTuple):
    client: int
    unsent: bytes
    unparsed: bytes
    last_cmd: object            # bytes, or None
    reason: int
    totals: dict


@message(GONE)
class Gone(NamedTuple):
    client: int


@message(SLOWLOG)
class Slowlog(NamedTuple):
    entries: list               # [client_id, argv, duration_us] each


MESSAGES = by_kind(Handoff, Recall, Kill, Peer, Handback, Gone, Slowlog, TlsAccept, TlsConn)


@message(SERVED_REQID)
class Served(NamedTuple):       # an entry of the worker's ordinary reply batches
    worker: int
    totals: dict

# why a worker handed a connection back (HANDBACK's `reason`, logged at debug level)
BACK_COMMAND = 0        # a command this worker cannot serve alone
BACK_RECALL = 1         # the front-end asked (RECALL)
BACK_SLOW_READER = 2    # its replies did not fit in the socket: the front-end buffers them
BACK_FOLLOW = 3         # its commands went on to another worker's queues (FOLLOW_AFTER in a
                        # row): the front-end hands it to that worker instead
FOLLOW_AFTER = 32       # forwarded commands in a row to one other worker that make a hand-back

MAX_HANDOFF_INPUT = 16 * 1024   # a connection with more unparsed input stays where it is
BIG_ARGUMENT = 64 * 1024        # an ADDJOB body at least this long, still arriving: the
                                # connection goes to the queue's worker before the body is read
MAX_BIG_HANDOFF_INPUT = 1 << 20  # the part of it read already that may go with it
RECV_SIZE = 64 * 1024
MAX_FDS_PER_READ = 256
MAX_FRAME = frames.MAX_LENGTH   # both ends are this node's processes: the header's own limit


def peer_text(host, port):
    """A peer's address as CLIENT LIST and the logs show it: host:port, [v6]:port."""
    return ("[%s]:%s" if ":" in host else "%s:%s") % (host, port)


class HandoverChannel:
    """One end of the hand-over channel; `receive` never blocks. A worker's `send` blocks
    (its frames are small but for a hand-back, and the front-end reads its end on every
    loop turn). The front-end's `post` never blocks, so that the two can never wait on
    each other: a worker blocked handing a big reply back while the front-end hands it a
    connection whose big command has begun to arrive."""

    def __init__(self, sock, limit=MAX_FRAME):
        self.sock = sock
        self.limit = limit
        self.buf = bytearray()
        self.fds = deque()
        self.closed = False
        self.ancillary = socket.CMSG_SPACE(MAX_FDS_PER_READ * 4)
        self.backlog = deque()      # (bytes, fd copy or None) the socket has not taken yet

    def fileno(self):
        return self.sock.fileno()

    def send(self, msg, fd=None):
        data = frames.frame(msgpack.packb(msg))
        if fd is None:
            self.sock.sendall(data)
            return
        n = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", [fd]))])
        if n < len(data):
            self.sock.sendall(data[n:])

    def post(self, msg, fd=None):
        """Send `msg` (and `fd`) without blocking; False while some of it waits in `backlog`
        (then call `post_more` when the socket is writable). A waiting fd is a copy, so the
        caller may close its own at once."""
        self.backlog.append((frames.frame(msgpack.packb(msg)),
                             os.dup(fd) if fd is not None else None))
        try:
            return self.post_more()
        except OSError:
            dup = self.backlog.pop()[1]     # ours, unsent: the caller handles the failure
            if dup is not None:
                os.close(dup)
            raise

    def post_more(self):
        """Send what waits, in order; True once nothing is left."""
        while self.backlog:
            data, fd = self.backlog[0]
            n = self.send_some(data, fd)
            if fd is not None and n:
                os.close(fd)
                fd = None
            if n < len(data):
                self.backlog[0] = (data[n:], fd)
                return False
            self.backlog.popleft()
        return True

    def send_some(self, data, fd):
        anc = [] if fd is None else [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
        try:
            return self.sock.sendmsg([data], anc, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return 0

    def receive(self):
        """Every complete frame available now, as (msg, fd or None). A frame above the
        limit closes the channel (`closed`)."""
        payloads = []
        while True:
            try:
                data, anc, _flags, _ = self.sock.recvmsg(RECV_SIZE, self.ancillary,
                                                         socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data, anc = b"", ()
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
                    self.fds.extend(fds)
            if not data:
                self.closed = True
                break
            if frames.feed(self.buf, data, self.limit, payloads) == frames.TOO_LONG:
                log.error("Hand-over channel closed: a frame above %d bytes", self.limit)
                self.closed = True
                break
            if len(data) < RECV_SIZE:
                break
        out = []
        for payload in payloads:
            msg = msgpack.unpackb(payload, use_list=True)
            fd = self.fds.popleft() if msg[0] in CARRIES_FD and self.fds else None
            out.append((msg, fd))
        return out

    def close(self):
        self.sock.close()
        while self.fds:
            try:
                os.close(self.fds.popleft())
            except OSError:
                pass
        while self.backlog:
            fd = self.backlog.popleft()[1]
            if fd is not None:
                os.close(fd)


def encode_commands(cmds):
    """Parsed commands back as RESP multibulk requests (to hand them to the other side)."""
    out = []
    for argv in cmds:
        out.append(b"*%d\r\n" % len(argv))
        for a in argv:
            out.append(b"$%d\r\n%b\r\n" % (len(a), a))
    return b"".join(out)
