# cython: language_level=3
"""The event loop of the connections a worker serves itself (`connection-affinity yes`;
docs/design.md "Connections served by their worker").

The poll, the reads, the writes and the turns of the worker loop while only those
connections, peer links and job links have news run here as C calls: epoll_wait, recv into
one buffer, the Cython RESP parser, send. What a read's commands do is the dispatch half,
servedcore.pyx's ServedCore, which extends `ServedLoop` and supplies `run_input` (the
commands of a read) and `resume_unblocked` (the held commands of a client whose waiting
command was answered). The hand-over channel and the closing of connections are the Python
half's (disque/workers/served_clients.py), reached through the hooks in servedloop.pxd.
"""
import logging
from ssl import SSLWantReadError

from cpython.exc cimport PyErr_SetFromErrno, PyErr_CheckSignals
from cpython.pystate cimport (PyInterpreterState_Head, PyInterpreterState_ThreadHead,
                              PyThreadState_Next)
from libc.errno cimport errno, EAGAIN, EINTR

from disque._fast.loophooks cimport FdHandler, MessagesOut
from disque._fast.peerlinks cimport PeerLinks
from disque._fast.resp cimport RequestParser
from disque._fast.resp import QueryBufferOverflow
from disque.contracts import connection_handover as handover_msg
from disque._fast.jobreply import BIG_PIECE as _BIG_PIECE
from disque._fast.shardcore cimport ShardCore
from disque._fast.timers cimport waiter_due
from disque._fast.sysio cimport c_recv, c_send, mono_ns, MSG_NOSIGNAL

cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void *ptr
        int fd
        unsigned int u32
        unsigned long long u64
    cdef struct epoll_event:
        unsigned int events
        epoll_data_t data
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event *event)
    int epoll_wait(int epfd, epoll_event *events, int maxevents, int timeout)
    int EPOLL_CLOEXEC
    int EPOLL_CTL_ADD
    int EPOLL_CTL_MOD
    int EPOLL_CTL_DEL
    unsigned int EPOLLIN
    unsigned int EPOLLOUT

cdef extern from "<unistd.h>" nogil:
    int c_close "close"(int fd)

log = logging.getLogger("disque.worker")

DEF READ_SIZE = 65536
# what may wait behind a reply the worker is still writing (ServedClient.unsent) before the
# connection goes back to the front-end, which buffers any amount and applies the limits
DEF MAX_BEHIND_UNSENT = 1 << 20
DEF MAX_EVENTS = 256
cdef char read_buf[READ_SIZE]          # one worker, one thread: every read lands here
# a TLS connection's plaintext lands here (OpenSSL's read takes a Python buffer)
cdef bytearray tls_buf = bytearray(READ_SIZE)
cdef object tls_view = memoryview(tls_buf)

cdef int BACK_SLOW_READER = handover_msg.BACK_SLOW_READER
cdef Py_ssize_t BIG_PIECE = _BIG_PIECE
# a bigger run is made into TLS records this much at a time, as the socket drains: at once,
# a 100 MB reply made 100 MB of records in the BIO and one 100 MB copy out of it
DEF TLS_CHUNK = 1 << 20


cpdef double monotonic():
    """time.monotonic() (the same clock), without the call through the time module."""
    return mono_ns() / 1e9


cdef class Epoll:
    """An epoll set with select.epoll's register / modify / unregister / close, which the
    core polls in C (PeerLinks registers its sockets in it too)."""

    def __cinit__(self):
        self.fd = epoll_create1(EPOLL_CLOEXEC)
        if self.fd < 0:
            PyErr_SetFromErrno(OSError)

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)

    cdef int ctl(self, int op, int fd, unsigned int mask) except -1:
        cdef epoll_event ev
        ev.events = mask
        ev.data.u64 = 0
        ev.data.fd = fd
        if epoll_ctl(self.fd, op, fd, &ev) < 0:
            PyErr_SetFromErrno(OSError)
            return -1
        return 0

    def register(self, int fd, unsigned int mask):
        self.ctl(EPOLL_CTL_ADD, fd, mask)

    def modify(self, int fd, unsigned int mask):
        self.ctl(EPOLL_CTL_MOD, fd, mask)

    def unregister(self, int fd):
        self.ctl(EPOLL_CTL_DEL, fd, 0)

    def fileno(self):
        return self.fd

    def close(self):
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1


