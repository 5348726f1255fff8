# cython: language_level=3
"""The front-end's per-command hot loop: client I/O, parsing, routing, batching, replies.

`Core` is subclassed by the Python `disque.frontend.Frontend`, whose parts keep everything
that is not on the hot path (GETJOB blocking, node commands, INFO) readable; the core
reaches them only through the hooks declared in frontcore.pxd. Here:
  * `Client` is the asyncio protocol of one connection; it parses input and keeps a FIFO
    of reply `Slot`s so pipelined replies from different workers stay in request order;
  * `Core.dispatch` applies the SPEC 1.3 checks and routes queue/ID commands;
  * `Core.send` batches requests per worker; the batch leaves when the event-loop tick
    ends (or early, once `eager_batch` requests wait, so the worker starts sooner);
  * `Core.deliver` routes one message of encoded replies; `flush_replies` then writes
    each touched client once.

Admin features cost one flag test per command when unused: `auth_required` (requirepass),
`gate` (OOM / MISCONF / LOADING hook), `nmonitors` (MONITOR), `paused` (CLIENT PAUSE),
`Client.reply_mode` (CLIENT REPLY), `Client.resp3` (HELLO 3), `obuf_limited`
(client-output-buffer-limit). The slowlog, on by default as upstream, reads the monotonic
clock once per read from a client and once per worker message (plus once more for a
command answered at once).
"""
from collections import deque

import msgpack

from disque.contracts import worker_link as _link

from disque._fast.sysio cimport mono_us
from disque._fast.resp cimport RequestParser, to_resp3
from disque._fast.resp import ProtocolError, QueryBufferOverflow

from disque._fast.dispatch cimport (Entry, lookup, arity_ok, target_worker, F_NOAUTH, F_HELLO,
                                   F_NOMONITOR, F_PING, F_COPIES, T_BADID, T_BADDELAY,
                                   T_SPLIT)
from disque._fast.dispatch import build_table
from disque.contracts import routes as _routes
from disque.contracts import connection_handover as _handover
cdef long long BIG_ARGUMENT = _handover.BIG_ARGUMENT
cdef int ROUTE_GETJOB = _routes.GETJOB
cdef int ROUTE_ALL = _routes.ALL

# link message kinds and reserved reply ids: disque/contracts/worker_link.py is their one home
cdef int REQ_CMD = _link.CMD
cdef long BUS_REQID = _link.BUS_REQID
cdef long QUEUE_ELSEWHERE = _link.QUEUE_ELSEWHERE
from disque import replies as _replies
from disque import nodeclock
cdef bytes BADID = _replies.BADID
cdef bytes DELAY_NEGATIVE = _replies.DELAY_NEGATIVE
cdef bytes OK = _replies.OK
cdef bytes NOAUTH = b"-NOAUTH Authentication required.\r\n"


def monotonic_us():
    """The clock the slowlog uses (for tests and the Python side)."""
    return mono_us()


# ---- replies ------------------------------------------------------------------------

cdef class Slot:
    """The place of one reply in a client's output order."""
    def __cinit__(self, Client client):
        self.client = client
        self.data = None
        self.t0 = 0
        self.argv = None
        self.mute = False
        self.resp3 = False

    def fill(self, bytes data):
        fill_slot(self, data)


cdef void slot_timed(Slot s):
    """A timed command's reply is ready: log it when slow (SPEC 4.5 SLOWLOG)."""
    cdef Core fe = s.client.fe
    # replies of one worker message share one clock reading (Core.deliver)
    cdef long long d = (fe.deliver_t if fe.deliver_t else mono_us()) - s.t0
    s.t0 = 0
    if fe.slowlog_slower_than >= 0 and d >= fe.slowlog_slower_than:
        fe.slowlog_push(s.client, s.argv, d)
    s.argv = None


cdef inline void fill_slot(Slot s, bytes data):
    cdef Client c = s.client
    if s.resp3:
        data = to_resp3(data)
    s.data = data
    if s.t0:
        slot_timed(s)
    if not c.dirty and c.slots and c.slots[0] is s:
        c.dirty = True
        c.fe.dirty.append(c)


