# cython: language_level=3
"""The hot half of the connections a worker serves itself (`connection-affinity yes`;
docs/design.md "Connections served by their worker").

The poll, the reads, the parse, the commands one read brings, their accounting and the
writes run here as C calls: epoll_wait, recv into one buffer, the Cython RESP parser, the
shard's handlers, send. `disque.workers.served_clients.ServedClients` subclasses
`ServedCore` with the rest (the hand-over channel, hand-backs, commands forwarded to other
workers, cron, configuration), which the core calls on `self` as Python methods, off the
path of a plain command.
"""
import logging

from cpython.exc cimport PyErr_SetFromErrno, PyErr_CheckSignals
from libc.errno cimport errno, EAGAIN, EINTR

from disque._fast.frontcore import resp3 as to_resp3
from disque._fast.jobid cimport id_slot, queue_slot, valid_id
from disque._fast.resp cimport RequestParser
from disque._fast.resp import ProtocolError, QueryBufferOverflow, bulk
from disque import replies as R
from disque.contracts import connection_handover as H
from disque._fast.shardcore cimport ShardCore
from disque._fast.peerlinks cimport PeerLinks
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
DEF MAX_EVENTS = 256
DEF WAIT_ID_BASE = -(1 << 40)    # below the link's special request ids (-1, -3 ...)
cdef char read_buf[READ_SIZE]          # one worker, one thread: every read lands here

cdef bytes PONG_REPLY = R.PONG
cdef bytes INTERNAL_ERROR = R.INTERNAL_ERROR
cdef int ROUTE_QUEUE = H.ROUTE_QUEUE
cdef int ROUTE_ID = H.ROUTE_ID
cdef int ROUTE_IDS = H.ROUTE_IDS
cdef int ROUTE_GETJOB = H.ROUTE_GETJOB
cdef int ROUTE_PING = H.ROUTE_PING
cdef int BACK_COMMAND = H.BACK_COMMAND
cdef int BACK_SLOW_READER = H.BACK_SLOW_READER
cdef int BACK_FOLLOW = H.BACK_FOLLOW
cdef int FOLLOW_AFTER = H.FOLLOW_AFTER
cdef object encode_commands = H.encode_commands
cdef tuple REQUEUES = (b"nack", b"enqueue")     # commands that may dead-letter a job


cpdef double monotonic():
    """time.monotonic() (the same clock), without the call through the time module."""
    return mono_ns() / 1e9


cdef class Epoll:
    """An epoll set with select.epoll's register / modify / unregister / close, which the
    core polls in C (PeerLinks registers its sockets in it too)."""
    cdef readonly int fd

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
    cdef public object data

    def __init__(self):
        self.data = None


cpdef bytes take_ready(list out):
    """The replies at the head of a connection's `out` that are ready, in order, joined and
    taken off it; one still being made (a Forwarded with no data: another worker's, or a
    producer's waiting for its copies) stops it, as nothing may overtake it. None: none."""
    cdef Py_ssize_t ready = 0
    for x in out:
        if type(x) is not bytes:
            if (<Forwarded>x).data is None:
                break
            out[ready] = (<Forwarded>x).data
        ready += 1
    if not ready:
        return None
    data = out[0] if ready == 1 else b"".join(out[:ready])
    del out[:ready]
    return data


cdef class ServedClient:
    cdef public long long id
    cdef public object sock
    cdef public int fd
    cdef public RequestParser parser
    cdef public list out
    cdef public bint resp3
    cdef public bytes last_cmd
    cdef public double last_io
    cdef public int waiting         # Forwarded replies still to come
    cdef public object back         # (reason, input) of a hand-back waiting for them
    cdef public long long blocked_on    # the wait id of its ADDJOB waiting for copies, or 0
    cdef public list held           # commands read after that ADDJOB, run once it is answered
    cdef public int fwd_w           # the other worker its last commands were forwarded to
    cdef public int fwd_run         # how many in a row (a command run here resets it)
    cdef public bint following      # handed back to follow them there (BACK_FOLLOW)

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
        self.held = None
        self.fwd_w = -1
        self.fwd_run = 0
        self.following = False


