"""The front-end process: RESP clients in, per-worker batches out, replies back in order.

Per event-loop tick every request bound for worker k is appended to one outbox and sent as
one ZeroMQ message when the tick ends; replies come back already encoded as RESP and are
copied to clients. Each client keeps a FIFO of reply slots, so pipelined commands answered
by different workers still reach it in request order.
"""
import heapq
import logging
import os
import time

from disque import commands as C
from disque import info as info_mod
from disque._fast import resp
from disque._fast.frontcore import Client, Core
from disque._fast.jobid import queue_slot, valid_id
from disque.workers import protocol as P

log = logging.getLogger("disque.frontend")

BADID = b"-BADID Invalid Job ID format.\r\n"
SYNTAX_ERROR = b"-ERR syntax error\r\n"
NULL_ARRAY = resp.NULL_ARRAY
parse_int = resp.parse_int


def arity_error(name):
    return b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()


class Gather:
    """A command split over several workers; `merge` builds the client reply."""
    __slots__ = ("client", "slot", "left", "parts", "merge")

    def __init__(self, client, slot, n, merge):
        self.client = client
        self.slot = slot
        self.left = n
        self.parts = [None] * n
        self.merge = merge


class MultiGet:
    """A GETJOB whose queues live in several workers (ARCHITECTURE: blocking GETJOB).

    Every involved worker first tries to fetch and, when it has nothing, registers the
    client as a proxy waiter. The first job offered wins; later offers are returned to
    their worker, so no job is given twice or lost.
    """
    __slots__ = ("client", "slot", "count", "nohang", "reqids", "order", "answered",
                 "jobs", "done", "blocked", "timer", "workers", "unblocked")

    def __init__(self, client, slot, count, nohang, order):
        self.client = client
        self.slot = slot
        self.count = count
        self.nohang = nohang
        self.order = order          # queue name -> position in the GETJOB arguments
        self.reqids = {}            # reqid -> worker index
        self.answered = set()
        self.unblocked = set()      # reqids whose worker was told to drop its waiter
        self.jobs = []              # (position, encoded, id, worker)
        self.done = False
        self.blocked = False
        self.timer = None
        self.workers = []


