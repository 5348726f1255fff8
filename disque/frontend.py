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
from socket import AF_UNIX

from disque import replies as R
from disque import commands as C
from disque import statslog
from disque.admin import AdminMixin, one_line
from disque.aof_front import AofFrontMixin
from disque.cluster_frontend import ClusterFrontendMixin
from disque.queues_elsewhere import QueuesElsewhereMixin
from disque import info as info_mod
from disque import memstat
from disque.info_snapshot import NEUTRAL_LOCAL, InfoSnapshot
from disque._fast import resp
from disque._fast.frontcore import Client, Core
from disque._fast.jobid import queue_slot, valid_id
from disque.contracts import worker_link as P

log = logging.getLogger("disque.frontend")

BADID = R.BADID
SYNTAX_ERROR = R.SYNTAX_ERROR
NULL_ARRAY = resp.NULL_ARRAY
parse_int = resp.parse_int


def arity_error(name):
    return b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()


class Gather:
    """A multi-ID command split over several workers; the integer replies are summed."""
    __slots__ = ("client", "slot", "left", "parts")

    def __init__(self, client, slot, n):
        self.client = client
        self.slot = slot
        self.left = n
        self.parts = [None] * n


class MultiGet:
    """A GETJOB whose queues live in several workers (ARCHITECTURE: blocking GETJOB).

    Every involved worker first tries to fetch and, when it has nothing, registers the
    client as a proxy waiter. The first job offered wins; later offers are returned to
    their worker, so no job is given twice or lost.
    """
    __slots__ = ("client", "slot", "count", "nohang", "reqids", "order", "answered",
                 "jobs", "done", "blocked", "timer", "workers", "unblocked", "error",
                 "withcounters")

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
        self.error = None           # -LEAVING from a worker, given when no job comes
        self.withcounters = False


class Scan:
    """One QSCAN/JSCAN call in progress (Frontend.all_workers_command)."""
    __slots__ = ("kind", "cursor", "count", "steps", "opts", "queue", "only", "w", "low",
                 "bits", "epoch", "slot", "found", "parts")

    def __init__(self):
        self.queue = None
        self.only = None
        self.found = 0
        self.parts = []


SCAN_STATES = {b"wait-repl": 0, b"active": 1, b"queued": 2, b"acked": 3}
NOT_INTEGER = R.NOT_INTEGER
ULONG_MAX = (1 << 64) - 1
SCAN_LIMIT = 1 << 62
SCAN_EPOCHS = 4096      # QSCAN/JSCAN cursors carry the second the scan began, mod this


def parse_scan_cursor(arg):
    """C strtoul base 10 with the whole word consumed, no leading space (upstream's
    parseScanCursorOrReply): '' is 0, a leading '-' wraps around. None when invalid."""
    if arg[:1].isspace():
        return None
    neg = arg[:1] == b"-"
    digits = arg[1:] if arg[:1] in (b"+", b"-") else arg
    if not digits:
        return 0 if not arg else None
    if not digits.isdigit() or not digits.isascii():
        return None
    v = int(digits)
    if v > ULONG_MAX:
        return None
    return (-v) & ULONG_MAX if neg else v


