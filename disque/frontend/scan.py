"""QSCAN and JSCAN over every worker (SPEC 3.11): cursors, options, and the per-worker shares.

The worker half is `Shard.scan` (disque/workers/shard.py), reached with a "scan" control
request; disque/commands.py names both.
"""

from disque import replies
from disque import nodeclock
from disque._fast import resp
from disque._fast.jobid import queue_worker

parse_int = resp.parse_int
SYNTAX_ERROR = replies.SYNTAX_ERROR


class Scan:
    """One QSCAN/JSCAN call in progress (Scans.all_workers_command)."""
    __slots__ = ("kind", "cursor", "count", "steps", "opts", "queue", "only", "w", "low",
                 "bits", "epoch", "slot", "found", "parts")

    def __init__(self):
        self.queue = None
        self.only = None
        self.found = 0
        self.parts = []


SCAN_STATES = {b"wait-repl": 0, b"active": 1, b"queued": 2, b"acked": 3}
NOT_INTEGER = replies.NOT_INTEGER
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


class Scans:
    """Needs from the node (`fe`): nworkers, new_reqid, pending, send_control.
    Offers: all_workers_command (the core's route for QSCAN/JSCAN) and mark (the memory
    poll's scan-log sequence numbers, which bound a scan)."""

    def __init__(self, fe):
        self.fe = fe
        self.marks = None       # ring: second % SCAN_EPOCHS -> (second, per worker (job, queue) seq)

    def all_workers_command(self, client, name, argv):
        """QSCAN / JSCAN over every worker (SPEC 3.11).

        Each worker keeps its queues and jobs in a scan log (`ScanLog`): every element gets
        a sequence number that never changes, so an element present for the whole scan is
        returned once the cursor passes it, whatever is added or removed meanwhile. The
        node-wide cursor is `((low * 4096) + epoch) * N + w`: w is the worker being scanned,
        low the low bits of the sequence number reached in its log (0: its start) and epoch
        the second the scan began, mod 4096. Elements added after the scan began need not
        be returned, so each worker's share ends at the sequence number its log had reached
        one second after the epoch (`bound`): a scan never chases new elements forever.
        Workers are scanned in order; one call goes on to the next worker while COUNT and
        the COUNT*10 step budget last, so a small node answers in one call with cursor 0.
        Options are validated here, once, left to right as upstream does.
        """
        scan = parse_scan(name == b"jscan", argv)
        if type(scan) is bytes:
            client.reply(scan)
            return
        n = self.fe.nworkers
        scan.bits = 64 - SCAN_EPOCHS.bit_length() - n.bit_length()
        if scan.cursor == 0:
            scan.w, scan.epoch, scan.low = 0, int(nodeclock.now()) % SCAN_EPOCHS, 0
        else:
            rest, scan.w = divmod(scan.cursor, n)
            rest, scan.epoch = divmod(rest, SCAN_EPOCHS)
            scan.low = rest & ((1 << scan.bits) - 1)
        if scan.queue is not None:
            # all the jobs of a queue live in the worker owning its slot
            scan.only = queue_worker(scan.queue, n)
        scan.slot = client.slot()
        self.next(scan)

    def next(self, scan):
        if scan.only is not None:
            if scan.w < scan.only:
                scan.w, scan.low = scan.only, 0
            elif scan.w > scan.only:
                self.finish(scan, 0)
                return
        reqid = self.fe.new_reqid(scan.w)
        self.fe.pending[reqid] = lambda rep: self.got(scan, rep)
        bound = self.bound(scan.epoch, scan.w, 0 if scan.kind == "j" else 1)
        self.fe.send_control(scan.w, reqid, "scan", [scan.kind, scan.low, scan.bits, bound,
                                                     scan.count, scan.steps, scan.opts])

    def got(self, scan, rep):
        part = rep[1]
        if type(part) is not list:
            scan.slot.fill(replies.INTERNAL_ERROR)
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
            self.finish(scan, ((low * SCAN_EPOCHS) + scan.epoch) * self.fe.nworkers + scan.w)
            return
        w = scan.w + 1                  # this worker is done
        if w >= self.fe.nworkers or (scan.only is not None and w > scan.only):
            self.finish(scan, 0)
        elif scan.count == 0 or scan.steps == 0:
            self.finish(scan, scan.epoch * self.fe.nworkers + w)   # worker w, from its start
        else:
            scan.w, scan.low = w, 0
            self.next(scan)

    @staticmethod
    def finish(scan, cursor):
        scan.slot.fill(b"*2\r\n" + resp.bulk(b"%d" % cursor) + b"*%d\r\n" % scan.found
                       + b"".join(scan.parts))

    def mark(self, second, reports):
        """Remember each worker's next scan-log sequence numbers, first seen in `second`
        (from a memory poll sent in that second, so they are at least the values the logs
        had when the second began)."""
        if self.marks is None:
            self.marks = [None] * SCAN_EPOCHS
        k = second % SCAN_EPOCHS
        mark = self.marks[k]
        if mark is None or mark[0] != second:
            if all(type(r) is list and len(r) >= 5 for r in reports):
                self.marks[k] = (second, [(r[3], r[4]) for r in reports])

    def bound(self, epoch, w, kind):
        """The sequence number worker w's log (kind 0 jobs, 1 queues) had reached when the
        second after the scan's start began, or later (a later mark only widens the scan,
        which stays correct); -1 when no such mark exists yet."""
        marks = self.marks
        if marks is None:
            return -1
        now = int(nodeclock.now())     # the clock of the marks (memory.py)
        start = now - (now - epoch) % SCAN_EPOCHS     # the latest second with this epoch
        for second in range(start + 1, now + 1):
            mark = marks[second % SCAN_EPOCHS]
            if mark is not None and mark[0] == second:
                return mark[1][w][kind]
        return -1
