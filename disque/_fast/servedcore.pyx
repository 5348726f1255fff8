# cython: language_level=3
"""The command dispatch of the connections a worker serves itself (`connection-affinity
yes`; docs/design.md "Connections served by their worker").

`ServedCore` extends the event loop (servedloop.pyx) with what a read's commands do. Each
command goes through the dispatch kernel both command loops share (dispatch.pyx: the table
entry, the arity, the worker that runs it) and then runs on this worker's shard, goes to
the worker that owns it over a peer link, waits here (an ADDJOB for its copies, a GETJOB
parked among this worker's consumers), or goes back to the front-end with the connection
(a node command, an error the front-end words, IDs of several workers, a GETJOB that spans
workers). `disque.workers.served_clients.ServedClients` extends it with the Python half,
which the dispatch reaches through the hooks declared in servedcore.pxd.
"""
import logging

from disque._fast.resp cimport to_resp3
from disque._fast.dispatch cimport (Entry, lookup, arity_ok, target_worker, ping_reply,
                                   F_PING, F_COPIES, F_REQUEUES)
from disque._fast.resp import ProtocolError
from disque import replies
from disque.contracts import connection_handover as handover_msg
from disque.contracts import routes
from disque._fast.getjobopts cimport GetjobRequest, parse_getjob
from disque._fast.jobid cimport queue_worker
from disque._fast.servedloop cimport Forwarded, ServedClient, ServedLoop
from disque._fast.shardcore cimport CommandTally, ShardCore
from disque._fast.peerlinks cimport PeerLinks
from disque._fast.sysio cimport mono_ns

log = logging.getLogger("disque.worker")

DEF WAIT_ID_BASE = -(1 << 40)    # below the link's special request ids (-1, -3 ...)

cdef bytes INTERNAL_ERROR = replies.INTERNAL_ERROR
cdef int R_GETJOB = routes.GETJOB
cdef int BACK_COMMAND = handover_msg.BACK_COMMAND
cdef int BACK_FOLLOW = handover_msg.BACK_FOLLOW
cdef int FOLLOW_AFTER = handover_msg.FOLLOW_AFTER
cdef object encode_commands = handover_msg.encode_commands


