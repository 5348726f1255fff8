# cython: language_level=3
"""The links between the workers of a node, in C calls (docs/design.md, "Connections served
by their worker"; the messages are disque/contracts/peer_link.py's).

A worker serving a connection runs a command of another worker's queue or job on that
worker: `forward` puts it in this loop turn's box for that worker, `send_all` sends each
box as one frame after the AOF write, `readable` reads frames (disque/_fast/frames.pyx),
runs the requests (hook `execute`) and hands the replies to hook `answered`; the owner binds
both (disque/workers/peer_links.py, PEER_HOOKS). Sends never block: what the socket does
not take waits for EPOLLOUT, so two workers forwarding to each other at once cannot
deadlock.
"""
import logging
import select

from disque import replies
from disque._fast.frames cimport recv_frames, FRAMES_AGAIN, FRAMES_READ_SIZE, FRAMES_TOO_LONG
from disque._fast.msgframe cimport framed_box, unpack_frame
from disque._fast.sysio cimport send_or_keep, send_kept, OUT_KEPT
from disque.contracts import peer_link as _peer

log = logging.getLogger("disque.worker")

# the entries' kinds: disque/contracts/peer_link.py is their one home
cdef long REQUEST = _peer.REQUEST
cdef long REPLY = _peer.REPLY
cdef Py_ssize_t FRAME_LIMIT = _peer.MAX_FRAME
cdef unsigned int EPOLLIN = select.EPOLLIN
cdef unsigned int EPOLLOUT = select.EPOLLOUT
cdef bytes WORKER_DIED = replies.WORKER_DIED


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


cdef class PeerLinks:
    """Offers: by_fd (for the poll), forward, readable, writable, send_all (after the AOF
    write), replace (a restarted peer's new socket), close. Needs an epoll set it registers
    its sockets with, and its hooks bound (peerlinks.pxd)."""
    def __init__(self, int index, dict socks, ep):
        self.index = index
        self.ep = ep
        self.execute = None
        self.answered = None
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
        p.box.append([REQUEST, self.next_reqid, argv])     # peer_link.Request
        return True

    # ---- input ---------------------------------------------------------------------------

    cpdef readable(self, int fd):
        w = self.by_fd.get(fd)
        if w is None:
            return
        cdef Peer p = self.peers[w]
        cdef Py_ssize_t n
        cdef list frames
        while True:
            frames = []
            n = recv_frames(p.fd, p.inbuf, FRAME_LIMIT, FRAME_LIMIT, frames, 0)
            if n == FRAMES_AGAIN:
                return
            if n == FRAMES_TOO_LONG:
                log.error("Worker %d: the link to worker %d closed: a frame above %d bytes",
                          self.index, w, FRAME_LIMIT)
                self.lost(w)
                return
            if n == 0:
                log.warning("Worker %d: the link to worker %d closed", self.index, w)
                self.lost(w)
                return
            for data in frames:
                self.entries(p, unpack_frame(data))
            if n < FRAMES_READ_SIZE or self.peers.get(w) is not p:
                return

    cdef entries(self, Peer p, list entries):
        cdef list e
        waiting = self.waiting
        for e in entries:
            if e[0] == REQUEST:
                p.box.append([REPLY, e[1], self.execute(e[2])])   # peer_link.Reply
            else:
                got = waiting.pop(e[1], None)
                if got is not None:
                    self.answered(got[1], e[2])

    # ---- output --------------------------------------------------------------------------

    cpdef send_all(self):
        """Send this turn's entries (the worker loop calls it after the AOF write)."""
        cdef Peer p
        cdef list box
        for p in self.peers.values():
            if p.box:
                box = p.box
                p.box = []
                self.send(p, framed_box(box))

    cdef send(self, Peer p, bytes data):
        # OUT_BROKEN: the peer died, readable() sees the close
        if send_or_keep(p.fd, data, p.out) == OUT_KEPT:
            self.ep.modify(p.fd, EPOLLIN | EPOLLOUT)

    cpdef writable(self, int fd):
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