cdef class Client:
    def __init__(self, Core fe):
        self.fe = fe
        self.parser = RequestParser()
        self.slots = None
        self.backlog = None
        self.waiting = None
        self.closing = False
        self.closed = False
        self.dirty = False
        self.id = 0
        self.fd = -1
        self.addr = ""
        self.name = b""
        self.last_cmd = b""
        self.created = nodeclock.now()
        self.last_interaction = self.created
        self.obuf_soft_since = 0.0
        self.authenticated = False
        self.resp3 = False
        self.monitor = False
        self.mute = False
        self.reply_mode = 0
        self.lib_name = None
        self.lib_ver = None
        self.affine = -1
        self.affine_run = 0
        self.affine_need = 1
        self.handed = -1
        self.detached = 0
        self.tls = None

    # ---- asyncio protocol ----------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        if self.id:
            self.fe.client_returned(self)   # back from the worker that served it
        else:
            self.fe.client_connected(self)

    def connection_lost(self, exc):
        if self.detached:
            self.detached -= 1      # the transport given up when a worker took the socket
            return
        self.closed = True
        self.fe.client_gone(self)

    def data_received(self, bytes data):
        if self.closing:
            return
        cdef Core fe = self.fe
        fe.net_input_bytes += len(data)
        self.last_interaction = fe.now
        try:
            self.parser.feed(data)
        except QueryBufferOverflow:
            fe.client_overflow(self)
            return
        self.process_input()
        if self.parser.bulk_len >= BIG_ARGUMENT and fe.affinity:
            fe.hand_over_big(self)

    def pause_writing(self):
        pass

    def resume_writing(self):
        pass

    def eof_received(self):
        return False

    # ---- input -----------------------------------------------------------------------

    cpdef process_input(self):
        cdef Core fe = self.fe
        cdef list cmds
        cdef Py_ssize_t n, ncmds
        # SLOWLOG: the commands of one read are timed from this clock reading
        fe.input_t = mono_us() if fe.slowlog_slower_than >= 0 else 0
        while self.waiting is None and not self.closing:
            if fe.paused and not self.monitor:
                return          # CLIENT PAUSE: the input waits in the parser / backlog
            if self.backlog:
                fe.dispatch(self, self.backlog.pop(0))
                continue
            try:
                cmds = self.parser.commands()
            except ProtocolError as e:
                # the offending byte as the byte itself (C %c), never a CR/LF
                self.reply(b"-ERR " + str(e).encode("latin-1", "replace").replace(
                    b"\r", b" ").replace(b"\n", b" ") + b"\r\n")
                self.close_after_reply()
                return
            ncmds = len(cmds)
            if ncmds == 0:
                return
            for n in range(ncmds):
                fe.dispatch(self, <list>cmds[n])
                if self.waiting is not None or self.closing or (fe.paused and not self.monitor):
                    if n + 1 < ncmds:
                        self.backlog = cmds[n + 1:] + (self.backlog or [])
                    return

    def resume(self):
        """A blocking GETJOB finished: run the commands that queued up behind it."""
        self.waiting = None
        if not self.closed and not self.closing:
            self.process_input()

    # ---- output ----------------------------------------------------------------------

    cpdef reply(self, bytes data):
        """An answer known now, placed after any still outstanding ones."""
        cdef Slot s
        if self.mute:
            return
        if self.resp3:
            data = to_resp3(data)
        if self.slots:
            s = Slot(self)
            s.data = data
            self.slots.append(s)
        elif not self.closed:
            self.write(data)

    cpdef Slot slot(self):
        """Reserve the place of a reply that a worker will produce."""
        cdef Slot s = Slot(self)
        cdef Core fe = self.fe
        if self.slots is None:
            self.slots = deque()
        self.slots.append(s)
        if self.mute:
            s.mute = True
        if self.resp3:
            s.resp3 = True      # the protocol when the command ran (HELLO may follow)
        if fe.cur_t0:
            # the command being dispatched is timed until this reply is ready
            s.t0 = fe.cur_t0
            s.argv = fe.cur_argv
            fe.cur_t0 = 0
            fe.cur_slotted = True
        return s

    def fill(self, Slot s, bytes data):
        fill_slot(s, data)

    cpdef flush(self):
        self.dirty = False
        slots = self.slots
        cdef list out = []
        cdef Slot s
        while slots:
            s = <Slot>slots[0]
            if s.data is None:
                break
            slots.popleft()
            if not s.mute:
                out.append(s.data)
        if out and not self.closed:
            self.write(<bytes>out[0] if len(out) == 1 else b"".join(out))
        if self.closing and not slots and not self.closed:
            self.transport.close()
        elif (self.affine >= 0 and self.affine_run >= self.affine_need and not slots
                and self.fe.affinity and self.waiting is None and not self.backlog
                and not self.closing and not self.reply_mode and not self.monitor):
            self.fe.hand_over(self, self.affine)

    cpdef write(self, bytes data):
        cdef Core fe = self.fe
        fe.net_output_bytes += len(data)
        self.last_interaction = fe.now
        self.transport.write(data)
        if fe.obuf_limited:
            fe.check_output_buffer(self)

    cpdef close_after_reply(self):
        self.closing = True
        if not self.slots and not self.closed:
            self.transport.close()


