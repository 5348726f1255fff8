# cython: language_level=3
"""The front-end's per-command hot loop: client I/O, parsing, routing, batching, replies.

`Core` is subclassed by the Python `disque.frontend.Frontend`, which keeps everything
that is not on the hot path (GETJOB blocking, node commands, INFO) readable. Here:
  * `Client` is the asyncio protocol of one connection; it parses input and keeps a FIFO
    of reply `Slot`s so pipelined replies from different workers stay in request order;
  * `Core.dispatch` applies the SPEC 1.3 checks and routes queue/ID commands;
  * `Core.send` batches requests per worker; the batch leaves when the event-loop tick
    ends (or early, once `eager_batch` requests wait, so the worker starts sooner);
  * `Core.deliver` routes one message of encoded replies; `flush_replies` then writes
    each touched client once.
"""
from collections import deque

import msgpack

from disque._fast.resp cimport RequestParser
from disque._fast.resp import ProtocolError, QueryBufferOverflow
from disque._fast.jobid cimport queue_slot, id_slot, valid_id

DEF ROUTE_LOCAL = 0
DEF ROUTE_QUEUE = 1
DEF ROUTE_ID = 2
DEF ROUTE_IDS = 3
DEF ROUTE_GETJOB = 4
DEF ROUTE_ALL = 5
ROUTE_CODES = {"local": ROUTE_LOCAL, "queue": ROUTE_QUEUE, "id": ROUTE_ID, "ids": ROUTE_IDS,
               "getjob": ROUTE_GETJOB, "all": ROUTE_ALL}

cdef int REQ_CMD = 0
cdef bytes BADID = b"-BADID Invalid Job ID format.\r\n"
cdef bytes OK = b"+OK\r\n"


cdef class Slot:
    """The place of one reply in a client's output order."""
    def __cinit__(self, Client client):
        self.client = client
        self.data = None

    def fill(self, bytes data):
        fill_slot(self, data)


cdef inline void fill_slot(Slot s, bytes data):
    s.data = data
    cdef Client c = s.client
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
        self.addr = ""
        self.name = b""
        self.last_cmd = b""
        import time
        self.created = time.time()

    # ---- asyncio protocol ----------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        self.fe.client_connected(self)

    def connection_lost(self, exc):
        self.closed = True
        self.fe.client_gone(self)

    def data_received(self, bytes data):
        if self.closing:
            return
        self.fe.net_input_bytes += len(data)
        try:
            self.parser.feed(data)
        except QueryBufferOverflow:
            self.fe.client_overflow(self)
            return
        self.process_input()

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
        while self.waiting is None and not self.closing:
            if self.backlog:
                fe.dispatch(self, self.backlog.pop(0))
                continue
            try:
                cmds = self.parser.commands()
            except ProtocolError as e:
                self.reply(b"-ERR " + str(e).encode() + b"\r\n")
                self.close_after_reply()
                return
            ncmds = len(cmds)
            if ncmds == 0:
                return
            for n in range(ncmds):
                fe.dispatch(self, <list>cmds[n])
                if self.waiting is not None or self.closing:
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
        if self.slots:
            s = Slot(self)
            s.data = data
            self.slots.append(s)
        elif not self.closed:
            self.write(data)

    cpdef Slot slot(self):
        """Reserve the place of a reply that a worker will produce."""
        cdef Slot s = Slot(self)
        if self.slots is None:
            self.slots = deque()
        self.slots.append(s)
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
            out.append(s.data)
        if out and not self.closed:
            self.write(<bytes>out[0] if len(out) == 1 else b"".join(out))
        if self.closing and not slots:
            self.transport.close()

    cpdef write(self, bytes data):
        self.fe.net_output_bytes += len(data)
        self.transport.write(data)

    cpdef close_after_reply(self):
        self.closing = True
        if not self.slots:
            self.transport.close()


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
        self.packb = msgpack.Packer().pack
        self.unpackb = msgpack.unpackb
        self.table = {}
        self.calls = {}
        for name, cmd in commands.items():
            self.table[name] = (ROUTE_CODES[cmd.route], cmd.arity, cmd)

    # hooks the Python subclass provides
    def client_connected(self, client):
        raise NotImplementedError

    def client_gone(self, client):
        raise NotImplementedError

    def client_overflow(self, client):
        client.transport.abort()

    cpdef long long new_reqid(self):
        self.next_reqid += 1
        return self.next_reqid

    cpdef send(self, int w, list req):
        cdef list box = <list>self.outbox[w]
        box.append(req)
        if len(box) >= self.eager_batch:
            # start the worker on this chunk while we keep parsing: the processes overlap
            self.outbox[w] = []
            self.links.send(w, self.packb(box))
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
                self.links.send(w, self.packb(box))
        self.links.poll_now()

    cpdef forward(self, Client client, int w, list argv):
        self.next_reqid += 1
        cdef Slot s = client.slot()
        self.pending[self.next_reqid] = s
        self.send(w, [REQ_CMD, self.next_reqid, argv])

    cpdef dispatch(self, Client client, list argv):
        """SPEC 1.3 dispatch order for one command."""
        self.commands_processed += 1
        cdef bytes name = (<bytes>argv[0]).lower()
        cdef tuple entry = self.table.get(name)
        cdef int route, arity
        cdef Py_ssize_t argc = len(argv)
        if entry is None:
            if name == b"quit":
                client.reply(OK)
                client.close_after_reply()
                return
            self.unknown_command(client, argv)
            return
        route = entry[0]
        arity = entry[1]
        self.calls[name] = self.calls.get(name, 0) + 1
        if (arity > 0 and argc != arity) or (arity < 0 and argc < -arity):
            self.arity_error(client, entry[2])
            return
        client.last_cmd = name
        if route == ROUTE_QUEUE:
            self.forward(client, queue_slot(<bytes>argv[1]) % self.nworkers, argv)
        elif route == ROUTE_ID:
            if not valid_id(<bytes>argv[1]):
                client.reply(BADID)
            else:
                self.forward(client, self.worker_of_id(<bytes>argv[1]), argv)
        elif route == ROUTE_IDS:
            self.route_ids(client, argv)
        elif route == ROUTE_GETJOB:
            self.getjob(client, argv)
        elif route == ROUTE_ALL:
            self.all_workers_command(client, name, argv)
        else:
            self.local_command(client, name, argv)

    cpdef int worker_of_id(self, bytes jid):
        cdef int slot = id_slot(jid)
        return (slot if slot >= 0 else 0) % self.nworkers

    cpdef deliver(self, bytes payload):
        """One message from a worker: a list of [reqid, reply, ...] entries."""
        pending = self.pending
        cdef list reps = self.unpackb(payload, use_list=True)
        cdef list rep
        for rep in reps:
            p = pending.pop(rep[0], None)
            if p is None:
                continue
            if type(p) is Slot:
                fill_slot(<Slot>p, <bytes>rep[1])
            else:
                p(rep)

    cpdef flush_replies(self):
        cdef Client c
        if self.dirty:
            dirty = self.dirty
            self.dirty = []
            for c in dirty:
                c.flush()
