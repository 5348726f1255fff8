"""Client connections a worker serves itself (`connection-affinity yes`; docs/design.md
"Connections served by their worker").

The front-end hands a connection over (its socket, over the hand-over channel of
disque/contracts/connection_handover.py) once its commands all went to this worker. From
then on this worker reads, parses, executes and writes that connection's replies with no
process in between: all commands one read brings run before one write, and many
connections share the worker's one epoll loop.

Only the plain case is served here. Anything else goes back to the front-end with the
connection, unexecuted, replies still in order: a command of another worker's queue or job,
a node command (INFO, CONFIG, CLIENT, HELLO, ...), a GETJOB that would block, an ADDJOB on a
node of a cluster (it waits for copies), any error the front-end words (arity, bad ID,
syntax), and a client that reads its replies slower than they come (the front-end buffers
and applies the output limits). The front-end takes every connection back (RECALL) when a
node-wide state needs it: MONITOR, CLIENT PAUSE, requirepass, OOM / MISCONF / LOADING, cluster
LEAVING, queues held off their slot.
"""
import logging
import select
import socket
import time

from disque import replies as R
from disque._fast.frontcore import resp3 as to_resp3
from disque._fast.jobid import id_slot, queue_slot, valid_id
from disque._fast.resp import NULL_ARRAY, ProtocolError, QueryBufferOverflow, RequestParser, bulk
from disque.contracts import connection_handover as H
from disque.contracts.getjob_options import parse_getjob
from disque.workers.peer_links import PeerLinks

log = logging.getLogger("disque.worker")

READ_SIZE = 64 * 1024
EPOLLIN = select.EPOLLIN
EPOLLOUT = select.EPOLLOUT
PONG = R.PONG
ROUTE_QUEUE, ROUTE_ID, ROUTE_IDS = H.ROUTE_QUEUE, H.ROUTE_ID, H.ROUTE_IDS
ROUTE_GETJOB, ROUTE_PING = H.ROUTE_GETJOB, H.ROUTE_PING
REQUEUES = (b"nack", b"enqueue")     # commands that may dead-letter a job


class Forwarded:
    """The place of a reply another worker is producing (PeerLinks.forward)."""
    __slots__ = ("data",)

    def __init__(self):
        self.data = None


class ServedClient:
    __slots__ = ("id", "sock", "fd", "parser", "out", "resp3", "last_cmd", "last_io",
                 "waiting", "back")

    def __init__(self, cid, sock, resp3):
        self.id = cid
        self.sock = sock
        self.fd = sock.fileno()
        self.parser = RequestParser()
        self.out = []
        self.resp3 = resp3
        self.last_cmd = b""
        self.last_io = time.monotonic()
        self.waiting = 0            # Forwarded replies still to come
        self.back = None            # (reason, input) of a hand-back waiting for them