cdef class Forwarded:
    """The place of a reply another worker is producing (PeerLinks.forward)."""

    def __init__(self):
        self.data = None


cpdef bytes take_ready(list out):
    """The replies at the head of a connection's `out` that are ready, in order, joined and
    taken off it; one still being made (a Forwarded with no data: another worker's, or a
    producer's waiting for its copies) stops it, as nothing may overtake it. None: none.
    A big one (a body among a reply's pieces) is never joined: it is taken alone, or stops
    the run before it, so that it is sent from where it is."""
    cdef Py_ssize_t ready = 0
    cdef bytes data
    for x in out:
        if type(x) is not bytes:
            if (<Forwarded>x).data is None:
                break
            out[ready] = (<Forwarded>x).data
        data = <bytes>out[ready]
        if len(data) >= BIG_PIECE:
            if not ready:
                ready = 1
            break
        ready += 1
    if not ready:
        return None
    data = out[0] if ready == 1 else b"".join(out[:ready])
    del out[:ready]
    return data


cdef Py_ssize_t behind(list out):
    """The bytes of the replies waiting in a connection's `out` (those made so far, other
    workers' included)."""
    cdef Py_ssize_t n = 0
    for x in out:
        if type(x) is bytes:
            n += len(<bytes>x)
        elif (<Forwarded>x).data is not None:
            n += len(<bytes>(<Forwarded>x).data)
    return n


cdef class ServedClient:
    """A connection this worker serves (its fields: servedloop.pxd)."""

    def __init__(self, long long cid, sock, bint resp3):
        self.id = cid
        self.sock = sock
        self.fd = sock.fileno()
        self.parser = RequestParser()
        self.out = []
        self.resp3 = resp3
        self.last_cmd = b""
        self.last_io = monotonic()
        self.waiting = 0
        self.back = None
        self.blocked_on = 0
        self.parked = None
        self.held = None
        self.fwd_w = -1
        self.fwd_run = 0
        self.following = False
        self.tls = self.tls_pump = None
        self.tls_in = self.tls_out = None
        self.tls_pending = None
        self.tls_plain = None
        self.tls_plain_at = 0
        self.pump = -1
        self.unsent = None
        self.unsent_at = 0

    def take_unsent(self):
        """The part of a reply the loop has not written yet (b""), which goes first when the
        connection moves or closes; no longer the loop's to write."""
        rest = b""
        if self.unsent is not None:
            rest = self.unsent[self.unsent_at:]
            self.unsent = None
        return rest

    def take_plain(self):
        """The part of a big reply not made into TLS records yet (b""): plaintext that goes
        before the replies in `out` when the connection moves or closes."""
        rest = b""
        if self.tls_plain is not None:
            rest = self.tls_plain[self.tls_plain_at:]
            self.tls_plain = None
        return rest


cdef inline bint only_thread():
    """No other Python thread exists (none could want the GIL): a blocking wait keeps it,
    which spares a release and a take at every wake-up. Read with the GIL held, as every
    thread state is made and dropped under it."""
    return PyThreadState_Next(PyInterpreterState_ThreadHead(PyInterpreterState_Head())) == NULL