cdef class ServedCore(ServedLoop):
    """Offers: run_input (the commands of a read), wait_here / repl_answered / cancel_wait
    (commands that wait in this worker), forward / peer_answered / peer_execute (the other
    workers' commands), configure_table. Needs its hooks bound (SERVED_HOOKS)."""

    def __cinit__(self):
        self.table = {}
        self.handlers = {}
        self.timeout = 0
        self.slowlog_us = -1
        self.names = []
        self.repl_waits = {}
        self.next_wait_id = WAIT_ID_BASE

    cpdef run_input(self, ServedClient c):
        # commands() returns what came before a protocol error and raises on the next
        # call, so it is called until it has nothing more, as the front-end does
        cdef list cmds, held
        if c.held is not None and not c.blocked_on and c.back is None and self.by_id.get(c.id) is c:
            # the commands held behind an answered wait run before any newer input: a read
            # can come between the answer (repl_answered) and resume_unblocked, and must
            # neither overtake them nor, blocking in turn, replace them in c.held
            held, c.held = c.held, None
            self.run_commands(c, held)
        while c.back is None and not c.blocked_on and self.by_id.get(c.id) is c:
            try:
                cmds = c.parser.commands()
            except ProtocolError:
                # the front-end words the error and closes the connection after the replies
                self.hand_back_client(c, BACK_COMMAND, b"")
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
                self.hand_back_client(c, BACK_FOLLOW if c.following else BACK_COMMAND,
                                      encode_commands(cmds[done:]))
                return
            if type(reply) is tuple:            # a big body's pieces (encode_jobs_pieces)
                if c.resp3:
                    out.append(to_resp3(b"".join(reply)))
                else:
                    out.extend(reply)
            else:
                if c.resp3 and type(reply) is bytes:
                    reply = to_resp3(reply)
                out.append(reply)
            done += 1
            if c.blocked_on:
                # like upstream, a producer waiting for its copies (or a consumer parked
                # in GETJOB) runs nothing more until it is answered: the rest of this
                # read is held (resume_unblocked)
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
        (<ShardCore>self.shard).account_share(names, d, True)
        self.commands += n
        c.last_cmd = names[n - 1]
        if self.slowlog_us >= 0 and d // 1000 >= self.slowlog_us:
            self.slow.extend([[c.id, argv, d // 1000] for argv in cmds])

    cdef object execute(self, ServedClient c, list argv):
        """The reply of a command this worker serves, a Forwarded place for one that
        another worker or a wait produces, or None to hand the connection back."""
        cdef Entry e = lookup(self.table, <bytes>argv[0])
        if e is None:
            return None                 # unknown: the front-end words the error
        cdef Py_ssize_t argc = len(argv)
        if not arity_ok(e, argc):
            return None
        if e.route == R_GETJOB:
            return self.getjob_served(c, argv)
        if e.flags & F_PING:
            self.names.append(b"ping")
            return ping_reply(argv)
        cdef int w = target_worker(e, argv, self.nworkers), me = self.index
        if w < 0:
            return None     # a node command, a bad ID or delay, IDs of several workers
        cdef bytes name = e.name
        cdef ShardCore core = <ShardCore>self.shard
        if e.flags & F_COPIES and core.cluster_size > 1:
            # it may wait for copies: served here when the queue is ours
            return self.addjob_clustered(c, argv) if w == me else None
        if e.flags & F_REQUEUES and self.dead_letter_possible(w, argv):
            return None
        if w != me:
            return self.forward(c, w, name, argv)
        c.fwd_run = 0               # one of ours: the connection is where its queues are
        if e.renamed:
            argv[0] = name          # renamed: the shard knows a command by its real name
        # looked up each time: while AOF writes fail the write commands' handlers answer
        # -MISCONF (disque/workers/persistence.py swaps them)
        reply = core.run_command(name, self.handlers[name], argv)
        if reply is None:                       # cannot happen off a cluster: say so
            log.error("Served %s waits for copies: answered with an error", name)
            reply = INTERNAL_ERROR
        self.names.append(name)
        return reply

    cdef object getjob_served(self, ServedClient c, list argv):
        """GETJOB whose queues are all here: a job now, or the client parks among the
        shard's consumers (a negative wait id: Consumers.answer gives its reply to
        repl_answered), like a GETJOB the front-end sends. One that spans workers or uses
        FROM-PREFIX goes back (None), one that would block on another worker's queue
        follows it there. On a node of a cluster a queue it empties, or a consumer with
        nothing, asks the other nodes for jobs (NEEDJOBS) through the shard's bus messages."""
        cdef GetjobRequest o
        cdef int w = -1, qw
        cdef long long wid
        error, request = parse_getjob(argv)
        if error is not None:
            return None                 # the front-end words the error
        o = <GetjobRequest>request
        if o.prefix is not None:
            return None
        for name in o.queues:
            qw = queue_worker(<bytes>name, self.nworkers)
            if w >= 0 and qw != w:
                return None             # several workers: the front-end merges them
            w = qw
        if w != self.index:
            # another worker's queues: only a GETJOB that cannot block goes there directly
            if o.nohang:
                return self.forward(c, w, b"getjob", argv)
            c.following = True          # handed back, then over to that worker
            return None
        c.fwd_run = 0                   # one of ours (ServedCore.forward)
        self.names.append(b"getjob")    # timed with the other commands of this turn
        wid = self.new_wait_id()
        o.reqid = wid
        o.client = c.id
        o.pieces = True
        reply = self.consumers.fetch_or_block(o)[0]
        if reply is not None:
            return reply
        c.parked = argv
        return self.wait_here(c, wid)

    cdef object addjob_clustered(self, ServedClient c, list argv):
        """ADDJOB on a node of a cluster, queue of ours: the reply now (an error, ASYNC,
        REPLICATE 1), else a Forwarded place that Shard.answer fills once the copies are
        confirmed (or the wait fails), with the client blocked meanwhile."""
        argv[0] = b"addjob"
        c.fwd_run = 0
        shard = self.shard
        self.names.append(b"addjob")
        cdef long long wid = self.new_wait_id()
        # Shard.run_with_copies, without its Python frame
        reply = (<ShardCore>shard).run_command(b"addjob", self.handlers[b"addjob"], argv)
        if type(reply) is not bytes:            # a ReplWait: the job needs copies
            reply = shard.replication.replicate_new(wid, reply)
        if reply is not None:
            return reply
        return self.wait_here(c, wid)

    cpdef long long new_wait_id(self):
        """Wait ids are negative, apart from the front-end's request ids and the link's
        special ones: a reply for a negative one comes here (repl_answered)."""
        cdef long long wid = self.next_wait_id
        self.next_wait_id -= 1
        return wid

    cpdef object wait_here(self, ServedClient c, long long wid):
        """c waits in this worker for the reply of wait id `wid` (an ADDJOB's copies, a
        parked GETJOB): its place in c's replies, and c runs nothing more meanwhile."""
        slot = Forwarded()
        self.repl_waits[wid] = (c, slot)
        c.waiting += 1
        c.blocked_on = wid
        return slot

    cpdef repl_answered(self, long long wid, bytes reply):
        """The reply of a served producer's ADDJOB that waited (Shard.answer), or of a
        parked GETJOB (Consumers.answer)."""
        cdef ServedClient c
        entry = self.repl_waits.pop(wid, None)
        if entry is None:
            return
        c = entry[0]
        (<Forwarded>entry[1]).data = to_resp3(reply) if c.resp3 else reply
        c.waiting -= 1
        c.blocked_on = 0
        c.parked = None
        if self.clients.get(c.fd) is c:
            self.dirty.append(c)
            if c.back is None:
                self.unblocked.append(c)    # its next commands run at the next serve_ready

    cpdef object cancel_wait(self, ServedClient c):
        """c stops waiting here (gone, or handed back): a waiting ADDJOB's copies are
        dropped, like upstream; a parked GETJOB leaves the consumers. Returns the
        Forwarded place of its reply, or None when it was not waiting."""
        cdef long long wid = c.blocked_on
        entry = self.repl_waits.pop(wid, None) if wid else None
        if entry is None:
            return None
        c.blocked_on = 0
        c.waiting -= 1
        if c.parked is not None:
            c.parked = None
            self.shard.consumers.unpark(c.id, wid)
        else:
            self.shard.replication.cancel_replication(wid)
        return entry[1]

    cdef resume_unblocked(self):
        """Clients whose waiting command was answered run what they hold."""
        cdef ServedClient c
        unblocked, self.unblocked = self.unblocked, []
        for c in unblocked:
            if c.back is not None or c.blocked_on or self.by_id.get(c.id) is not c:
                continue
            self.run_input(c)           # what it holds first, then what it has read since

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
        if c.fwd_run + 1 >= FOLLOW_AFTER and c.tls is None:
            c.following = True          # (a TLS connection cannot move: its TLS state is here)
            return None
        slot = Forwarded()
        argv[0] = name                  # the real name (rename-command)
        if not (<PeerLinks>self.peers).forward(w, argv, (c, slot)):
            return None                 # no link to w now (it is being restarted)
        c.waiting += 1
        c.fwd_run += 1
        # counted as served here (commandstats calls); the worker that runs it counts its
        # time and its call in its own figures (stats log, metrics)
        cdef CommandTally t = (<ShardCore>self.shard).tally(name)
        t.served += 1
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
            return self.getjob_of_peer(argv)
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