cdef class ServedCore:
    """Offers: wait (the worker loop's poll), serve_ready, read, run_input, flush, and the
    forwarding to other workers (forward, peer_execute, peer_answered). The subclass
    supplies on_channel, drop, hand_back, getjob, peer_getjob, may_dead_letter, finish_back
    and send_slow."""
    cdef public int index, nworkers, link_fd, timer_fd
    cdef public object shard, channel, peers
    cdef public Epoll ep
    cdef public dict clients        # fd -> ServedClient
    cdef public dict by_id          # client id -> ServedClient
    cdef public dict table          # typed name -> (real name, route, arity, renamed)
    cdef public dict handlers       # the shard's: changed in place, never replaced
    cdef public list deadlines      # the shard's consumers' GETJOB deadlines (never replaced)
    cdef public set interest_due    # the shard's (never replaced)
    cdef public object persistence  # the shard's
    cdef public dict calls          # real name -> calls served (commandstats)
    cdef public double timeout
    cdef public long long slowlog_us
    cdef public list ready          # client fds readable after the last wait
    cdef public list peer_ready
    cdef public bint channel_ready
    cdef public list dirty          # clients with replies to write
    cdef public long long commands, net_in, net_out
    cdef public list slow
    cdef public list names          # real names of the commands of the read being served
    cdef public dict repl_waits     # wait id -> (client, Forwarded) of ADDJOBs waiting for copies
    cdef public list unblocked      # clients whose ADDJOB was answered: their held commands next
    cdef public long long next_wait_id
    cdef public bint link_ready, ticked     # what the last poll found besides the clients
    cdef public bint woke           # it found a client, a peer, the channel or a job link
    cdef public bint idle           # the worker ticks slowly: every wake-up goes to its loop
    cdef public dict extra_fds      # fd -> on_event(events): direct job links (job_links.py)
    cdef public list extra_ready    # (fd, events) the last poll found for them
    cdef public object job_links_out    # the worker's: job messages to the links, None: no links

    def __cinit__(self):
        self.ep = Epoll()
        self.clients = {}
        self.by_id = {}
        self.table = {}
        self.handlers = {}
        self.deadlines = []
        self.interest_due = set()
        self.calls = {}
        self.timeout = 0
        self.slowlog_us = -1
        self.ready = []
        self.peer_ready = []
        self.channel_ready = False
        self.dirty = []
        self.slow = []
        self.names = []
        self.peers = None
        self.repl_waits = {}
        self.unblocked = []
        self.next_wait_id = WAIT_ID_BASE
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
        replies or bus messages for the front-end, consumers to serve, the AOF. Serving
        again there finds nothing left. A non-blocking turn (the AOF has slices to work)
        is one turn."""
        cdef ShardCore core = <ShardCore>self.shard
        persistence = self.persistence
        links_out = self.job_links_out
        while True:
            if not self.poll(block):
                return True             # a signal: its handler ran, the loop looks again
            if self.link_ready or self.ticked or self.channel_ready or core.aof_on or self.idle:
                return False
            core.tick()
            if core.timers_due() or self.deadlines:
                return False            # the loop runs those before any command
            self.serve()                # the job links' frames too (their callbacks)
            # job messages for other nodes: to the direct links here, as the loop would (no
            # AOF on this path: nothing has to be written before they leave); without links
            # they stay in bus_out, which the loop below takes to the front-end
            if links_out is not None and core.bus_out:
                links_out()
            # what the loop does after serving: consumers to serve, INTEREST, bus messages
            # and replies for the front-end, AOF rewrite or load slices
            if (core.ready or core.out or core.bus_out or self.interest_due
                    or persistence.aof_busy):
                return False
            self.write_all()
            if not block:
                return True

    def wait(self, bint block):
        """(link readable, timer fired); readable clients and channel are kept for
        serve_ready."""
        self.poll(block)
        return self.link_ready, self.ticked

    cdef bint poll(self, bint block) except -1:
        """False: a signal interrupted the wait (its Python handler has run)."""
        cdef epoll_event evs[MAX_EVENTS]
        cdef int n, i, fd, epfd = self.ep.fd
        cdef unsigned int ev
        cdef bint link_ready = False, ticked = False
        if block and not self.unblocked:
            with nogil:         # the AOF's fsync thread runs while this worker waits
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
        peers = self.peers
        for i in range(n):
            fd = evs[i].data.fd
            ev = evs[i].events
            if fd == self.link_fd:
                link_ready = True
            elif fd == self.timer_fd:
                ticked = True
            elif fd in clients:
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
            (<object>self).on_channel()
        if self.extra_ready:
            ready, self.extra_ready = self.extra_ready, []
            for fd, ev in ready:
                on_event = self.extra_fds.get(fd)
                if on_event is not None:
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
        cdef ssize_t n = c_recv(c.fd, read_buf, READ_SIZE, 0)
        if n < 0:
            if errno == EAGAIN or errno == EINTR:
                return
            n = 0
        if n == 0:
            (<object>self).drop(c)
            return
        self.net_in += n
        c.last_io = monotonic()
        try:
            c.parser.feed_raw(read_buf, n)
        except QueryBufferOverflow:
            log.warning("Closing client id=%d: query buffer over 1 GiB", c.id)
            (<object>self).drop(c)
            return
        self.run_input(c)

    cpdef run_input(self, ServedClient c):
        # commands() returns what came before a protocol error and raises on the next
        # call, so it is called until it has nothing more, as the front-end does
        cdef list cmds
        while c.back is None and not c.blocked_on and self.by_id.get(c.id) is c:
            try:
                cmds = c.parser.commands()
            except ProtocolError:
                # the front-end words the error and closes the connection after the replies
                (<object>self).hand_back(c, BACK_COMMAND)
                return
            if not cmds:
                return
            self.run_commands(c, cmds)

    cdef run_commands(self, ServedClient c, list cmds):
        # The commands of one read are timed together, from the read to their replies
        # (which leave together), as the front-end times them: two clock readings per
        # read, each command counted with its share (commandstats, latency histogram)
        cdef long long t0 = mono_ns()
        cdef list out = c.out
        cdef Py_ssize_t done = 0
        for argv in cmds:
            reply = self.execute(c, <list>argv)
            if reply is None:
                self.account(c, cmds[:done], t0)
                (<object>self).hand_back(c, BACK_FOLLOW if c.following else BACK_COMMAND,
                                         encode_commands(cmds[done:]))
                return
            if c.resp3 and type(reply) is bytes:
                reply = to_resp3(reply)
            out.append(reply)
            done += 1
            if c.blocked_on:
                # like upstream, a producer waiting for its copies runs nothing more until
                # it is answered: the rest of this read is held (resume_unblocked)
                if done < len(cmds):
                    c.held = cmds[done:]
                    cmds = cmds[:done]
                break
        self.account(c, cmds, t0)
        if out:
            self.dirty.append(c)

    cdef account(self, ServedClient c, list cmds, long long t0):
        cdef list names = self.names
        if not names:
            return
        self.names = []
        cdef long long d = mono_ns() - t0
        cdef Py_ssize_t n = len(names)
        (<ShardCore>self.shard).account_share(names, d, self.calls)
        self.commands += n
        c.last_cmd = names[n - 1]
        if self.slowlog_us >= 0 and d // 1000 >= self.slowlog_us:
            self.slow.extend([[c.id, argv, d // 1000] for argv in cmds])

    cdef object execute(self, ServedClient c, list argv):
        """The reply of a command this worker serves alone, or None to hand it back."""
        # the name as sent first: the table also holds each name in capitals (configure)
        entry = self.table.get(argv[0])
        if entry is None:
            entry = self.table.get((<bytes>argv[0]).lower())
            if entry is None:
                return None
        cdef bytes name = entry[0]
        cdef int route = entry[1], arity = entry[2], w, v
        cdef Py_ssize_t argc = len(argv)
        if (arity > 0 and argc != arity) or (arity < 0 and argc < -arity):
            return None
        cdef ShardCore core = <ShardCore>self.shard
        cdef int me = self.index, nw = self.nworkers
        if route == ROUTE_QUEUE:
            w = queue_slot(argv[1]) % nw
            if name == b"addjob" and core.cluster_size > 1:
                # it may wait for copies: served here when the queue is ours
                return self.addjob_clustered(c, argv) if w == me else None
            if w != me:
                return self.forward(c, w, name, argv)
        elif route == ROUTE_ID:
            if not valid_id(argv[1]):
                return None
            w = id_slot(argv[1]) % nw
            if w != me:
                return self.forward(c, w, name, argv)
        elif route == ROUTE_IDS:
            if argc < 2 or (name == b"nack" and argc > 3 and (<bytes>argv[argc - 2]).lower() == b"delay"):
                return None
            w = -1
            for jid in argv[1:]:
                if not valid_id(jid):
                    return None
                v = id_slot(jid) % nw
                if w < 0:
                    w = v
                elif v != w:
                    return None         # several workers: the front-end splits it
            if name in REQUEUES and (<object>self).may_dead_letter(w, argv):
                return None
            if w != me:
                return self.forward(c, w, name, argv)
        elif route == ROUTE_GETJOB:
            return (<object>self).getjob(c, argv)
        elif route == ROUTE_PING:
            if argc > 2:
                return None
            self.names.append(b"ping")
            return PONG_REPLY if argc == 1 else bulk(argv[1])
        c.fwd_run = 0               # one of ours: the connection is where its queues are
        if entry[3]:
            argv[0] = name          # renamed: the shard knows a command by its real name
        # looked up each time: while AOF writes fail the write commands' handlers answer
        # -MISCONF (disque/workers/persistence.py swaps them)
        reply = core.run_command(name, self.handlers[name], argv)
        if reply is None:                       # cannot happen off a cluster: say so
            log.error("Served %s waits for copies: answered with an error", name)
            reply = INTERNAL_ERROR
        self.names.append(name)
        return reply

    cdef object addjob_clustered(self, ServedClient c, list argv):
        """ADDJOB on a node of a cluster, queue of ours: the reply now (an error, ASYNC,
        REPLICATE 1), else a Forwarded place that Shard.answer fills once the copies are
        confirmed (or the wait fails), with the client blocked meanwhile."""
        argv[0] = b"addjob"
        c.fwd_run = 0
        shard = self.shard
        self.names.append(b"addjob")
        # wait ids are negative, apart from the front-end's request ids and the link's
        # special ones: Shard.answer sends the reply of a negative one here
        cdef long long wid = self.next_wait_id
        self.next_wait_id -= 1
        # Shard.run_with_copies, without its Python frame
        reply = (<ShardCore>shard).run_command(b"addjob", self.handlers[b"addjob"], argv)
        if type(reply) is not bytes:            # a ReplWait: the job needs copies
            reply = shard.replication.replicate_new(wid, reply)
        if reply is not None:
            return reply
        slot = Forwarded()
        self.repl_waits[wid] = (c, slot)
        c.waiting += 1
        c.blocked_on = wid
        return slot

    cpdef repl_answered(self, long long wid, bytes reply):
        """The reply of a served producer's ADDJOB that waited (Shard.answer)."""
        cdef ServedClient c
        entry = self.repl_waits.pop(wid, None)
        if entry is None:
            return
        c = entry[0]
        (<Forwarded>entry[1]).data = to_resp3(reply) if c.resp3 else reply
        c.waiting -= 1
        c.blocked_on = 0
        if self.clients.get(c.fd) is c:
            self.dirty.append(c)
            if c.back is None:
                self.unblocked.append(c)    # its next commands run at the next serve_ready

    cpdef cancel_wait(self, ServedClient c):
        """The client of a waiting ADDJOB is gone: its copies are dropped, like upstream."""
        cdef long long wid = c.blocked_on
        if wid and self.repl_waits.pop(wid, None) is not None:
            c.blocked_on = 0
            c.waiting -= 1
            self.shard.replication.cancel_replication(wid)

    cdef resume_unblocked(self):
        cdef ServedClient c
        cdef list held
        unblocked, self.unblocked = self.unblocked, []
        for c in unblocked:
            if c.back is not None or c.blocked_on or self.by_id.get(c.id) is not c:
                continue
            held, c.held = c.held, None
            if held:
                self.run_commands(c, held)
            self.run_input(c)

    # ---- commands of the other workers (disque/workers/peer_links.py) ---------------------

    cpdef object forward(self, ServedClient c, int w, bytes name, list argv):
        """Run argv on worker w; its reply takes this place in c's replies. None hands the
        connection back: no link to w now, or its commands have gone to w FOLLOW_AFTER
        times in a row (a producer or consumer that moved to a queue of w), so that from
        now on w serves it with no hop, rather than this worker forwarding each command
        for as long as the connection lives. A client spread over the workers' queues
        never gets there (with 2 workers, 32 in a row has odds of 2^-32)."""
        if self.peers is None:
            return None
        if c.fwd_w != w:
            c.fwd_w = w
            c.fwd_run = 0
        if c.fwd_run + 1 >= FOLLOW_AFTER:
            c.following = True
            return None
        slot = Forwarded()
        argv[0] = name                  # the real name (rename-command)
        if not (<PeerLinks>self.peers).forward(w, argv, (c, slot)):
            return None                 # no link to w now (it is being restarted)
        c.waiting += 1
        c.fwd_run += 1
        # counted as served here (commandstats calls); the worker that runs it counts its
        # time and its call in its own figures (stats log, metrics)
        self.calls[name] = self.calls.get(name, 0) + 1
        self.commands += 1
        c.last_cmd = name
        return slot

    cpdef peer_answered(self, tuple waiter, bytes reply):
        cdef ServedClient c = waiter[0]
        (<Forwarded>waiter[1]).data = to_resp3(reply) if c.resp3 else reply
        c.waiting -= 1
        if self.clients.get(c.fd) is c:
            self.dirty.append(c)

    cpdef object peer_execute(self, list argv):
        """A command another worker forwards: its reply (sent after the AOF write). Timed
        and counted here, one command at a time, as Shard.execute does."""
        cdef bytes name = argv[0]
        if name == b"getjob":                   # GETJOB ... NOHANG of our queues
            return (<object>self).peer_getjob(argv)
        shard = self.shard
        handler = self.handlers.get(name)
        if handler is None:
            return shard.execute(0, argv)       # the shard words the error
        cdef long long t0 = mono_ns()
        reply = (<ShardCore>shard).run_command(name, handler, argv)
        if reply is None:                       # waits for copies: not off a cluster
            reply = INTERNAL_ERROR
        (<ShardCore>shard).account(name, mono_ns() - t0)
        return reply

    # ---- output --------------------------------------------------------------------------

    def flush(self):
        """Write every connection's replies (the worker loop calls this after the AOF)."""
        self.write_all()

    cdef int write_all(self) except -1:
        cdef ServedClient c
        cdef list out, dirty
        cdef Py_ssize_t size
        cdef ssize_t n
        cdef bytes data
        if self.peers is not None:
            self.peers.send_all()   # requests to, and replies for, the other workers
        if self.slow:
            (<object>self).send_slow()      # SLOWLOG shows them before their replies are read
        dirty, self.dirty = self.dirty, []
        clients = self.clients
        for c in dirty:
            if clients.get(c.fd) is not c:
                continue
            out = c.out
            if not out:
                if c.back is not None:
                    (<object>self).finish_back(c)
                continue
            data = take_ready(out)
            if data is None:
                continue
            size = len(data)
            n = c_send(c.fd, <char *>data, size, MSG_NOSIGNAL)
            if n < 0:
                if errno == EAGAIN or errno == EINTR:
                    n = 0
                else:
                    (<object>self).drop(c)
                    continue
            self.net_out += n
            if n < size:
                out.insert(0, data[n:])
                if c.back is None:
                    c.back = (BACK_SLOW_READER, b"")
                    if c.waiting:
                        try:
                            self.ep.unregister(c.fd)
                        except (OSError, ValueError):
                            pass
            else:
                c.last_io = monotonic()
            if c.back is not None:
                (<object>self).finish_back(c)
        return 0
