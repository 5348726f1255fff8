# cython: language_level=3
"""Consumers blocked in GETJOB on a worker's queues (SPEC 3.2, 8.3): fetching, blocking,
serving them in blocking order as jobs arrive, and their timeouts; the C half of
disque/workers/consumers.py (`Consumers`, which adds the front-end's UNBLOCK and a served
connection's unpark). Every GETJOB of the worker comes here: the front-end's, a served
connection's (ServedCore.getjob_served), another worker's NOHANG one.
"""
from libc.limits cimport LLONG_MAX

from disque._fast.jobreply import encode_job, encode_jobs, encode_jobs_pieces
from disque._fast.resp import NULL_ARRAY
from disque._fast.shardcore cimport PAUSE_OUT, ShardCore
from disque._fast.shardqueue cimport Queue
from disque.contracts import worker_link as link_msg
from disque.deadlines import Deadlines
from disque.replies import LEAVING_ERROR

cdef object encode_reply = link_msg.GetJobReply.encode


cdef class Blocked:
    """A consumer waiting in GETJOB on some of this worker's queues.

    proxy=False: the whole GETJOB lives here; we reply to the client (via reqid) with a
    job or, at the deadline, a null array. proxy=True: the GETJOB spans workers and the
    front-end owns it; we only offer the first job that shows up and let it decide.
    """

    def __init__(self, client, long long reqid, list queues, bint withcounters, bint proxy,
                 long long deadline):
        self.client = client
        self.reqid = reqid
        self.queues = queues
        self.withcounters = withcounters
        self.proxy = proxy
        self.deadline = deadline
        self.done = False
        self.prefix = None          # GETJOB FROM-PREFIX: queues created later join `queues`


cdef inline bint paused_out(Queue q):
    return (q.paused & PAUSE_OUT) != 0


