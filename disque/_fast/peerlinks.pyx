# cython: language_level=3
"""The links between the workers of a node, in C calls (docs/design.md, "Connections served
by their worker"; the frames are described in disque/workers/peer_links.py).

A worker serving a connection runs a command of another worker's queue or job on that
worker: `forward` puts it in this loop turn's box for that worker, `send_all` sends each
box as one frame after the AOF write, `readable` reads frames, runs the requests
(`execute`) and hands the replies to `answered`. Sends never block: what the socket does
not take waits for EPOLLOUT, so two workers forwarding to each other at once cannot
deadlock.
"""
import logging
import select

import msgpack

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.errno cimport errno, EAGAIN, EINTR

from disque import replies as R
from disque._fast.sysio cimport c_recv, framed, send_or_keep, send_kept, OUT_KEPT

log = logging.getLogger("disque.worker")

REQUEST = 0
REPLY = 1
DEF PEER_READ_SIZE = 262144
cdef char recv_buf[PEER_READ_SIZE]           # one worker, one thread: every read lands here
cdef unsigned int EPOLLIN = select.EPOLLIN
cdef unsigned int EPOLLOUT = select.EPOLLOUT
# one Packer for every frame: msgpack.packb makes (and mallocs the buffer of) a new one
# per call, ~0.7 µs more per frame here
cdef object packb = msgpack.Packer().pack
cdef object unpackb = msgpack.unpackb
cdef bytes WORKER_DIED = R.WORKER_DIED


cdef class Peer:
    """One other worker: its socket, input not yet a whole frame, output the socket did
    not take, and this loop turn's entries for it."""
    def __init__(self, int w, sock):
        self.w = w
        self.sock = sock
        self.fd = sock.fileno()
        self.inbuf = bytearray()
        self.out = bytearray()
        self.box = []


cdef Py_ssize_t split_frames(const unsigned char *base, Py_ssize_t size, list frames):
    """Append the whole frames in base[:size] to `frames`; returns the bytes they took.
    The reading half of disque/contracts/worker_link.py's format (FrameReader.feed), over
    the C read buffer."""
    cdef Py_ssize_t pos = 0, flen
    while size - pos >= 4:
        flen = (<Py_ssize_t>base[pos] | (<Py_ssize_t>base[pos + 1] << 8)
                | (<Py_ssize_t>base[pos + 2] << 16) | (<Py_ssize_t>base[pos + 3] << 24))
        if size - pos - 4 < flen:
            break
        frames.append(PyBytes_FromStringAndSize(<const char *>base + pos + 4, flen))
        pos += 4 + flen
    return pos


cdef class PeerLinks:
    """Offers: by_fd (for the poll), forward, readable, writable, send_all (after the AOF
    write), replace (a restarted peer's new socket), close. Needs an epoll set it registers
    its sockets with, `execute(argv) -> reply` for requests, and `answered(waiter, reply)`
    for the replies to its own requests."""
    def __init__(self, int index, dict socks, ep, execute, answered):
        self.index = index
        self.ep = ep
        self.execute = execute
        self.answered = answered
        self.peers = {}
        self.by_fd = {}
        self.waiting = {}
        self.next_reqid = 0
        for w, sock in socks.items():
            self.add(w, sock)

    def add(self, int w, sock):
        sock.setblocking(False)
        cdef Peer p = Peer(w, sock)
        self.peers[w] = p
        self.by_fd[p.fd] = w
        self.ep.register(p.fd, EPOLLIN)

    def replace(self, int w, sock):
        """Worker w was restarted: its new socket (the old one is closed, and what still
        waited on it is answered with an error)."""
        if w in self.peers:
            self.lost(w)
        self.add(w, sock)

    def lost(self, int w):
        cdef Peer p = self.peers.pop(w)
        self.by_fd.pop(p.fd, None)
        try:
            self.ep.unregister(p.fd)
        except (OSError, ValueError):
            pass
        p.sock.close()
        for reqid, (peer, waiter) in list(self.waiting.items()):
            if peer == w:
                del self.waiting[reqid]
                self.answered(waiter, WORKER_DIED)

    # ---- requests of ours ----------------------------------------------------------------

    cpdef bint forward(self, int w, list argv, object waiter):
        """Run argv on worker w; answered(waiter, reply) later. False without a link."""
        cdef Peer p = self.peers.get(w)
        if p is None:
            return False
        self.next_reqid += 1
        self.waiting[self.next_reqid] = (w, waiter)
        p.box.append([REQUEST, self.next_reqid, argv])
        return True

    # ---- input ---------------------------------------------------------------------------

    def readable(self, int fd):
        w = self.by_fd.get(fd)
        if w is None:
            return
        cdef Peer p = self.peers[w]
        cdef ssize_t n
        cdef Py_ssize_t used, have
        cdef list frames
        while True:
            n = c_recv(p.fd, recv_buf, PEER_READ_SIZE, 0)
            if n < 0:
                if errno == EAGAIN or errno == EINTR:
                    return
                n = 0
            if n == 0:
                log.warning("Worker %d: the link to worker %d closed", self.index, w)
                self.lost(w)
                return
            frames = []
            have = PyByteArray_GET_SIZE(p.inbuf)
            if have:
                p.inbuf.extend(recv_buf[:n])
                used = split_frames(<unsigned char *>PyByteArray_AS_STRING(p.inbuf),
                                    have + n, frames)
                if used:
                    del p.inbuf[:used]
            else:
                used = split_frames(<unsigned char *>recv_buf, n, frames)
                if used < n:
                    p.inbuf.extend(recv_buf[used:n])
            for data in frames:
                self.entries(p, unpackb(data, use_list=True))
            if n < PEER_READ_SIZE or self.peers.get(w) is not p:
                return

    cdef entries(self, Peer p, list entries):
        cdef list e
        waiting = self.waiting
        for e in entries:
            if e[0] == REQUEST:
                p.box.append([REPLY, e[1], self.execute(e[2])])
            else:
                got = waiting.pop(e[1], None)
                if got is not None:
                    self.answered(got[1], e[2])

    # ---- output --------------------------------------------------------------------------

    def send_all(self):
        """Send this turn's entries (the worker loop calls it after the AOF write)."""
        cdef Peer p
        cdef list box
        for p in self.peers.values():
            if p.box:
                box = p.box
                p.box = []
                self.send(p, framed(packb(box)))

    cdef send(self, Peer p, bytes data):
        # OUT_BROKEN: the peer died, readable() sees the close
        if send_or_keep(p.fd, data, p.out) == OUT_KEPT:
            self.ep.modify(p.fd, EPOLLIN | EPOLLOUT)

    def writable(self, int fd):
        w = self.by_fd.get(fd)
        if w is None:
            return
        cdef Peer p = self.peers[w]
        cdef Py_ssize_t left = send_kept(p.fd, p.out)
        if left < 0:
            del p.out[:]            # the peer died: readable() sees the close
            left = 0
        if not left:
            self.ep.modify(fd, EPOLLIN)

    def close(self):
        cdef Peer p
        for p in self.peers.values():
            p.sock.close()
