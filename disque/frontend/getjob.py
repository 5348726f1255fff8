"""GETJOB's front-end half (SPEC 3.2; docs/design.md, "Blocking GETJOB across workers"),
and the waiting of a producer whose ADDJOB waits for copies on other nodes.

The worker half is `Shard.getjob` (disque/workers/shard.py), the one entry point every
GETJOB takes in a worker, with the same GetjobRequest (contracts/getjob_options.py): it
fetches, or registers the client as a waiter (proxy when the front-end merges several
workers' answers).

When every queue of a GETJOB lives in one worker, that worker blocks and serves the client
directly (`waited_reply`). Otherwise every involved worker first tries to fetch and, with
nothing to give, registers the client as a proxy waiter; the first job offered wins, any
other offer or extra job is returned to its worker (RETURN), and each worker acknowledges
the front-end's UNBLOCK as the last word about that request, so a job is never given twice
or lost, even when the client times out or disconnects at the same moment.
"""
import time

from disque._fast import resp
from disque.contracts import worker_link as link_msg
from disque.contracts.getjob_options import parse_getjob, queue_owners
from disque.deadlines import Deadlines

NULL_ARRAY = resp.NULL_ARRAY


class MultiGet:
    """A GETJOB whose queues live in several workers.

    Every involved worker first tries to fetch and, when it has nothing, registers the
    client as a proxy waiter. The first job offered wins; later offers are returned to
    their worker, so no job is given twice or lost.
    """
    __slots__ = ("client", "slot", "request", "count", "nohang", "reqids", "order", "answered",
                 "jobs", "done", "blocked", "timer", "workers", "unblocked", "error")

    def __init__(self, client, slot, request, order):
        self.client = client
        self.slot = slot
        self.request = request      # the GetjobRequest, each worker asked for its share
        self.count = request.count
        self.nohang = request.nohang
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


def queue_of_encoded(enc):
    """The queue of an encoded job reply: "*3\\r\\n$<len>\\r\\n<queue>\\r\\n..." (or *7...)."""
    start = enc.index(b"\r\n", 4) + 2
    n = int(enc[5:start - 2])
    return enc[start:start + n]


class Getjobs:
    """GETJOB and waiting producers on the front-end side.

    Needs from the node (`fe`): nworkers, new_reqid, pending, send, cur_t0, flush_replies,
    and `fe.routing.add_queue_elsewhere` (queues held off their slot's worker).
    Offers: getjob (the core's GETJOB route), addjob_clustered (the core's ADDJOB route on
    a cluster node), waited_reply, multiget_reply, cancel_wait (a client that vanished),
    expire (cron), and the state QUEUE_ELSEWHERE re-issues GETJOBs from."""

    def __init__(self, fe):
        self.fe = fe
        self.blocked_count = 0          # cross-worker GETJOBs blocked now (INFO blocked_clients)
        self.blocked_on_one = {}        # reqid -> (argv, queues) of GETJOBs blocked on one worker
        self.restarts = set()           # ... of those, the ones queue_elsewhere takes back
        self.deadlines = Deadlines()    # of MultiGet, in monotonic seconds (disque/deadlines.py)

    def getjob(self, client, argv, slot=None):
        fe = self.fe
        error, o = parse_getjob(argv)
        if error is not None:
            client.reply(error)
            return
        queues, prefix = o.queues, o.prefix
        if not o.nohang:
            fe.cur_t0 = 0       # SLOWLOG: a GETJOB that may block is timed in the front-end only
        n = fe.nworkers
        if n == 1:
            owners = None
        elif prefix is not None:
            owners = {w: None for w in range(n)}        # every worker: its queues of the prefix
        else:
            owners = queue_owners(queues, n)
            if fe.routing.queues_elsewhere:
                fe.routing.add_queue_elsewhere(owners, queues)
        if owners is None or len(owners) == 1:
            w = 0 if owners is None else next(iter(owners))
            reqid = fe.new_reqid(w)
            fe.pending[reqid] = self.waited_reply(client, slot or client.slot(), w, reqid)
            if not o.nohang:
                client.waiting = (reqid, w)
                if prefix is None:
                    self.blocked_on_one[reqid] = (argv, queues)
            fe.send(w, o.share(reqid, client.id, queues))
            return
        order = {}
        for pos, q in enumerate(queues or ()):
            order.setdefault(q, pos)
        m = MultiGet(client, slot or client.slot(), o, order)
        if not o.nohang:
            client.waiting = m
        for w, part in owners.items():
            self.ask(m, w, part)
        if o.timeout and not o.nohang:
            m.timer = time.monotonic() + o.timeout / 1000.0
            self.deadlines.add(m.timer, m)

    def ask(self, m, w, queues):
        """One worker's share of a cross-worker GETJOB (proxy: its jobs come back here,
        and the front-end keeps its timeout); `queues` None: the prefix's queues."""
        fe = self.fe
        reqid = fe.new_reqid(w)
        m.reqids[reqid] = w
        m.workers.append(w)
        fe.pending[reqid] = self.multiget_reply(m, reqid, w)
        fe.send(w, m.request.share(reqid, m.client.id, queues, proxy=True, timeout=0))

    def addjob_clustered(self, client, w, argv):
        """ADDJOB on a node of a cluster: the client may wait for copies on other nodes, and
        like upstream it is blocked meanwhile (its next commands wait), unless ASYNC.
        The worker half is `Shard.cmd_addjob` (replication: disque/workers/replication.py)."""
        fe = self.fe
        reqid = fe.new_reqid(w)
        fe.pending[reqid] = self.waited_reply(client, client.slot(), w, reqid)
        for a in argv[4:]:
            if len(a) == 5 and a.lower() == b"async":
                break
        else:
            client.waiting = (reqid, w)
        fe.send(w, link_msg.Cmd.encode(reqid, argv))

    def waited_reply(self, client, slot, w, reqid):
        """The reply callback of a command the client waits on (a blocking GETJOB, an ADDJOB
        waiting for copies): fill its slot, then let the client's next commands run."""
        fe = self.fe

        def got(rep):
            if self.blocked_on_one:
                blocked = self.blocked_on_one.pop(reqid, None)
                if blocked is not None and reqid in self.restarts:
                    self.restarts.discard(reqid)
                    if not client.closed and rep[1] == NULL_ARRAY:
                        client.waiting = None       # taken back by queue_elsewhere: again
                        self.getjob(client, blocked[0], slot)
                        return
            if client.closed:
                if len(rep) > 2 and rep[2]:
                    # the consumer vanished: not delivered
                    fe.send(w, link_msg.Return.encode(rep[2]))
                return
            slot.fill(rep[1])
            waiting = client.waiting
            # only the end of the command the client waits on lets its next commands run
            # (a NOHANG GETJOB pipelined before a blocking one must not)
            if type(waiting) is tuple and waiting[0] == reqid:
                client.resume()
        return got

    def multiget_reply(self, m, reqid, w):
        return PartReply(self, m, reqid, w)

    def finish(self, m):
        fe = self.fe
        m.done = True
        if m.blocked:
            self.blocked_count -= 1
        for reqid, w in m.reqids.items():
            if reqid in fe.pending:
                # this worker may still hold a waiter: drop it; its ack (and any offer
                # already on the way, which is returned) still reaches `got`
                m.unblocked.add(reqid)
                fe.send(w, link_msg.Unblock.encode(m.client.id, reqid))
        client = m.client
        jobs = sorted(m.jobs, key=lambda j: j[0])
        limit = m.count if not m.blocked else 1
        give, back = jobs[:limit], jobs[limit:]
        if client.closed:
            back = jobs
            give = []
        m.jobs = []                 # the bodies go with the reply, not with `m`
        for _, _, jid, w in back:
            fe.send(w, link_msg.Return.encode([jid]))
        if not client.closed:
            if give:
                m.slot.fill(b"*%d\r\n" % len(give) + b"".join(j[1] for j in give))
            else:
                m.slot.fill(m.error or NULL_ARRAY)
            if client.waiting is m:
                client.resume()

    def cancel_wait(self, client):
        """The client vanished while blocked: forget it everywhere; late jobs go back."""
        w = client.waiting
        client.waiting = None
        if isinstance(w, MultiGet):
            if not w.done:
                self.finish(w)
        else:
            # the worker answers the UNBLOCK with a null reply, or a job already on its
            # way reaches waited_reply, which sees the closed client and returns it
            self.fe.send(w[1], link_msg.Unblock.encode(client.id, w[0]))

    def expire(self):
        """Cron: time out cross-worker GETJOBs (a single-worker one times out in its worker)."""
        expired = self.deadlines.take_due(time.monotonic())
        for m in expired:
            self.finish(m)
        if expired:
            self.fe.flush_replies()