cdef class ServedLoop:
    """Offers: turn (the worker loop's poll), serve_ready, read, flush. Needs
    from the subclass: run_input, resume_unblocked; from the Python half, its hooks."""

    def __cinit__(self):
        self.ep = Epoll()
        self.clients = {}
        self.by_id = {}
        self.deadlines = []
        self.interest_due = set()
        self.ready = []
        self.peer_ready = []
        self.channel_ready = False
        self.dirty = []
        self.slow = []
        self.peers = None
        self.unblocked = []
        self.keep_unsent = True
        self.extra_fds = {}
        self.extra_ready = []
        self.job_links_out = None

    # ---- the worker loop's poll ------------------------------------------------------

    def turn(self, bint block):
        """Turns of the worker loop while only served connections, peer links and job links
        have news: poll, serve, write, all in C, again and again; True when they are done (a signal
        came: the loop looks at its flags). False leaves the rest of the turn to the
        worker's Python loop (disque/workers/process.py), in its usual order, with what the
        poll found in link_ready / ticked: the link, the timer (every tick, so the loop runs
        at least that often), the hand-over channel, due job timers, consumer deadlines,
        replies or bus messages for the front-end, the AOF. Serving again there finds
        nothing left. Consumers blocked on queues that got jobs are served here
        (ConsumersCore.serve_ready) unless an AOF is on. A non-blocking turn (the AOF
        has slices to work) is one turn."""
        cdef ShardCore core = <ShardCore>self.shard
        cdef MessagesOut links_out = self.job_links_out
        persistence = self.persistence
        while True:
            if not self.poll(block):
                return True             # a signal: its handler ran, the loop looks again
            if self.link_ready or self.ticked or self.channel_ready or core.aof_on or self.idle:
                return False
            core.tick()
            if core.timers_due() or self.deadline_due(core.now_ms):
                return False            # the loop runs those before any command
            self.serve()                # the job links' frames too (their callbacks)
            # job messages for other nodes: to the direct links here, as the loop would (no
            # AOF on this path: nothing has to be written before they leave); without links
            # they stay in bus_out, which the loop below takes to the front-end
            if links_out is not None and core.bus_out:
                links_out.send_messages()
            # consumers blocked on queues that got jobs: served here, as the loop would
            # after serving (their replies and the job messages it makes leave below, in
            # the loop's order: job messages, then replies; no AOF on this path)
            if core.ready and not persistence.aof_busy:
                self.consumers.serve_ready()
                if links_out is not None and core.bus_out:
                    links_out.send_messages()
            # what the loop does after serving: bus messages and replies for the
            # front-end, AOF rewrite or load slices. An INTEREST held back by its rate
            # limit (interest_due, 50 ms) waits for the next tick's turn (the tick stays
            # at 10 ms meanwhile), not for a Python turn per wake-up
            if core.ready or core.out or core.bus_out or persistence.aof_busy:
                return False
            self.write_all()
            if not block:
                return True

    cdef bint deadline_due(self, long long now) except -1:
        """Deadlines.due (disque/deadlines.py) on the heap it holds, without a call: a
        blocked consumer's GETJOB TIMEOUT has passed. Not "the heap has an entry": a
        consumer served before its timeout leaves its entry until then, so where consumers
        block with a TIMEOUT the heap is seldom empty; and not "its first entry is due",
        as such an entry would take a turn of the Python loop for nothing (waiter_due
        drops it)."""
        return waiter_due(self.deadlines, <double>now)

    cdef bint poll(self, bint block) except -1:
        """False: a signal interrupted the wait (its Python handler has run)."""
        cdef epoll_event evs[MAX_EVENTS]
        cdef int n, i, fd, epfd = self.ep.fd
        cdef unsigned int ev
        cdef bint link_ready = False, ticked = False
        if block and not self.unblocked:
            if only_thread():
                n = epoll_wait(epfd, evs, MAX_EVENTS, -1)
            else:
                with nogil:     # the AOF's fsync thread runs while this worker waits
                    n = epoll_wait(epfd, evs, MAX_EVENTS, -1)
        else:
            n = epoll_wait(epfd, evs, MAX_EVENTS, 0)
        self.link_ready = self.ticked = False
        if n < 0:
            if errno != EINTR:
                PyErr_SetFromErrno(OSError)
            PyErr_CheckSignals()    # a signal: its handler runs, the loop looks again
            return False
        cdef dict clients = self.clients
        cdef PeerLinks peers = self.peers
        for i in range(n):
            fd = evs[i].data.fd
            ev = evs[i].events
            if fd == self.link_fd:
                link_ready = True
            elif fd == self.timer_fd:
                ticked = True
            elif fd in clients:
                if ev & EPOLLOUT:
                    self.dirty.append(clients[fd])     # the rest of a reply can go on
                if ev & ~EPOLLOUT:
                    self.ready.append(fd)
            elif peers is not None and fd in peers.by_fd:
                if ev & EPOLLOUT:
                    peers.writable(fd)
                if ev & ~EPOLLOUT:
                    self.peer_ready.append(fd)
            elif fd in self.extra_fds:
                self.extra_ready.append((fd, ev))
            else:
                self.channel_ready = True
        self.link_ready = link_ready
        self.ticked = ticked
        self.woke = n > <int>link_ready + <int>ticked
        return True

    def serve_ready(self):
        self.serve()

    cdef int serve(self) except -1:
        cdef list ready
        cdef ServedClient c
        if self.channel_ready:
            self.channel_ready = False
            self.channel_readable()
        if self.extra_ready:
            ready, self.extra_ready = self.extra_ready, []
            for fd, ev in ready:
                on_event = self.extra_fds.get(fd)
                if isinstance(on_event, FdHandler):
                    (<FdHandler>on_event).on_events(ev)
                elif on_event is not None:
                    on_event(ev)
        if self.peer_ready:
            ready, self.peer_ready = self.peer_ready, []
            for fd in ready:
                self.peers.readable(fd)
        if self.ready:
            ready, self.ready = self.ready, []
            clients = self.clients
            for fd in ready:
                c = clients.get(fd)
                if c is not None:
                    self.read(c)
        if self.unblocked:
            self.resume_unblocked()
        return 0

    # ---- input ---------------------------------------------------------------------------

    cpdef read(self, ServedClient c):
        cdef RequestParser parser = c.parser
        cdef Py_ssize_t room = parser.big_room() if c.tls is None else 0
        cdef ssize_t n
        if room >= READ_SIZE:
            n = c_recv(c.fd, parser.big_end(), room, 0)     # a big argument, straight in
        else:
            room = 0
            n = c_recv(c.fd, read_buf, READ_SIZE, 0)
        if n < 0:
            if errno == EAGAIN or errno == EINTR:
                return
            n = 0
        if n == 0:
            self.drop_client(c)
            return
        self.net_in += n
        c.last_io = monotonic()
        if room:
            parser.big_got += n
        elif c.tls is not None:
            if self.read_tls(c, n) < 0:
                return
        else:
            try:
                parser.feed_raw(read_buf, n)
            except QueryBufferOverflow:
                log.warning("Closing client id=%d: query buffer over 1 GiB", c.id)
                self.drop_client(c)
                return
        self.run_input(c)

    cdef int read_tls(self, ServedClient c, Py_ssize_t n) except -2:
        """The records of a TLS connection's read (docs/design.md, "TLS on the client port"),
        decrypted into its parser: one recv, as for plaintext, then every whole record the
        BIO holds. -1: the connection was closed (close_notify, a bad record)."""
        cdef Py_ssize_t m
        cdef char *buf = tls_buf
        obj = c.tls
        inc = c.tls_in
        inc.write(read_buf[:n])
        while True:
            try:
                m = obj.read(READ_SIZE, tls_view)
            except SSLWantReadError:
                break                   # the rest of a record is still on its way
            except (OSError, ValueError):       # SSLZeroReturnError, SSLError
                m = 0
            if m == 0:
                self.drop_client(c)
                return -1
            try:
                c.parser.feed_raw(buf, m)
            except QueryBufferOverflow:
                log.warning("Closing client id=%d: query buffer over 1 GiB", c.id)
                self.drop_client(c)
                return -1
            if not inc.pending and not obj.pending():
                break
        if c.tls_out.pending:
            self.dirty.append(c)        # OpenSSL has something to say (a key update's answer)
        return 0

    cpdef run_input(self, ServedClient c):
        """The commands c's input holds (ServedCore)."""
        raise NotImplementedError

    cdef resume_unblocked(self):
        """Clients whose waiting command was answered run what they hold (ServedCore)."""
        raise NotImplementedError

    # ---- output --------------------------------------------------------------------------

    def flush(self):
        """Write every connection's replies (the worker loop calls this after the AOF)."""
        self.write_all()

    cdef int write_all(self) except -1:
        cdef ServedClient c
        cdef list dirty
        if self.peers is not None:
            self.peers.send_all()   # requests to, and replies for, the other workers
        if self.slow:
            self.slow_commands_out()      # SLOWLOG shows them before their replies are read
        dirty, self.dirty = self.dirty, []
        clients = self.clients
        for c in dirty:
            if clients.get(c.fd) is not c:
                continue
            if c.unsent is not None and self.send_unsent(c) < 0:
                continue                            # dropped
            if c.unsent is None and self.write_runs(c) < 0:
                continue                            # dropped
            if c.unsent is not None and c.back is None and behind(c.out) > MAX_BEHIND_UNSENT:
                self.slow_reader(c)         # a reader that falls behind: buffered there
            if c.back is not None:
                self.back_when_answered(c)
        return 0

    cdef int write_runs(self, ServedClient c) except -2:
        """c's ready replies, one run (take_ready) after the other, until none is left or
        the socket takes no more; what it did not take stays in c.unsent (or goes back with
        a slow reader). A TLS connection's runs become records first (OpenSSL writes them
        into the outgoing BIO, so it never has a write to retry): records the socket did
        not take are kept as a plaintext rest is. -1: c was dropped."""
        cdef list out = c.out
        cdef bytes data, rest
        cdef bint tls = c.tls is not None
        while True:
            data = take_ready(out) if out and (not tls or c.tls_plain is None) else None
            if tls:
                data = self.tls_records(c, data)
                if data is None:
                    return -1
                if not data:
                    return 0
            elif data is None:
                return 0
            rest = self.send_out(c, data, c.back is None and self.keep_unsent)
            if rest is None:
                return -1
            if rest:
                if tls:
                    c.tls_pending = rest            # the pump sends it (a slow reader)
                else:
                    out.insert(0, rest)
                return 0
            if c.unsent is not None:
                return 0

    cdef bytes tls_records(self, ServedClient c, bytes run):
        """The records to send next on a TLS connection: those still waiting, then `run`
        (or the next TLS_CHUNK of a bigger one, whose rest waits in c.tls_plain) made into
        records (b"": none). None: c was dropped."""
        cdef Py_ssize_t at, end
        cdef bytes records
        if run is not None and len(run) > TLS_CHUNK:
            c.tls_plain, c.tls_plain_at, run = run, 0, None
        try:
            if c.tls_plain is not None:
                at = c.tls_plain_at
                end = min(at + TLS_CHUNK, len(c.tls_plain))
                c.tls.write(memoryview(c.tls_plain)[at:end])
                if end == len(c.tls_plain):
                    c.tls_plain = None
                else:
                    c.tls_plain_at = end
            elif run is not None:
                c.tls.write(run)
        except (OSError, ValueError):
            self.drop_client(c)
            return None
        records = c.tls_out.read()
        if c.tls_pending is not None:
            records = c.tls_pending + records
            c.tls_pending = None
        return records

    cdef bytes send_out(self, ServedClient c, bytes data, bint keep):
        """Send `data`: what the socket did not take (b"": all went), None when it is broken
        (c was dropped). With `keep`, a rest stays with c to be written as the socket drains
        (c.unsent) and b"" is returned; else the connection goes back as a slow reader."""
        cdef Py_ssize_t size = len(data)
        cdef Py_ssize_t n = c_send(c.fd, <char *>data, size, MSG_NOSIGNAL)
        if n < 0:
            if errno != EAGAIN and errno != EINTR:
                self.drop_client(c)
                return None
            n = 0
        self.net_out += n
        if n == size:
            c.last_io = monotonic()
            return b""
        if n:
            c.last_io = monotonic()
        if keep:
            c.unsent = data
            c.unsent_at = n
            self.ep.modify(c.fd, EPOLLIN | EPOLLOUT)
            return b""
        self.slow_reader(c)
        return data[n:]

    cdef int send_unsent(self, ServedClient c) except -2:
        """More of c.unsent: 1 when the rest went (the socket is watched for input only
        again), 0 when some is left, -1 when the connection broke (c was dropped)."""
        cdef bytes data = c.unsent
        cdef Py_ssize_t at = c.unsent_at, size = len(data)
        cdef Py_ssize_t n = c_send(c.fd, <char *>data + at, size - at, MSG_NOSIGNAL)
        if n < 0:
            if errno != EAGAIN and errno != EINTR:
                self.drop_client(c)
                return -1
            return 0
        self.net_out += n
        if n:
            c.last_io = monotonic()
        if at + n < size:
            c.unsent_at = at + n
            return 0
        c.unsent = None
        if c.back is None:      # else it is leaving: hand_back took it out of the set
            self.ep.modify(c.fd, EPOLLIN)
        return 1

    cdef int slow_reader(self, ServedClient c) except -1:
        """Its socket did not take its replies and the worker keeps none of them (an output
        limit is set, replies piled up behind a kept rest, TLS): the connection goes back to
        the front-end, which buffers any amount and applies the output limits."""
        if c.back is None:
            if c.parked is not None:
                # its GETJOB might wait for ever, and the hand-back with it
                self.unpark_client(c)
            c.back = (BACK_SLOW_READER, b"")
            if c.waiting:
                try:
                    self.ep.unregister(c.fd)
                except (OSError, ValueError):
                    pass
        return 0