class ServedClients:
    """Offers: wait (the worker loop's poll), serve_ready, flush (after the AOF is written),
    cron, totals, configure, close_all. Needs the shard (execute, getjob, cluster_size,
    persistence.aof_flush, out) and the hand-over channel."""

    def __init__(self, index, nworkers, shard, channel, link_fd, timer_fd, peers=None):
        self.index = index
        self.nworkers = nworkers
        self.shard = shard
        self.channel = channel
        self.link_fd = link_fd
        self.timer_fd = timer_fd
        self.ep = select.epoll()
        self.ep.register(link_fd, EPOLLIN)
        self.ep.register(timer_fd, EPOLLIN)
        self.ep.register(channel.fileno(), EPOLLIN)
        self.clients = {}           # fd -> ServedClient
        self.by_id = {}
        self.table = {}
        self.timeout = 0
        self.slowlog_us = -1
        self.ready = []             # client fds readable after the last wait
        self.channel_ready = False
        self.dirty = []             # clients with replies to write
        self.commands = 0
        self.net_in = 0
        self.net_out = 0
        self.calls = {}
        self.reported = None
        self.slow = []
        self.names = []             # real names of the commands of the read being served
        # the other workers, for the commands of their queues and jobs (None: hand back)
        self.peers = None
        self.peer_ready = []
        if peers is not None:
            self.peers = PeerLinks(index, peers, self.ep, self.peer_execute, self.peer_answered)

    # ---- the worker loop's poll ------------------------------------------------------

    def wait(self, block):
        """(link readable, timer fired); readable clients and channel are kept for
        serve_ready."""
        link_ready = ticked = False
        ready = self.ready
        peers = self.peers
        for fd, ev in self.ep.poll(-1 if block else 0):
            if fd == self.link_fd:
                link_ready = True
            elif fd == self.timer_fd:
                ticked = True
            elif fd in self.clients:
                ready.append(fd)
            elif peers is not None and fd in peers.by_fd:
                if ev & EPOLLOUT:
                    peers.writable(fd)
                if ev & ~EPOLLOUT:
                    self.peer_ready.append(fd)
            else:
                self.channel_ready = True
        return link_ready, ticked

    def serve_ready(self):
        if self.channel_ready:
            self.channel_ready = False
            self.on_channel()
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

    # ---- the hand-over channel ---------------------------------------------------------

    def on_channel(self):
        for msg, fd in self.channel.receive():
            kind = msg[0]
            if kind == H.HANDOFF:
                if fd is not None:
                    self.adopt(msg[1], fd, msg[2], msg[3])
            elif kind == H.RECALL:
                for c in list(self.clients.values()):
                    self.hand_back(c, H.BACK_RECALL)
            elif kind == H.KILL:
                c = self.by_id.get(msg[1])
                if c is not None:
                    self.drop(c, report=False)
            elif kind == H.PEER and fd is not None:
                sock = socket.socket(fileno=fd)
                if self.peers is not None:
                    self.peers.replace(msg[1], sock)
                else:
                    sock.close()

    def adopt(self, cid, fd, resp3, unparsed):
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        c = ServedClient(cid, sock, resp3)
        self.clients[c.fd] = c
        self.by_id[cid] = c
        self.ep.register(c.fd, EPOLLIN)
        if unparsed:
            c.parser.feed(unparsed)
            self.run_input(c)
        # input that arrived while the socket travelled is already waiting in it
        if self.by_id.get(cid) is c and c.back is None:
            self.read(c)

    def hand_back(self, c, reason, pending=b""):
        """Give the connection back: unwritten replies first, then the unserved input.
        While replies of other workers are still to come it stops reading and waits."""
        if c.back is not None:
            return                  # already on its way back
        if c.waiting:
            c.back = (reason, pending + c.parser.take_unparsed())
            try:
                self.ep.unregister(c.fd)
            except (OSError, ValueError):
                pass
            return
        self.send_slow()
        self.forget(c)
        unsent = b"".join([x if type(x) is bytes else x.data for x in c.out])
        c.out = []
        if unsent:
            self.shard.persistence.aof_flush()   # no reply leaves before its AOF record
        pending += c.parser.take_unparsed()
        try:
            self.channel.send([H.HANDBACK, c.id, unsent, pending, c.last_cmd, reason,
                               self.totals()], c.fd)
        finally:
            c.sock.close()

    def forget(self, c):
        self.clients.pop(c.fd, None)
        self.by_id.pop(c.id, None)
        try:
            self.ep.unregister(c.fd)
        except (OSError, ValueError):
            pass

    def drop(self, c, report=True):
        """Close the connection (peer gone, CLIENT KILL, idle timeout)."""
        self.forget(c)
        c.out = []
        c.sock.close()
        if report:
            self.channel.send([H.GONE, c.id])

    # ---- input ---------------------------------------------------------------------------

    def read(self, c):
        try:
            data = c.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.drop(c)
            return
        self.net_in += len(data)
        c.last_io = time.monotonic()
        try:
            c.parser.feed(data)
        except QueryBufferOverflow:
            log.warning("Closing client id=%d: query buffer over 1 GiB", c.id)
            self.drop(c)
            return
        self.run_input(c)

    def run_input(self, c):
        # commands() returns what came before a protocol error and raises on the next
        # call, so it is called until it has nothing more, as the front-end does
        while c.back is None and self.by_id.get(c.id) is c:
            try:
                cmds = c.parser.commands()
            except ProtocolError:
                # the front-end words the error and closes the connection after the replies
                self.hand_back(c, H.BACK_COMMAND)
                return
            if not cmds:
                return
            self.run_commands(c, cmds)

    def run_commands(self, c, cmds):
        # The commands of one read are timed together, from the read to their replies
        # (which leave together), as the front-end times them: two clock readings per
        # read, each command counted with its share (commandstats, latency histogram)
        t0 = time.monotonic_ns()
        out = c.out
        done = 0
        for argv in cmds:
            reply = self.execute(c, argv)
            if reply is None:
                self.account(c, cmds[:done], t0)
                self.hand_back(c, H.BACK_COMMAND, H.encode_commands(cmds[done:]))
                return
            if c.resp3 and type(reply) is bytes:
                reply = to_resp3(reply)
            out.append(reply)
            done += 1
        self.account(c, cmds, t0)
        if out:
            self.dirty.append(c)

    def account(self, c, cmds, t0):
        names = self.names
        if not names:
            return
        self.names = []
        d = time.monotonic_ns() - t0
        n = len(names)
        self.shard.account_batch(names, d)
        calls = self.calls
        for name in names:
            calls[name] = calls.get(name, 0) + 1
        self.commands += n
        c.last_cmd = names[-1]
        if self.slowlog_us >= 0 and d // 1000 >= self.slowlog_us:
            self.slow.extend([c.id, argv, d // 1000] for argv in cmds)

    def execute(self, c, argv):
        """The reply of a command this worker serves alone, or None to hand it back."""
        typed = argv[0].lower()
        entry = self.table.get(typed)
        if entry is None:
            return None
        name, route, arity = entry
        argc = len(argv)
        if (arity > 0 and argc != arity) or (arity < 0 and argc < -arity):
            return None
        shard = self.shard
        me, n = self.index, self.nworkers
        if route == ROUTE_QUEUE:
            if name == b"addjob" and shard.cluster_size > 1:
                return None             # it waits for copies: the front-end's path
            w = queue_slot(argv[1]) % n
            if w != me:
                return self.forward(c, w, name, argv)
        elif route == ROUTE_ID:
            if not valid_id(argv[1]):
                return None
            w = id_slot(argv[1]) % n
            if w != me:
                return self.forward(c, w, name, argv)
        elif route == ROUTE_IDS:
            if argc < 2 or (name == b"nack" and argc > 3 and argv[-2].lower() == b"delay"):
                return None
            w = -1
            for jid in argv[1:]:
                if not valid_id(jid):
                    return None
                v = id_slot(jid) % n
                if w < 0:
                    w = v
                elif v != w:
                    return None         # several workers: the front-end splits it
            if name in REQUEUES and self.may_dead_letter(w, argv):
                return None
            if w != me:
                return self.forward(c, w, name, argv)
        elif route == ROUTE_GETJOB:
            return self.getjob(c, argv)
        elif route == ROUTE_PING:
            if argc > 2:
                return None
            self.names.append(b"ping")
            return PONG if argc == 1 else bulk(argv[1])
        if typed != name:
            argv[0] = name          # renamed: the shard knows a command by its real name
        # looked up each time: while AOF writes fail the write commands' handlers answer
        # -MISCONF (disque/workers/persistence.py swaps them)
        reply = shard.run_handler(name, shard.handlers[name], argv)
        if reply is None:                       # cannot happen off a cluster: say so
            log.error("Served %s waits for copies: answered with an error", name)
            reply = R.INTERNAL_ERROR
        self.names.append(name)
        return reply

    def may_dead_letter(self, w, argv):
        """NACK / ENQUEUE that may move a job to a dead-letter queue, which can put that
        queue on a worker other than its slot's: the front-end must learn it (QUEUE_ELSEWHERE
        arrives with the reply on its path) before this client's next QLEN or GETJOB.
        Another worker's jobs cannot be checked from here: those go back too."""
        if w != self.index:
            return True
        jobs = self.shard.jobs
        for jid in argv[1:]:
            job = jobs.get(jid)
            if job is not None and job.ext is not None:
                return True
        return False

    # ---- commands of the other workers (disque/workers/peer_links.py) ---------------------

    def forward(self, c, w, name, argv):
        """Run argv on worker w; its reply takes this place in c's replies."""
        if self.peers is None:
            return None
        slot = Forwarded()
        argv[0] = name                  # the real name (rename-command)
        if not self.peers.forward(w, argv, (c, slot)):
            return None                 # no link to w now (it is being restarted)
        c.waiting += 1
        # counted as served here (commandstats calls); the worker that runs it counts its
        # time and its call in its own figures (stats log, metrics)
        self.calls[name] = self.calls.get(name, 0) + 1
        self.commands += 1
        c.last_cmd = name
        return slot

    def peer_answered(self, waiter, reply):
        c, slot = waiter
        slot.data = to_resp3(reply) if c.resp3 else reply
        c.waiting -= 1
        if self.clients.get(c.fd) is c:
            self.dirty.append(c)

    def peer_execute(self, argv):
        """A command another worker forwards: its reply (sent after the AOF write)."""
        shard = self.shard
        if argv[0] == b"getjob":        # GETJOB ... NOHANG of our queues
            error, o = parse_getjob(argv)
            if error is not None:
                return error
            reply, _ids = shard.getjob(0, 0, o.count, True, o.withcounters, 0, False, o.queues)
            return reply if reply is not None else NULL_ARRAY
        reply = shard.execute(0, argv)
        return reply if reply is not None else R.INTERNAL_ERROR

    def getjob(self, c, argv):
        """GETJOB whose queues are all here, answered now: a GETJOB that would block (no
        job, no NOHANG) or that the front-end must widen goes back."""
        shard = self.shard
        if shard.cluster_size > 1:
            return None
        error, o = parse_getjob(argv)
        if error is not None or o.prefix is not None:
            return None
        n, me = self.nworkers, self.index
        w = -1
        for q in o.queues:
            v = queue_slot(q) % n
            if w < 0:
                w = v
            elif v != w:
                return None             # several workers: the front-end merges them
        if w != me:
            # another worker's queues: only a GETJOB that cannot block goes there directly
            return self.forward(c, w, b"getjob", argv) if o.nohang else None
        if not o.nohang and not shard.any_ready(o.queues):
            return None
        reply, _ids = shard.consumers.fetch_or_block(0, c.id, o.count, True, o.withcounters, 0,
                                                     False, o.queues)
        self.names.append(b"getjob")
        return reply if reply is not None else NULL_ARRAY

    # ---- output --------------------------------------------------------------------------

    def flush(self):
        """Write every connection's replies (the worker loop calls this after the AOF)."""
        if self.peers is not None:
            self.peers.send_all()   # requests to, and replies for, the other workers
        self.send_slow()        # SLOWLOG shows them before their replies are read
        dirty, self.dirty = self.dirty, []
        clients = self.clients
        for c in dirty:
            if clients.get(c.fd) is not c:
                continue
            out = c.out
            if not out:
                self.finish_back(c)
                continue
            # the replies ready in order; one of another worker still to come stops it
            ready = 0
            for x in out:
                if type(x) is not bytes:
                    if x.data is None:
                        break
                    out[ready] = x.data
                ready += 1
            if not ready:
                continue
            data = out[0] if ready == 1 else b"".join(out[:ready])
            del out[:ready]
            try:
                n = c.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self.drop(c)
                continue
            self.net_out += n
            if n < len(data):
                out.insert(0, data[n:])
                if c.back is None:
                    c.back = (H.BACK_SLOW_READER, b"")
                    if c.waiting:
                        try:
                            self.ep.unregister(c.fd)
                        except (OSError, ValueError):
                            pass
            else:
                c.last_io = time.monotonic()
            self.finish_back(c)

    def finish_back(self, c):
        """A hand-back that waited for other workers' replies: go now if none is left."""
        if c.back is not None and not c.waiting:
            reason, pending = c.back
            c.back = None
            self.hand_back(c, reason, pending)

    # ---- cron, configuration, figures ----------------------------------------------------

    def cron(self):
        """Every 100 ms: idle `timeout`, the totals and slow commands for the front-end."""
        if self.timeout > 0 and self.clients:
            limit = time.monotonic() - self.timeout
            for c in list(self.clients.values()):
                if c.last_io < limit:
                    log.log(15, "Closing idle client id=%d", c.id)
                    self.drop(c)
        self.report()

    def send_slow(self):
        if self.slow:
            slow, self.slow = self.slow, []
            self.channel.send([H.SLOWLOG, slow])

    def report(self):
        out = self.shard.out
        key = (self.commands, self.net_in, self.net_out)
        if key != self.reported:
            self.reported = key
            out.append([H.SERVED_REQID, self.index, self.totals()])

    def totals(self):
        return {"commands": self.commands, "net_in": self.net_in, "net_out": self.net_out,
                "calls": {k.decode(): v for k, v in self.calls.items()},
                "connections": len(self.clients)}

    def configure(self, conf):
        self.timeout = conf["timeout"]
        self.slowlog_us = conf["slowlog"]
        handlers = self.shard.handlers
        self.table = {typed: (real, route, arity) for typed, real, route, arity in conf["table"]
                      if real in handlers or route in (H.ROUTE_PING, H.ROUTE_GETJOB)}

    def close_all(self):
        """The worker stops: what was executed is written (best effort), then closed."""
        self.flush()
        for c in list(self.clients.values()):
            if c.out:
                try:
                    c.sock.setblocking(True)
                    c.sock.settimeout(1.0)
                    c.sock.sendall(b"".join(c.out))
                except OSError:
                    pass
            self.forget(c)
            c.sock.close()
        self.ep.close()