def parse_scan(jscan, argv):
    """QSCAN/JSCAN options, left to right (SPEC 3.11): a Scan, or the error reply."""
    scan = Scan()
    cursor = None
    count = 100
    busyloop = False
    minlen = maxlen = importrate = -1
    states = 0
    reply_all = False
    i, argc = 1, len(argv)
    while i < argc:
        opt = argv[i].lower()
        has_value = i + 1 < argc
        if opt == b"count" and has_value:
            count = parse_int(argv[i + 1])
            if count is None:
                return NOT_INTEGER
            i += 1
        elif opt == b"busyloop":
            busyloop = True
        elif not jscan and opt in (b"minlen", b"maxlen", b"importrate") and has_value:
            v = parse_int(argv[i + 1])
            if v is None:
                return NOT_INTEGER
            if opt == b"minlen":
                minlen = v
            elif opt == b"maxlen":
                maxlen = v
            else:
                importrate = v
            i += 1
        elif jscan and opt == b"queue" and has_value:
            scan.queue = argv[i + 1]
            i += 1
        elif jscan and opt == b"state" and has_value:
            state = SCAN_STATES.get(argv[i + 1].lower())
            if state is None:
                return b"-ERR Invalid job state name\r\n"
            states |= 1 << state
            i += 1
        elif jscan and opt == b"reply" and has_value:
            kind = argv[i + 1].lower()
            if kind == b"id":
                reply_all = False
            elif kind == b"all":
                reply_all = True
            else:
                return b"-ERR Invalid REPLY type, try ID or ALL\r\n"
            i += 1
        else:
            if cursor is not None:
                return SYNTAX_ERROR
            cursor = parse_scan_cursor(argv[i])
            if cursor is None:
                return b"-ERR invalid cursor or option name\r\n"
        i += 1
    scan.cursor = cursor or 0
    # COUNT bounds both the matches (COUNT) and the entries looked at (COUNT*10) per call;
    # -1 = no bound. As upstream: BUSYLOOP or a negative COUNT scan to the end, COUNT 0
    # looks at one entry.
    if busyloop or count < 0:
        scan.count = scan.steps = -1
    elif count == 0:
        scan.count, scan.steps = -1, 1
    else:
        scan.count, scan.steps = min(count, SCAN_LIMIT), min(count * 10, SCAN_LIMIT)
    if jscan:
        scan.kind, scan.opts = "j", [scan.queue, states, reply_all]
    else:
        scan.kind, scan.opts = "q", [minlen, maxlen, importrate]
    return scan