class Frontend(Core):
    """The Python half of the front-end: everything off the per-command hot path."""

    def __init__(self, cfg, node_id, links, nworkers, loop):
        super().__init__(links, nworkers, loop, C.BY_BYTES)
        self.cfg = cfg
        self.node_id = node_id
        self.maxclients = getattr(cfg, "maxclients", 10000)
        self.eager_batch = int(os.environ.get("DISQUE_EAGER_BATCH", "16"))
        self.started = time.time()
        self.stats = {"total_connections_received": 0, "rejected_connections": 0}
        self.multigets_blocked = 0
        self.multiget_deadlines = []     # heap of (monotonic deadline, seq, MultiGet)
        self.multiget_seq = 0
        self.shutdown_cb = None
        self.local = {
            b"ping": self.cmd_ping, b"hello": self.cmd_hello, b"info": self.cmd_info,
            b"time": self.cmd_time, b"command": self.cmd_command, b"debug": self.cmd_debug,
            b"shutdown": self.cmd_shutdown, b"config": self.cmd_config,
            b"loadjob": self.cmd_loadjob,
        }

    def new_client(self):
        return Client(self)

    # ---- connections --------------------------------------------------------------------

    def client_connected(self, client):
        self.next_client_id += 1
        client.id = self.next_client_id
        peer = client.transport.get_extra_info("peername")
        client.addr = "%s:%s" % (peer[0], peer[1]) if isinstance(peer, tuple) else str(peer)
        self.stats["total_connections_received"] += 1
        if len(self.clients) >= self.maxclients:
            self.stats["rejected_connections"] += 1
            client.transport.write(b"-ERR max number of clients reached\r\n")
            client.transport.close()
            client.closed = True
            return
        self.clients[client.id] = client

    def client_gone(self, client):
        self.clients.pop(client.id, None)
        if client.waiting is not None:
            self.cancel_wait(client)

    def client_overflow(self, client):
        log.warning("Closing client %s: query buffer over 1 GiB", client.addr)
        client.transport.abort()

    def control_all(self, name, arg, done):
        """Ask every worker; `done(list_of_values)` runs when all answered."""
        results = [None] * self.nworkers
        left = [self.nworkers]

        def make(w):
            def got(rep):
                results[w] = rep[1]
                left[0] -= 1
                if left[0] == 0:
                    done(results)
            return got

        for w in range(self.nworkers):
            reqid = self.new_reqid()
            self.pending[reqid] = make(w)
            self.send(w, [P.CONTROL, reqid, name, arg])

    # ---- dispatch -----------------------------------------------------------------------

    def unknown_command(self, client, argv):
        client.reply(b"-ERR unknown command '%s'\r\n" % argv[0])

    def arity_error(self, client, cmd):
        client.reply(arity_error(cmd.name))

    def all_workers_command(self, client, name, argv):
        """Commands that every worker answers and the front-end merges (QSCAN, JSCAN)."""
        client.reply(b"-ERR %s is not available in this version\r\n" % name.upper())

    def local_command(self, client, name, argv):
        handler = self.local.get(name)
        if handler is None:
            client.reply(b"-ERR %s is not available in this version\r\n" % name.upper())
        else:
            handler(client, argv)

    def route_ids(self, client, argv):
        ids = argv[1:]
        for jid in ids:
            if not valid_id(jid):
                client.reply(BADID)
                return
        if self.nworkers == 1 or not ids:
            self.forward(client, 0, argv)
            return
        groups = {}
        for jid in ids:
            groups.setdefault(self.worker_of_id(jid), []).append(jid)
        if len(groups) == 1:
            self.forward(client, next(iter(groups)), argv)
            return
        g = Gather(client, client.slot(), len(groups), None)
        for n, (w, part) in enumerate(groups.items()):
            reqid = self.new_reqid()
            self.pending[reqid] = self.gather_part(g, n)
            self.send(w, [P.CMD, reqid, [argv[0]] + part])

    def gather_part(self, g, n):
        def got(rep):
            g.parts[n] = rep[1]
            g.left -= 1
            if g.left == 0:
                total = 0
                for part in g.parts:
                    if part[:1] != b":":
                        g.slot.fill(part)
                        return
                    total += int(part[1:-2])
                g.slot.fill(b":%d\r\n" % total)
        return got

    # ---- GETJOB -------------------------------------------------------------------------

    def getjob(self, client, argv):
        nohang = False
        withcounters = False
        timeout = 0
        count = 1
        queues = None
        i, argc = 1, len(argv)
        while i < argc:
            opt = argv[i].lower()
            has_value = i + 1 < argc
            if opt == b"nohang":
                nohang = True
            elif opt == b"withcounters":
                withcounters = True
            elif opt == b"timeout" and has_value:
                timeout = parse_int(argv[i + 1])
                if timeout is None:
                    client.reply(b"-ERR timeout is not an integer or out of range\r\n")
                    return
                if timeout < 0:
                    client.reply(b"-ERR timeout is negative\r\n")
                    return
                i += 1
            elif opt == b"count" and has_value:
                count = parse_int(argv[i + 1])
                if count is None or count <= 0:
                    client.reply(b"-ERR COUNT must be a number greater than zero\r\n")
                    return
                i += 1
            elif opt == b"from" and has_value:
                queues = argv[i + 1:]
                break
            else:
                client.reply(SYNTAX_ERROR)
                return
            i += 1
        if not queues:
            client.reply(SYNTAX_ERROR)
            return
        n = self.nworkers
        if n == 1:
            owners = None
        else:
            owners = {}
            for q in queues:
                owners.setdefault(queue_slot(q) % n, []).append(q)
        if owners is None or len(owners) == 1:
            w = 0 if owners is None else next(iter(owners))
            reqid = self.new_reqid()
            self.pending[reqid] = self.getjob_done(client, client.slot(), w)
            if not nohang:
                client.waiting = (reqid, w)
            self.send(w, [P.GETJOB, reqid, client.id, count, nohang, withcounters, timeout, False, queues])
            return
        order = {}
        for pos, q in enumerate(queues):
            order.setdefault(q, pos)
        m = MultiGet(client, client.slot(), count, nohang, order)
        if not nohang:
            client.waiting = m
        for w, part in owners.items():
            reqid = self.new_reqid()
            m.reqids[reqid] = w
            m.workers.append(w)
            self.pending[reqid] = self.multiget_reply(m, reqid, w)
            self.send(w, [P.GETJOB, reqid, client.id, count, nohang, withcounters, 0, True, part])
        if timeout and not nohang:
            m.timer = time.monotonic() + timeout / 1000.0
            self.multiget_seq += 1
            heapq.heappush(self.multiget_deadlines, (m.timer, self.multiget_seq, m))

    def getjob_done(self, client, slot, w):
        def got(rep):
            if client.closed:
                if rep[2]:
                    self.send(w, [P.RETURN, rep[2]])    # the consumer vanished: not delivered
                return
            slot.fill(rep[1])
            if client.waiting is not None:
                client.resume()
        return got

    def multiget_reply(self, m, reqid, w):
        def got(rep):
            jobs, ids = rep[1], rep[2]
            if jobs == 0:
                return              # the worker's last word after an UNBLOCK
            if m.done:
                # too late for this client: give the jobs back and wait for the UNBLOCK ack
                if ids:
                    self.send(w, [P.RETURN, ids])
                if reqid in m.unblocked:
                    self.pending[reqid] = got
                return
            if jobs is None:
                # the worker dropped its waiters (DEBUG FLUSHALL): the client gets a null reply
                self.multiget_finish(m)
                return
            # a worker sweeps its queues one job per queue per round: (round, position)
            # is the place each job would have in one sweep over all the queues
            rounds = {}
            for enc, jid in zip(jobs, ids or ()):
                pos = m.order.get(self.queue_of_encoded(enc), 0)
                rnd = rounds.get(pos, 0)
                rounds[pos] = rnd + 1
                m.jobs.append(((rnd, pos), enc, jid, w))
            if reqid not in m.answered:
                m.answered.add(reqid)
                if not jobs and not m.nohang:
                    self.pending[reqid] = got   # the worker holds a waiter: an offer may follow
            if len(m.answered) < len(m.reqids):
                return
            if m.jobs or m.nohang:
                self.multiget_finish(m)
            elif not m.blocked:
                m.blocked = True
                self.multigets_blocked += 1
        return got

    @staticmethod
    def queue_of_encoded(enc):
        # "*3\r\n$<len>\r\n<queue>\r\n..." or "*7..." : the queue is the first bulk
        start = enc.index(b"\r\n", 4) + 2
        n = int(enc[5:start - 2])
        return enc[start:start + n]

    def multiget_finish(self, m):
        m.done = True
        if m.blocked:
            self.multigets_blocked -= 1
        for reqid, w in m.reqids.items():
            if reqid in self.pending:
                # this worker may still hold a waiter: drop it; its ack (and any offer
                # already on the way, which is returned) still reaches `got`
                m.unblocked.add(reqid)
                self.send(w, [P.UNBLOCK, m.client.id, reqid])
        client = m.client
        jobs = sorted(m.jobs, key=lambda j: j[0])
        limit = m.count if not m.blocked else 1
        give, back = jobs[:limit], jobs[limit:]
        if client.closed:
            back = jobs
            give = []
        for _, _, jid, w in back:
            self.send(w, [P.RETURN, [jid]])
        if not client.closed:
            if give:
                m.slot.fill(b"*%d\r\n" % len(give) + b"".join(j[1] for j in give))
            else:
                m.slot.fill(NULL_ARRAY)
            if client.waiting is m:
                client.resume()

    def cron(self):
        """Every CRON_MS (timerfd tick): time out cross-worker GETJOBs."""
        now = time.monotonic()
        deadlines = self.multiget_deadlines
        expired = False
        while deadlines and deadlines[0][0] <= now:
            m = heapq.heappop(deadlines)[2]
            if not m.done:
                self.multiget_finish(m)
                expired = True
        if expired:
            self.flush_replies()
        if len(deadlines) > 1024:
            # GETJOBs that ended early leave their entry behind: drop them in bulk
            live = [e for e in deadlines if not e[2].done]
            if len(live) * 2 < len(deadlines):
                heapq.heapify(live)
                self.multiget_deadlines = live

    def cancel_wait(self, client):
        """The client vanished while blocked: forget it everywhere; late jobs go back."""
        w = client.waiting
        client.waiting = None
        if isinstance(w, MultiGet):
            if not w.done:
                self.multiget_finish(w)
        else:
            # the worker answers the UNBLOCK with a null reply, or a job already on its
            # way reaches getjob_done, which sees the closed client and returns it
            self.send(w[1], [P.UNBLOCK, client.id, w[0]])

    # ---- local commands --------------------------------------------------------------------

    def cmd_ping(self, client, argv):
        if len(argv) == 1:
            client.reply(b"+PONG\r\n")
        elif len(argv) == 2:
            client.reply(resp.bulk(argv[1]))
        else:
            client.reply(arity_error("ping"))

    def my_ip(self):
        binds = getattr(self.cfg, "bind", None) or []
        for b in binds:
            if b not in ("0.0.0.0", "::", "*"):
                return b.encode()
        return b""

    def cmd_hello(self, client, argv):
        me = self.node_id
        node = resp.bulk_array([me, self.my_ip(), str(self.cfg.port).encode(), b"1"])
        client.reply(b"*3\r\n:1\r\n" + resp.bulk(me) + node)

    def cmd_time(self, client, argv):
        t = time.time()
        sec = int(t)
        client.reply(resp.bulk_array([str(sec).encode(), str(int((t - sec) * 1e6)).encode()]))

    def cmd_command(self, client, argv):
        if len(argv) == 1:
            items = [self.command_info(c) for c in C.COMMANDS.values()]
            client.reply(b"*%d\r\n" % len(items) + b"".join(items))
            return
        sub = argv[1].lower()
        if sub == b"count" and len(argv) == 2:
            client.reply(b":%d\r\n" % len(C.COMMANDS))
        elif sub == b"info":
            items = []
            for n in argv[2:]:
                c = C.BY_BYTES.get(n.lower())
                items.append(self.command_info(c) if c else resp.NULL_BULK)
            client.reply(b"*%d\r\n" % len(items) + b"".join(items))
        else:
            client.reply(b"-ERR Unknown subcommand or wrong number of arguments.\r\n")

    @staticmethod
    def command_info(c):
        flags = [f.encode() for f in c.flag_words]
        return (b"*6\r\n" + resp.bulk(c.name.encode()) + b":%d\r\n" % c.arity
                + b"*%d\r\n" % len(flags) + b"".join(b"+%s\r\n" % f for f in flags)
                + b":0\r\n:0\r\n:0\r\n")

    def cmd_loadjob(self, client, argv):
        client.reply(b"-ERR LOADJOB is a special command only processed from AOF\r\n")

    def cmd_debug(self, client, argv):
        sub = argv[1].lower()
        if sub == b"flushall" and len(argv) == 2:
            s = client.slot()
            self.control_all("flushall", None, lambda res: s.fill(resp.OK))
        elif sub == b"sleep" and len(argv) == 3:
            try:
                secs = float(argv[2])
            except ValueError:
                secs = 0.0
            time.sleep(max(0.0, secs))
            client.reply(resp.OK)
        elif sub == b"error" and len(argv) == 3:
            client.reply(b"-" + argv[2].replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n")
        else:
            client.reply(b"-ERR Unknown DEBUG subcommand or wrong number of arguments for '%s'\r\n"
                         % argv[1])

    def cmd_shutdown(self, client, argv):
        if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"rewrite-aof"):
            client.reply(SYNTAX_ERROR)
            return
        log.warning("User requested shutdown...")
        if self.shutdown_cb:
            self.shutdown_cb()

    def cmd_config(self, client, argv):
        sub = argv[1].lower()
        cfg = self.cfg
        try:
            if sub == b"get" and len(argv) == 3:
                pairs = cfg.config_get(argv[2].decode(errors="replace"))
                flat = []
                for k, v in pairs:
                    flat += [k.encode(), v.encode()]
                client.reply(resp.bulk_array(flat))
            elif sub == b"set" and len(argv) == 4:
                cfg.config_set(argv[2].decode(errors="replace"), argv[3].decode(errors="replace"))
                client.reply(resp.OK)
            elif sub == b"rewrite" and len(argv) == 2:
                cfg.rewrite()
                client.reply(resp.OK)
            elif sub == b"resetstat" and len(argv) == 2:
                for k in self.stats:
                    self.stats[k] = 0
                self.commands_processed = self.net_input_bytes = self.net_output_bytes = 0
                client.reply(resp.OK)
            elif sub in (b"get", b"set", b"rewrite", b"resetstat"):
                client.reply(b"-ERR Wrong number of arguments for CONFIG %s\r\n" % argv[1].upper())
            else:
                client.reply(b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n")
        except Exception as e:   # ConfigError carries the exact message
            msg = str(e).splitlines()[-1] if str(e) else "error"
            client.reply(b"-ERR " + msg.encode() + b"\r\n")

    def cmd_info(self, client, argv):
        if len(argv) > 2:
            client.reply(SYNTAX_ERROR)
            return
        section = argv[1].decode(errors="replace").lower() if len(argv) == 2 else "default"
        s = client.slot()

        def done(workers):
            text = info_mod.render(self, workers, section)
            s.fill(resp.bulk(text.encode()))

        self.control_all("info", None, done)