cdef class ConsumersCore:
    """Needs from the shard: the ShardCore (queues, get_queue, fetch, ready, leaving,
    cluster_size, now_ms, out, prefix_waiters), `shard.federation` (NEEDJOBS / INTEREST
    for queues whose consumers wait), `shard.spill` (spilled heads) and `shard.served`
    (a served connection's parked GETJOB). Offers: fetch_or_block, unblock, release,
    answer, serve_ready, expire, and `by_client` (the blocked consumer of each client)."""

    def __init__(self, shard):
        self.shard = shard
        self.core = <ShardCore>shard
        self.by_client = {}
        self.deadlines = Deadlines()    # of Blocked, in ms (disque/deadlines.py)

    cpdef tuple fetch_or_block(self, GetjobRequest request):
        """A GetjobRequest (contracts/getjob_options.py): (reply, job ids) now, or the
        consumer waits (reply None in local mode, [] in proxy mode)."""
        cdef ShardCore core = self.core
        cdef Py_ssize_t count = request.count, n
        cdef list queues, jobs
        cdef Queue q
        cdef set seen
        prefix = request.prefix
        if prefix is not None:      # FROM-PREFIX: every queue whose name starts so
            queues = [q for name, q in core.queues.items() if name.startswith(prefix)]
        else:
            queues = []
            seen = set()
            for name in request.queues:
                if name not in seen:
                    seen.add(name)
                    queues.append(core.get_queue(name, True))
        cdef list cold = [q for q in queues if q.cold is not None and q.cold.live]
        if cold:
            # spilled jobs behind short heads: each queue's share of the rounds (a job of
            # every queue per round), not `count` for each, which loaded jobs the GETJOB
            # did not take (a worker over its share spilled them again); what a queue
            # short of its share leaves, the others make up
            n = len(queues)
            self.refill(cold, (count + n - 1) // n)
        jobs = self.take(queues, count)
        if cold and len(jobs) < count:
            self.refill(cold, count - len(jobs))
            jobs += self.take(queues, count - len(jobs))
        cdef bint clustered = core.cluster_size > 1
        if clustered and (jobs or request.nohang):
            # a consumer about to block asks once it is blocked (INTEREST, below)
            federation = self.shard.federation
            for q in queues:
                if not len(q.jobs) or paused_out(q):
                    # "clients waiting" when nothing came from it, else "reached zero"
                    federation.needjobs(q, bool(jobs))
        if jobs:
            ids = [j.id for j in jobs]
            if request.proxy:
                return [encode_job(j, request.withcounters) for j in jobs], ids
            if request.pieces:
                return encode_jobs_pieces(jobs, request.withcounters), ids
            return encode_jobs(jobs, request.withcounters), ids
        return self.nothing_fetched(request, queues, clustered)

    cdef refill(self, list queues, Py_ssize_t want):
        """Load spilled jobs so that each of `queues` holds `want` in RAM, if it has them."""
        cdef Queue q
        spill = self.shard.spill
        for q in queues:
            if len(q.jobs) < want:
                spill.refill(q, want - len(q.jobs))

    cdef list take(self, list queues, Py_ssize_t count):
        """Up to `count` jobs of `queues`, delivered."""
        cdef Queue q
        if len(queues) == 1:
            # one queue (the usual GETJOB): fetched in one call
            q = queues[0]
            return [] if paused_out(q) else self.core.fetch_many(q, count)
        return self.fetch_rounds(queues, count)

    cdef list fetch_rounds(self, list queues, Py_ssize_t count):
        """One job per queue per round, left to right, until `count` or none is left."""
        cdef list jobs = []
        cdef bint got
        cdef Queue q
        while len(jobs) < count:
            got = False
            for q in queues:
                if paused_out(q) or not len(q.jobs):
                    continue
                jobs.append(self.core.fetch(q))
                got = True
                if len(jobs) == count:
                    break
            if not got:
                break
        return jobs

    cdef tuple nothing_fetched(self, GetjobRequest request, list queues, bint clustered):
        """No job for this GETJOB: the empty reply (NOHANG), -LEAVING, or the consumer
        blocks (the reply comes later)."""
        cdef ShardCore core = self.core
        cdef bint proxy = request.proxy
        cdef long long timeout_ms, deadline
        cdef Queue q
        if request.nohang:
            return ([] if proxy else NULL_ARRAY), None
        if core.leaving:
            return LEAVING_ERROR, None
        timeout_ms = request.timeout
        deadline = 0
        if timeout_ms and not proxy:
            # a TIMEOUT up to 2^63 - 1 is valid: past the clock's range, never
            deadline = (core.now_ms + timeout_ms if timeout_ms < LLONG_MAX - core.now_ms
                        else LLONG_MAX)
        client = request.client
        cdef Blocked b = Blocked(client, request.reqid, queues, request.withcounters, proxy,
                                 deadline)
        if request.prefix is not None:
            b.prefix = request.prefix
            core.prefix_waiters.append(b)
        old = self.by_client.pop(client, None)
        if old is not None:
            self.unblock(old)
        self.by_client[client] = b
        for q in queues:
            q.add_waiter(b)
        if deadline:
            self.deadlines.add(deadline, b)
        if clustered:
            federation = self.shard.federation
            for q in queues:
                federation.needjobs(q)
        return ([] if proxy else None), None

    cpdef unblock(self, Blocked b):
        cdef Queue q
        b.done = True
        if b.prefix is not None:
            try:
                self.core.prefix_waiters.remove(b)
            except ValueError:
                pass
        if self.by_client.get(b.client) is b:
            del self.by_client[b.client]
        for q in b.queues:
            q.drop_waiter(b)
            if q.fed is not None:
                self.shard.federation.waiters_left(q)

    cpdef answer(self, Blocked b, reply, ids):
        """The reply of blocked consumer b: to the front-end, or to the connection this
        worker serves that parked it (a negative wait id, ServedCore.repl_answered)."""
        if b.reqid < 0:
            self.shard.served.repl_answered(b.reqid, reply)
        else:
            self.core.out.append(encode_reply(b.reqid, reply, ids))

    cpdef release(self, Blocked b, reply):
        """Unblock b with a reply that gives it no job (-LEAVING, FLUSHALL)."""
        self.unblock(b)
        self.answer(b, reply, None)

    cpdef serve_ready(self):
        """Give queued jobs to blocked consumers, one job each, in blocking order."""
        cdef ShardCore core = self.core
        cdef Queue q
        cdef Blocked b
        while core.ready:
            q = core.ready.pop()
            while q.blocked and len(q.jobs) and not paused_out(q):
                b = q.blocked[0]
                self.unblock(b)
                job = core.fetch(q)
                item = encode_job(job, b.withcounters)
                if b.proxy:
                    core.out.append(encode_reply(b.reqid, [item], [job.id]))
                else:
                    self.answer(b, b"*1\r\n" + item, [job.id])
                if not len(q.jobs) and q.fed is not None:
                    self.shard.federation.needjobs(q, True)
            if q.remote is not None and len(q.jobs) and not paused_out(q):
                self.shard.federation.push_remote(q)

    cpdef expire(self, long long now):
        """Consumers whose GETJOB TIMEOUT passed get a null reply."""
        cdef Blocked b
        for b in self.deadlines.take_due(now):
            self.unblock(b)
            self.answer(b, NULL_ARRAY, None)