class Frontend(QueuesElsewhereMixin, ClusterFrontendMixin, AdminMixin, AofFrontMixin, Core):
    """The Python half of the front-end: everything off the per-command hot path.

    Admin commands (AUTH, HELLO 2/3, CLIENT, MONITOR, SLOWLOG, LATENCY, COMMAND) and the
    client cron come from `disque.admin.AdminMixin`."""

    def __init__(self, cfg, node_id, links, nworkers, loop):
        # rename-command was validated at startup (server.main)
        super().__init__(links, nworkers, loop, C.command_table(cfg.rename_commands))
        self.cfg = cfg
        self.node_id = node_id
        self.maxclients = getattr(cfg, "maxclients", 10000)
        self.eager_batch = int(os.environ.get("DISQUE_EAGER_BATCH", "16"))
        self.started = time.time()
        self.stats = {"total_connections_received": 0, "rejected_connections": 0}
        self.multigets_blocked = 0
        self.queues_elsewhere = {}      # queue -> workers holding it off its slot (dead letters)
        self.blocked_getjobs = {}       # reqid -> (argv, queues) of GETJOBs blocked on one worker
        self.getjob_restarts = set()    # ... of those, the ones queue_elsewhere takes back
        self.multiget_deadlines = []     # heap of (monotonic deadline, seq, MultiGet)
        self.stats_log = None            # statslog.StatsLog while stats-log-file is set
        self.stats_log_last = 0.0
        self.stats_log_pending = False
        self.multiget_seq = 0
        self.shutdown_cb = None
        self.local_commands = 0          # commands the front-end answered itself
        self.info_snapshot = InfoSnapshot()
        self.unix_addr = None            # "<unixsocket>:0" once that socket listens (server.py)
        self.controls_sent = {}          # reqid -> (name, arg) until answered (send_control)
        self.restarts = None             # disque.worker_restart.WorkerRestarts (server.py)
        self.local = None                # node-level commands: built from disque/commands.py
        self.cron_ticks = 0
        self.admin_init()
        self.local = C.front_handlers(self)

    def new_client(self):
        return Client(self)

    # ---- connections --------------------------------------------------------------------

    def client_connected(self, client):
        self.next_client_id += 1
        client.id = self.next_client_id
        peer = client.transport.get_extra_info("peername")
        sock = client.transport.get_extra_info("socket")
        if isinstance(peer, tuple):
            host = peer[0]
            client.addr = ("[%s]:%s" if ":" in host else "%s:%s") % (host, peer[1])
        elif self.unix_addr is not None and sock is not None and sock.family == AF_UNIX:
            client.addr = self.unix_addr
        else:
            client.addr = str(peer)
        try:
            client.fd = sock.fileno() if sock is not None else -1
        except Exception:
            client.fd = -1
        client.last_interaction = self.now
        if len(self.clients) >= self.maxclients:
            self.stats["rejected_connections"] += 1
            client.transport.write(b"-ERR max number of clients reached\r\n")
            client.transport.close()
            client.closing = client.closed = True
            return
        self.stats["total_connections_received"] += 1
        self.clients[client.id] = client

    def client_gone(self, client):
        self.clients.pop(client.id, None)
        self.admin_client_gone(client)
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
            reqid = self.new_reqid(w)
            self.pending[reqid] = make(w)
            self.send_control(w, reqid, name, arg)

    def send_control(self, w, reqid, name, arg):
        """A control whose answer someone waits for: kept until answered, so it can be sent
        again to the next process of a worker that dies meanwhile (disque.worker_restart)."""
        self.controls_sent[reqid] = (name, arg)
        self.send(w, [P.CONTROL, reqid, name, arg])

    def prune_controls(self):
        pending = self.pending
        self.controls_sent = {r: c for r, c in self.controls_sent.items() if r in pending}

    # ---- dispatch -----------------------------------------------------------------------

    def unknown_command(self, client, argv):
        client.reply(b"-ERR unknown command '%s'\r\n" % one_line(argv[0]))

    def arity_error(self, client, cmd):
        client.reply(arity_error(cmd.name))

    # ---- QSCAN / JSCAN (SPEC 3.11) ------------------------------------------------------

    def all_workers_command(self, client, name, argv):
        """QSCAN / JSCAN over every worker (SPEC 3.11).

        Each worker keeps its queues and jobs in a scan log (`ScanLog`): every element gets
        a sequence number that never changes, so an element present for the whole scan is
        returned once the cursor passes it, whatever is added or removed meanwhile. The
        node-wide cursor is `((low * 4096) + epoch) * N + w`: w is the worker being scanned,
        low the low bits of the sequence number reached in its log (0: its start) and epoch
        the second the scan began, mod 4096. Elements added after the scan began need not
        be returned, so each worker's share ends at the sequence number its log had reached
        one second after the epoch (`scan_bound`): a scan never chases new elements forever.
        Workers are scanned in order; one call goes on to the next worker while COUNT and
        the COUNT*10 step budget last, so a small node answers in one call with cursor 0.
        Options are validated here, once, left to right as upstream does.
        """
        scan = parse_scan(name == b"jscan", argv)
        if type(scan) is bytes:
            client.reply(scan)
            return
        n = self.nworkers
        scan.bits = 64 - SCAN_EPOCHS.bit_length() - n.bit_length()
        if scan.cursor == 0:
            scan.w, scan.epoch, scan.low = 0, int(time.time()) % SCAN_EPOCHS, 0
        else:
            rest, scan.w = divmod(scan.cursor, n)
            rest, scan.epoch = divmod(rest, SCAN_EPOCHS)
            scan.low = rest & ((1 << scan.bits) - 1)
        if scan.queue is not None:
            # all the jobs of a queue live in the worker owning its slot
            scan.only = queue_slot(scan.queue) % n
        scan.slot = client.slot()
        self.scan_next(scan)

    def scan_next(self, scan):
        if scan.only is not None:
            if scan.w < scan.only:
                scan.w, scan.low = scan.only, 0
            elif scan.w > scan.only:
                self.scan_finish(scan, 0)
                return
        reqid = self.new_reqid(scan.w)
        self.pending[reqid] = lambda rep: self.scan_got(scan, rep)
        bound = self.scan_bound(scan.epoch, scan.w, 0 if scan.kind == "j" else 1)
        self.send_control(scan.w, reqid, "scan", [scan.kind, scan.low, scan.bits, bound,
                                                      scan.count, scan.steps, scan.opts])

    def scan_got(self, scan, rep):
        part = rep[1]
        if type(part) is not list:
            scan.slot.fill(R.INTERNAL_ERROR)
            return
        nxt, used, found, data = part
        scan.found += found
        scan.parts.append(data)
        if scan.count != -1:
            scan.count -= found
        if scan.steps != -1:
            scan.steps -= used
        if nxt >= 0:                    # stopped inside this worker's log
            low = nxt & ((1 << scan.bits) - 1)
            self.scan_finish(scan, ((low * SCAN_EPOCHS) + scan.epoch) * self.nworkers + scan.w)
            return
        w = scan.w + 1                  # this worker is done
        if w >= self.nworkers or (scan.only is not None and w > scan.only):
            self.scan_finish(scan, 0)
        elif scan.count == 0 or scan.steps == 0:
            self.scan_finish(scan, scan.epoch * self.nworkers + w)   # worker w, from its start
        else:
            scan.w, scan.low = w, 0
            self.scan_next(scan)

    @staticmethod
    def scan_finish(scan, cursor):
        scan.slot.fill(b"*2\r\n" + resp.bulk(b"%d" % cursor) + b"*%d\r\n" % scan.found
                       + b"".join(scan.parts))

    scan_marks = None       # ring: second % SCAN_EPOCHS -> (second, per worker (job, queue) seq)

    def scan_mark(self, second, reports):
        """Remember each worker's next scan-log sequence numbers, first seen in `second`
        (from a memory poll sent in that second, so they are at least the values the logs
        had when the second began)."""
        if self.scan_marks is None:
            self.scan_marks = [None] * SCAN_EPOCHS
        k = second % SCAN_EPOCHS
        mark = self.scan_marks[k]
        if mark is None or mark[0] != second:
            if all(type(r) is list and len(r) >= 5 for r in reports):
                self.scan_marks[k] = (second, [(r[3], r[4]) for r in reports])

    def scan_bound(self, epoch, w, kind):
        """The sequence number worker w's log (kind 0 jobs, 1 queues) had reached when the
        second after the scan's start began, or later (a later mark only widens the scan,
        which stays correct); -1 when no such mark exists yet."""
        marks = self.scan_marks
        if marks is None:
            return -1
        now = int(time.time())
        start = now - (now - epoch) % SCAN_EPOCHS     # the latest second with this epoch
        for second in range(start + 1, now + 1):
            mark = marks[second % SCAN_EPOCHS]
            if mark is not None and mark[0] == second:
                return mark[1][w][kind]
        return -1

    # ---- memory limits (SPEC 9) ----------------------------------------------------------

    mem_level = 0           # 0: <= 75% of maxmemory, 1: > 75%, 2: > 95%
    mem_used = 0            # bytes, last measured: every worker's data + our clients (memstat)
    mem_peak = 0            # the largest mem_used seen (INFO used_memory_peak)
    mem_excess = None       # used - 95% of maxmemory; None: not measured yet / no limit
    mem_polling = False

    def memory_cron(self):
        """Every ~100 ms (Node.cron): push the last level to the workers and collect their
        memory use (`Shard.memory_report`); `memory_measured` computes the new level."""
        if self.mem_polling:
            return
        self.mem_polling = True
        noeviction = self.cfg.maxmemory_policy == "noeviction"
        second = int(time.time())
        self.control_all("memory", [self.mem_level, self.mem_excess, noeviction],
                         lambda reports: self.memory_measured(reports, second))

    def memory_measured(self, reports, second):
        self.mem_polling = False
        self.scan_mark(second, reports)
        self.aof_reports(reports)            # AOF write errors (MISCONF), rewrites in progress
        used = self.memory_used(r[0] if type(r) is list else 0 for r in reports)
        maxmemory = self.cfg.maxmemory       # read every time: CONFIG SET maxmemory
        if maxmemory <= 0:
            level, excess = 0, None          # CONFIG SET maxmemory 0: no limit
        else:
            unit = maxmemory // 100          # upstream's integer math
            level = 2 if used > unit * 95 else 1 if used > unit * 75 else 0
            excess = used - unit * 95
        changed = level != self.mem_level
        self.mem_used, self.mem_level, self.mem_excess = used, level, excess
        if changed:
            log.info("Memory level %d: used %d bytes, maxmemory %d", level, used, maxmemory)
            self.memory_cron()               # tell the workers now, not at the next tick

    def memory_used(self, worker_shares):
        """used_memory (docs/memory.md): the workers' shares (their jobs, queues and AOF
        buffers) plus what this process holds for its clients."""
        used = memstat.client_bytes(self.clients.values()) + sum(worker_shares)
        if used > self.mem_peak:
            self.mem_peak = used
        return used

    def local_command(self, client, name, argv):
        self.local_commands += 1        # commands_processed minus this: sent to workers
        if name not in NEUTRAL_LOCAL:
            self.info_snapshot.invalidate()
        handler = self.local.get(name)
        if handler is None:
            client.reply(b"-ERR %s is not available in this version\r\n" % name.upper())
        else:
            t0 = time.perf_counter_ns()
            handler(client, argv)
            self.local_usec[name] += (time.perf_counter_ns() - t0) // 1000

    def route_ids(self, client, argv):
        ids = argv[1:]
        tail = None
        if len(argv) > 3 and len(argv[-2]) == 5 and argv[-2].lower() == b"delay" \
                and argv[0].lower() == b"nack":
            # NACK <id> ... DELAY <seconds> (docs/job-features.md)
            delay = parse_int(argv[-1])
            if delay is None or delay < 0 or delay > 4294967295:
                client.reply(R.DELAY_NEGATIVE)
                return
            ids = argv[1:-2]
            tail = [argv[-2], b"%d" % delay]
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
        g = Gather(client, client.slot(), len(groups))
        for n, (w, part) in enumerate(groups.items()):
            reqid = self.new_reqid(w)
            self.pending[reqid] = self.gather_part(g, n)
            self.send(w, [P.CMD, reqid, [argv[0]] + part + (tail or [])])

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

    def getjob(self, client, argv, slot=None):
        nohang = False
        withcounters = False
        timeout = 0
        count = 1
        queues = None
        prefix = None
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
                    client.reply(R.TIMEOUT_NOT_INTEGER)
                    return
                if timeout < 0:
                    client.reply(R.TIMEOUT_NEGATIVE)
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
            elif opt == b"from-prefix" and i + 2 == argc:
                # every queue whose name starts with the prefix, now and later, on every
                # worker (docs/job-features.md): the workers get the prefix as `queues`
                prefix = argv[i + 1]
                break
            else:
                client.reply(SYNTAX_ERROR)
                return
            i += 1
        if not queues and prefix is None:
            client.reply(SYNTAX_ERROR)
            return
        if not nohang:
            self.cur_t0 = 0     # SLOWLOG: a GETJOB that may block is timed in the front-end only
        n = self.nworkers
        if n == 1:
            owners = None
            if prefix is not None:
                queues = prefix
        elif prefix is not None:
            owners = {w: prefix for w in range(n)}
            queues = ()
        else:
            owners = {}
            for q in queues:
                owners.setdefault(queue_slot(q) % n, []).append(q)
            if self.queues_elsewhere:
                self.add_queue_elsewhere(owners, queues)
        if owners is None or len(owners) == 1:
            w = 0 if owners is None else next(iter(owners))
            reqid = self.new_reqid(w)
            self.pending[reqid] = self.waited_reply(client, slot or client.slot(), w, reqid)
            if not nohang:
                client.waiting = (reqid, w)
                if prefix is None:
                    self.blocked_getjobs[reqid] = (argv, queues)
            self.send(w, [P.GETJOB, reqid, client.id, count, nohang, withcounters, timeout, False, queues])
            return
        order = {}
        for pos, q in enumerate(queues):
            order.setdefault(q, pos)
        m = MultiGet(client, slot or client.slot(), count, nohang, order)
        m.withcounters = withcounters
        if not nohang:
            client.waiting = m
        for w, part in owners.items():
            reqid = self.new_reqid(w)
            m.reqids[reqid] = w
            m.workers.append(w)
            self.pending[reqid] = self.multiget_reply(m, reqid, w)
            self.send(w, [P.GETJOB, reqid, client.id, count, nohang, withcounters, 0, True, part])
        if timeout and not nohang:
            m.timer = time.monotonic() + timeout / 1000.0
            self.multiget_seq += 1
            heapq.heappush(self.multiget_deadlines, (m.timer, self.multiget_seq, m))

    def addjob_clustered(self, client, w, argv):
        """ADDJOB on a node of a cluster: the client may wait for copies on other nodes, and
        like upstream it is blocked meanwhile (its next commands wait), unless ASYNC."""
        reqid = self.new_reqid(w)
        self.pending[reqid] = self.waited_reply(client, client.slot(), w, reqid)
        for a in argv[4:]:
            if len(a) == 5 and a.lower() == b"async":
                break
        else:
            client.waiting = (reqid, w)
        self.send(w, [P.CMD, reqid, argv])

    def waited_reply(self, client, slot, w, reqid):
        """The reply callback of a command the client waits on (a blocking GETJOB, an ADDJOB
        waiting for copies): fill its slot, then let the client's next commands run."""
        def got(rep):
            if self.blocked_getjobs:
                blocked = self.blocked_getjobs.pop(reqid, None)
                if blocked is not None and reqid in self.getjob_restarts:
                    self.getjob_restarts.discard(reqid)
                    if not client.closed and rep[1] == NULL_ARRAY:
                        client.waiting = None       # taken back by queue_elsewhere: again
                        self.getjob(client, blocked[0], slot)
                        return
            if client.closed:
                if len(rep) > 2 and rep[2]:
                    self.send(w, [P.RETURN, rep[2]])    # the consumer vanished: not delivered
                return
            slot.fill(rep[1])
            waiting = client.waiting
            # only the end of the command the client waits on lets its next commands run
            # (a NOHANG GETJOB pipelined before a blocking one must not)
            if type(waiting) is tuple and waiting[0] == reqid:
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
            if type(jobs) is bytes:
                # -LEAVING: this node no longer lets consumers wait (SPEC 8.7)
                m.error = jobs
                m.answered.add(reqid)
                if len(m.answered) == len(m.reqids) or m.blocked:
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
                m.slot.fill(m.error or NULL_ARRAY)
            if client.waiting is m:
                client.resume()

    def cron(self):
        """Every CRON_MS (timerfd tick): time out cross-worker GETJOBs; client cron."""
        self.admin_cron()
        self.stats_log_cron()
        self.cron_ticks += 1
        if self.cluster is not None and self.cron_ticks % 2 == 0:
            self.cluster_cron()         # every 100 ms (SPEC 10.5)
        if self.cron_ticks % 20 == 0 and self.controls_sent:
            self.prune_controls()
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

    def stats_log_cron(self):
        """`stats-log-file` / `stats-log-interval`: one schema-v2 line per worker per interval (docs/stats-schema.md).
        Both are read on every tick, so CONFIG SET turns the log on, off or elsewhere."""
        path = self.cfg.stats_log_file
        if not path:
            self.stats_log = None
            return
        path = self.cfg.resolve_path(path)
        now = time.time()
        if self.stats_log is None or self.stats_log.path != path:
            self.stats_log = statslog.StatsLog(path)
            self.stats_log_last = 0.0
        if now - self.stats_log_last < self.cfg.stats_log_interval or self.stats_log_pending:
            return
        self.stats_log_last = now
        self.stats_log_pending = True
        log_file = self.stats_log
        addr = "%s:%d" % ((self.cfg.bind or ["127.0.0.1"])[0], self.cfg.port)

        def write(workers):
            self.stats_log_pending = False
            node = self.node_id.decode()
            if not log_file.write([statslog.line(now, node, addr, w) for w in workers]):
                log.warning("Cannot write the stats log %s", log_file.path)

        self.control_all("info", None, write)

    def cancel_wait(self, client):
        """The client vanished while blocked: forget it everywhere; late jobs go back."""
        w = client.waiting
        client.waiting = None
        if isinstance(w, MultiGet):
            if not w.done:
                self.multiget_finish(w)
        else:
            # the worker answers the UNBLOCK with a null reply, or a job already on its
            # way reaches waited_reply, which sees the closed client and returns it
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
        if self.cluster is not None:
            client.reply(self.hello_reply())
            return
        me = self.node_id
        node = resp.bulk_array([me, self.my_ip(), str(self.cfg.port).encode(), b"1"])
        client.reply(b"*3\r\n:1\r\n" + resp.bulk(me) + node)

    def cmd_echo(self, client, argv):
        client.reply(resp.bulk(argv[1]))

    def cmd_time(self, client, argv):
        t = time.time()
        sec = int(t)
        client.reply(resp.bulk_array([str(sec).encode(), str(int((t - sec) * 1e6)).encode()]))

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
        elif sub == b"bus" and len(argv) == 3 and self.cluster is not None:
            self.debug_bus(client, argv[2])
        elif sub == b"error" and len(argv) == 3:
            client.reply(b"-" + one_line(argv[2]) + b"\r\n")
        else:
            client.reply(b"-ERR Unknown DEBUG subcommand or wrong number of arguments for '%s'\r\n"
                         % one_line(argv[1]))

    def cmd_shutdown(self, client, argv):
        if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"rewrite-aof"):
            client.reply(SYNTAX_ERROR)
            return
        log.warning("User requested shutdown...")
        if self.aof_shutdown(client, len(argv) == 2):
            return                          # REWRITE-AOF: the files first (disque.aof_front)
        if self.shutdown_cb:
            self.shutdown_cb()

    def cmd_config(self, client, argv):
        sub = argv[1].lower()
        cfg = self.cfg
        try:
            if sub == b"get" and len(argv) == 3:
                pairs = cfg.config_get(argv[2].decode(errors="replace"))
                client.reply(self.config_reply_pairs(client, pairs))   # a map for RESP3
            elif sub == b"set" and len(argv) == 4:
                name = argv[2].decode(errors="replace")
                cfg.config_set(name, argv[3].decode(errors="replace"))
                err = self.config_changed(name.lower())     # front-end side effects
                client.reply(err or resp.OK)
            elif sub == b"rewrite" and len(argv) == 2:
                cfg.rewrite()
                client.reply(resp.OK)
            elif sub == b"resetstat" and len(argv) == 2:
                self.reset_stats(client)
            elif sub in (b"get", b"set", b"rewrite", b"resetstat"):
                client.reply(b"-ERR Wrong number of arguments for CONFIG %s\r\n" % argv[1].upper())
            else:
                client.reply(b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n")
        except Exception as e:   # ConfigError carries the exact message
            msg = getattr(e, "message", None) or str(e) or "error"
            client.reply(b"-ERR " + one_line(msg.encode("utf-8", "surrogateescape")) + b"\r\n")

    def cmd_info(self, client, argv):
        if len(argv) > 2:
            client.reply(SYNTAX_ERROR)
            return
        section = argv[1].decode(errors="replace").lower() if len(argv) == 2 else "default"
        if section in info_mod.LIVE_SECTIONS:
            s = client.slot()
            self.control_all("info", None,
                             lambda workers: s.fill(resp.bulk(info_mod.render(self, workers, section))))
            return
        # from the workers' last figures while they are exact (disque/info_snapshot.py)
        mark = self.commands_processed - self.local_commands
        workers = self.info_snapshot.fresh(mark)
        if workers is not None:
            client.reply(resp.bulk(info_mod.render(self, workers, section)))
            return
        s = client.slot()
        self.info_snapshot.wait(self, mark, lambda workers: s.fill(
            resp.bulk(info_mod.render(self, workers, section))))
