"""Links between the workers of a node: a worker serving a connection itself runs a command
of another worker's queue or job on that worker, with no front-end hop (docs/design.md,
"Connections served by their worker").

One Unix socketpair per pair of workers, made by the front-end (disque/workers/link.py) and
replaced when a worker is restarted. Frames <u32 length><msgpack list of entries>:
  [REQUEST, reqid, argv]      run this command (route queue / id / ids, or GETJOB NOHANG)
  [REPLY, reqid, resp_bytes]  its reply, sent after the AOF record of the command is written
Sends never block: what the socket does not take waits for EPOLLOUT, so two workers
forwarding to each other at once cannot deadlock.
"""
import logging
import select
import socket

import msgpack

from disque import replies as R
from disque.contracts.worker_link import RECV_SIZE, FrameReader, frame

log = logging.getLogger("disque.worker")

REQUEST = 0
REPLY = 1
EPOLLIN = select.EPOLLIN
EPOLLOUT = select.EPOLLOUT


class PeerLinks:
    """Offers: fds (for the poll), forward, readable, writable, send_all (after the AOF
    write), replace (a restarted peer's new socket). Needs an epoll object it registers
    its sockets with, `execute(argv) -> reply` for requests, and `answered(waiter, reply)`
    for the replies to its own requests."""

    def __init__(self, index, socks, ep, execute, answered):
        self.index = index
        self.ep = ep
        self.execute = execute
        self.answered = answered
        self.socks = {}             # peer worker -> socket
        self.by_fd = {}             # fd -> peer worker
        self.readers = {}
        self.out = {}               # peer -> bytearray not yet taken by the socket
        self.box = {}               # peer -> entries to send this loop turn
        self.waiting = {}           # reqid -> (peer, waiter)
        self.next_reqid = 0
        for w, sock in socks.items():
            self.add(w, sock)

    def add(self, w, sock):
        sock.setblocking(False)
        self.socks[w] = sock
        self.by_fd[sock.fileno()] = w
        self.readers[w] = FrameReader()
        self.out[w] = bytearray()
        self.box[w] = []
        self.ep.register(sock.fileno(), EPOLLIN)

    def replace(self, w, sock):
        """Worker w was restarted: its new socket (the old one is closed, and what still
        waited on it is answered with an error)."""
        if w in self.socks:
            self.lost(w)
        self.add(w, sock)

    def lost(self, w):
        sock = self.socks.pop(w)
        self.by_fd.pop(sock.fileno(), None)
        try:
            self.ep.unregister(sock.fileno())
        except (OSError, ValueError):
            pass
        sock.close()
        self.readers.pop(w, None)
        self.out.pop(w, None)
        self.box.pop(w, None)
        for reqid, (peer, waiter) in list(self.waiting.items()):
            if peer == w:
                del self.waiting[reqid]
                self.answered(waiter, R.WORKER_DIED)

    # ---- requests of ours ----------------------------------------------------------------

    def forward(self, w, argv, waiter):
        """Run argv on worker w; answered(waiter, reply) later. False without a link."""
        box = self.box.get(w)
        if box is None:
            return False
        self.next_reqid += 1
        self.waiting[self.next_reqid] = (w, waiter)
        box.append([REQUEST, self.next_reqid, argv])
        return True

    # ---- input ---------------------------------------------------------------------------

    def readable(self, fd):
        w = self.by_fd.get(fd)
        if w is None:
            return
        sock, reader = self.socks[w], self.readers[w]
        while True:
            try:
                msgs, n = reader.recv_from(sock)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                n = 0
            if not n:
                log.warning("Worker %d: the link to worker %d closed", self.index, w)
                self.lost(w)
                return
            for msg in msgs:
                self.entries(w, msgpack.unpackb(msg, use_list=True))
            if n < RECV_SIZE:
                return

    def entries(self, w, entries):
        box = self.box[w]
        waiting = self.waiting
        for e in entries:
            if e[0] == REQUEST:
                box.append([REPLY, e[1], self.execute(e[2])])
            else:
                got = waiting.pop(e[1], None)
                if got is not None:
                    self.answered(got[1], e[2])

    # ---- output --------------------------------------------------------------------------

    def send_all(self):
        """Send this turn's entries (the worker loop calls it after the AOF write)."""
        for w, box in self.box.items():
            if box:
                self.box[w] = []
                self.send(w, frame(msgpack.packb(box)))

    def send(self, w, data):
        out = self.out[w]
        if out:
            out += data
            return
        sock = self.socks[w]
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            return                  # the peer died: readable() sees the close
        if n < len(data):
            out += data[n:]
            self.ep.modify(sock.fileno(), EPOLLIN | EPOLLOUT)

    def writable(self, fd):
        w = self.by_fd.get(fd)
        if w is None:
            return
        sock, out = self.socks[w], self.out[w]
        try:
            n = sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = len(out)
        del out[:n]
        if not out:
            self.ep.modify(fd, EPOLLIN)

    def close(self):
        for sock in self.socks.values():
            sock.close()


def peer_sockets(spec):
    """--peers "1:12,2:14" -> {1: socket(fd 12), 2: socket(fd 14)}."""
    socks = {}
    for part in filter(None, spec.split(",")):
        w, _, fd = part.partition(":")
        socks[int(w)] = socket.socket(fileno=int(fd))
    return socks