class PartReply:
    """The reply callback of one worker's share of a MultiGet. An object rather than a
    closure: it registers itself again for the worker's next word, and a closure naming
    itself is a reference cycle, which kept every MultiGet and the job bodies it gathered
    alive until the interpreter's next full collection."""
    __slots__ = ("getjobs", "m", "reqid", "w")

    def __init__(self, getjobs, m, reqid, w):
        self.getjobs = getjobs
        self.m = m
        self.reqid = reqid
        self.w = w

    def __call__(self, rep):
        getjobs, m, reqid, w = self.getjobs, self.m, self.reqid, self.w
        fe = getjobs.fe
        jobs, ids = rep[1], rep[2]
        if jobs == 0:
            return              # the worker's last word after an UNBLOCK
        if m.done:
            # too late for this client: give the jobs back and wait for the UNBLOCK ack
            if ids:
                fe.send(w, link_msg.Return.encode(ids))
            if reqid in m.unblocked:
                fe.pending[reqid] = self
            return
        if jobs is None:
            # the worker dropped its waiters (DEBUG FLUSHALL): the client gets a null reply
            getjobs.finish(m)
            return
        if type(jobs) is bytes:
            # -LEAVING: this node no longer lets consumers wait (SPEC 8.7)
            m.error = jobs
            m.answered.add(reqid)
            if len(m.answered) == len(m.reqids) or m.blocked:
                getjobs.finish(m)
            return
        # a worker sweeps its queues one job per queue per round: (round, position)
        # is the place each job would have in one sweep over all the queues
        rounds = {}
        for enc, jid in zip(jobs, ids or ()):
            pos = m.order.get(queue_of_encoded(enc), 0)
            rnd = rounds.get(pos, 0)
            rounds[pos] = rnd + 1
            m.jobs.append(((rnd, pos), enc, jid, w))
        if reqid not in m.answered:
            m.answered.add(reqid)
            if not jobs and not m.nohang:
                fe.pending[reqid] = self    # the worker holds a waiter: an offer may follow
        if len(m.answered) < len(m.reqids):
            return
        if m.jobs or m.nohang:
            getjobs.finish(m)
        elif not m.blocked:
            m.blocked = True
            getjobs.blocked_count += 1