cdef inline void note_affine(Client client, int w):
    """One more command of `client` for worker w: the run that hands it over (Client.flush)."""
    if client.affine == w:
        client.affine_run += 1
    else:
        client.affine = w
        client.affine_run = 1


cdef class Core:
    def __init__(self, links, int nworkers, loop, commands):
        self.links = links
        self.nworkers = nworkers
        self.loop = loop
        self.pending = {}
        self.clients = {}
        self.outbox = [[] for _ in range(nworkers)]
        self.dirty = []
        self.next_reqid = 0
        self.next_client_id = 0
        self.flush_scheduled = False
        self.eager_batch = 16
        self.commands_processed = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.maxclients = 10000
        self.auth_required = False
        self.gate = False
        self.paused = False
        self.nmonitors = 0
        self.slowlog_slower_than = 10000
        self.cur_t0 = 0
        self.cur_argv = None
        self.cur_slotted = False
        self.input_t = 0
        self.deliver_t = 0
        self.obuf_limited = False
        self.clustered = False
        self.affinity = False
        self.queues_spread = False
        self.now = nodeclock.now()
        self.packer = Packer()
        self.unpackb = msgpack.unpackb
        self.calls = {}
        self.set_commands(commands)

    def set_commands(self, commands):
        """The dispatch table (disque/_fast/dispatch.pyx): {name as typed: Entry}, from
        disque.commands.command_table (rename-command applied)."""
        self.table = build_table(commands)

    cpdef long long new_reqid(self, int w):
        """A request id for worker w: id % nworkers == w, so the requests still waiting on a
        worker that died can be found (disque.worker_restart)."""
        self.next_reqid += 1
        return self.next_reqid * self.nworkers + w

    cpdef send(self, int w, list req):
        cdef list box = <list>self.outbox[w]
        box.append(req)
        if len(box) >= self.eager_batch:
            # start the worker on this chunk while we keep parsing: the processes overlap
            self.outbox[w] = []
            self.links.send(w, self.packer.pack(box))
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self):
        self.flush_scheduled = False
        cdef int w
        cdef list box
        for w in range(self.nworkers):
            box = <list>self.outbox[w]
            if box:
                self.outbox[w] = []
                self.links.send(w, self.packer.pack(box))
        self.links.poll_now()

    cpdef forward(self, Client client, int w, list argv):
        note_affine(client, w)
        self.next_reqid += 1
        cdef long long reqid = self.next_reqid * self.nworkers + w
        cdef Slot s = client.slot()
        self.pending[reqid] = s
        self.send(w, [REQ_CMD, reqid, argv])        # worker_link.Cmd, inline: the command path

    cdef hand_over_big(self, Client client):
        """An ADDJOB whose body is still arriving: the connection goes to the queue's worker
        now, which reads the body from the socket itself, instead of this process reading
        it and forwarding it over the link (about eight copies of a big body;
        docs/design.md, "Connections served by their worker")."""
        cdef list args = client.parser.args
        cdef Entry entry
        cdef int w
        if (args is None or len(args) < 2 or client.slots or client.waiting is not None
                or client.backlog or client.closing or client.reply_mode or client.monitor
                or client.handed >= 0):
            return
        entry = lookup(self.table, <bytes>args[0])
        if entry is None or not entry.flags & F_COPIES:
            return
        w = target_worker(entry, args, self.nworkers)     # the queue's: its name is in
        if w >= 0:
            self.hand_over(client, w, True)

    cpdef dispatch(self, Client client, list argv):
        """One command, with CLIENT REPLY OFF/SKIP applied around it."""
        if client.reply_mode:
            client.mute = True
            if client.reply_mode == 2:
                client.reply_mode = 0       # SKIP mutes just this command
        self.run(client, argv)
        if client.mute and client.reply_mode != 1:
            client.mute = False

    cdef run(self, Client client, list argv):
        """SPEC 1.3 dispatch order for one command."""
        cdef Entry entry = lookup(self.table, <bytes>argv[0])
        cdef int flags
        cdef Py_ssize_t argc = len(argv)
        cdef long long t0
        cdef bytes name
        if entry is None:
            # 1. QUIT (never in the table, so a renamed command cannot shadow it)
            if (<bytes>argv[0]).lower() == b"quit":
                client.reply(OK)
                client.close_after_reply()
                return
            # 2. unknown (or renamed away) command
            self.unknown_command(client, argv)
            return
        # 3. arity
        if not arity_ok(entry, argc):
            self.arity_error(client, entry.command)
            return
        flags = entry.flags
        # 4. requirepass: AUTH, and HELLO with a protocol version, authenticate themselves
        if self.auth_required and not client.authenticated:
            if not (flags & F_NOAUTH or (flags & F_HELLO and argc > 1)):
                client.reply(NOAUTH)
                return
        # 5-7. OOM / MISCONF / LOADING: one flag until one of them can apply
        if self.gate and not self.command_gate(client, entry.command, argv):
            return
        name = entry.name
        self.commands_processed += 1
        self.calls[name] = self.calls.get(name, 0) + 1
        client.last_cmd = name
        if self.nmonitors and not (flags & F_NOMONITOR):
            self.feed_monitors(client, argv)
        if entry.renamed:
            argv[0] = name          # renamed: workers know a command by its real name
        if self.slowlog_slower_than < 0:
            self.route(client, entry, argv)
            return
        # SLOWLOG: from the read that brought the command (Client.process_input) to its
        # reply: now for a command answered at once, else when its reply slot is filled
        # (slot_timed). Two clock readings per read and per worker message, not per command.
        t0 = self.input_t
        if t0 == 0:
            self.route(client, entry, argv)
            return
        self.cur_t0 = t0
        self.cur_argv = argv
        self.route(client, entry, argv)
        self.cur_argv = None
        if self.cur_slotted:
            self.cur_slotted = False
        else:
            self.cur_t0 = 0
            t0 = mono_us() - t0
            if self.slowlog_slower_than >= 0 and t0 >= self.slowlog_slower_than:
                self.slowlog_push(client, argv, t0)

    cdef route(self, Client client, Entry entry, list argv):
        """Where the command runs: the worker the kernel names, else the front-end's parts."""
        cdef int route = entry.route
        cdef bytes name = entry.name
        cdef int w = target_worker(entry, argv, self.nworkers)
        if w >= 0:
            if entry.flags & F_COPIES and self.clustered:
                note_affine(client, w)      # its worker serves it too (ServedCore.addjob_clustered)
                self.addjob_clustered(client, w, argv)
            elif self.queues_spread and name == b"qlen":
                self.qlen_spread(client, argv)
            else:
                self.forward(client, w, argv)
        elif w == T_BADID:
            client.reply(BADID)
        elif w == T_BADDELAY:
            client.reply(DELAY_NEGATIVE)
        elif w == T_SPLIT:
            self.route_ids(client, argv)
        elif route == ROUTE_GETJOB:
            self.getjob(client, argv)
        elif route == ROUTE_ALL:
            self.all_workers_command(client, name, argv)
        else:
            if not entry.flags & F_PING:
                client.affine = -1      # a node command: not a connection of one worker
            self.local_command(client, name, argv)

    cpdef deliver(self, bytes payload):
        """One message from a worker: a list of [reqid, reply, ...] entries."""
        pending = self.pending
        cdef list reps = self.unpackb(payload, use_list=True)
        cdef list rep
        if self.slowlog_slower_than >= 0:
            self.deliver_t = mono_us()
        for rep in reps:
            p = pending.pop(rep[0], None)
            if p is None:
                if rep[0] == BUS_REQID:             # the worker's cluster bus messages
                    self.bus_from_worker(rep[1])
                elif rep[0] == QUEUE_ELSEWHERE:     # a queue held off its slot (job features)
                    self.queue_elsewhere(rep[1], rep[2])
                else:                               # served connections' figures
                    self.worker_report(rep)
                continue
            if type(p) is Slot:
                fill_slot(<Slot>p, <bytes>rep[1])
            else:
                p(rep)
        self.deliver_t = 0

    cpdef flush_replies(self):
        cdef Client c
        if self.dirty:
            dirty = self.dirty
            self.dirty = []
            for c in dirty:
                c.flush()
