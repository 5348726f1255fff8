"""Consumers blocked in GETJOB on this worker's queues (SPEC 3.2, 8.3): fetching, blocking,
serving them in blocking order as jobs arrive, their timeouts, and the front-end's UNBLOCK.

The front-end half is disque/frontend/getjob.py (`Getjobs`); `Shard.getjob` is the entry
for the front-end's GETJOBs. A connection this worker serves parks its GETJOB here too
(ServedClients.getjob), under a negative wait id: its reply goes to that connection
(`answer`), not to the front-end.
"""
from disque._fast import resp
from disque._fast.jobreply import encode_job, encode_jobs, encode_jobs_pieces
from disque.contracts import worker_link as link_msg
from disque.deadlines import Deadlines
from disque.workers.replication import LEAVING_ERROR
from disque.workers.queues import PAUSE_OUT

NULL_ARRAY = resp.NULL_ARRAY


class Blocked:
    """A consumer waiting in GETJOB on some of this worker's queues.

    proxy=False: the whole GETJOB lives here; we reply to the client (via reqid) with a
    job or, at the deadline, a null array. proxy=True: the GETJOB spans workers and the
    front-end owns it; we only offer the first job that shows up and let it decide.
    """
    __slots__ = ("client", "reqid", "queues", "withcounters", "proxy", "deadline", "done",
                 "prefix")

    def __init__(self, client, reqid, queues, withcounters, proxy, deadline):
        self.client = client
        self.reqid = reqid
        self.queues = queues
        self.withcounters = withcounters
        self.proxy = proxy
        self.deadline = deadline
        self.done = False
        self.prefix = None          # GETJOB FROM-PREFIX: queues created later join `queues`



class Consumers:
    """Needs from the shard: the ShardCore (queues, get_queue, fetch, ready, leaving,
    cluster_size, now_ms, out, prefix_waiters), `shard.federation` (NEEDJOBS / INTEREST
    for queues whose consumers wait) and `shard.replication.cancel_replication`.
    Offers: fetch_or_block, unblock, unblock_client, unpark, release, serve_ready, expire,
    and `by_client` (the blocked consumer of each client)."""

    def __init__(self, shard):
        self.shard = shard
        self.by_client = {}
        self.deadlines = Deadlines()    # of Blocked, in ms (disque/deadlines.py)

    def fetch_or_block(self, request):
        """A GetjobRequest (contracts/getjob_options.py): jobs now, or the consumer waits."""
        count = request.count
        prefix = request.prefix
        if prefix is not None:      # FROM-PREFIX: every queue whose name starts so
            queues = [q for name, q in self.shard.queues.items() if name.startswith(prefix)]
        else:
            queues = []
            seen = set()
            for name in request.queues:
                if name not in seen:
                    seen.add(name)
                    queues.append(self.shard.get_queue(name, create=True))
        cold = [q for q in queues if q.cold is not None and q.cold.live]
        if cold:
            # spilled jobs behind short heads: each queue's share of the rounds (a job of
            # every queue per round), not `count` for each, which loaded jobs the GETJOB
            # did not take (a worker over its share spilled them again); what a queue
            # short of its share leaves, the others make up
            self.refill(cold, -(-count // len(queues)))
        jobs = self.take(queues, count)
        if cold and len(jobs) < count:
            self.refill(cold, count - len(jobs))
            jobs += self.take(queues, count - len(jobs))
        clustered = self.shard.cluster_size > 1
        if clustered and (jobs or request.nohang):
            # a consumer about to block asks once it is blocked (INTEREST, below)
            for q in queues:
                if not len(q.jobs) or q.paused & PAUSE_OUT:
                    # "clients waiting" when nothing came from it, else "reached zero"
                    self.shard.federation.needjobs(q, reached_zero=bool(jobs))
        if jobs:
            ids = [j.id for j in jobs]
            if request.proxy:
                return [encode_job(j, request.withcounters) for j in jobs], ids
            if request.pieces:
                return encode_jobs_pieces(jobs, request.withcounters), ids
            return encode_jobs(jobs, request.withcounters), ids
        return self.nothing_fetched(request, queues, clustered)

    def refill(self, queues, want):
        """Load spilled jobs so that each of `queues` holds `want` in RAM, if it has them."""
        spill = self.shard.spill
        for q in queues:
            if len(q.jobs) < want:
                spill.refill(q, want - len(q.jobs))

    def take(self, queues, count):
        """Up to `count` jobs of `queues`, delivered."""
        if len(queues) == 1:
            # one queue (the usual GETJOB): fetched in one Cython call
            q = queues[0]
            return [] if q.paused & PAUSE_OUT else self.shard.fetch_many(q, count)
        return self.fetch_rounds(queues, count)

    def fetch_rounds(self, queues, count):
        """One job per queue per round, left to right, until `count` or none is left."""
        jobs = []
        while len(jobs) < count:
            got = False
            for q in queues:
                if q.paused & PAUSE_OUT or not len(q.jobs):
                    continue
                jobs.append(self.shard.fetch(q))
                got = True
                if len(jobs) == count:
                    break
            if not got:
                break
        return jobs

    def nothing_fetched(self, request, queues, clustered):
        """No job for this GETJOB: the empty reply (NOHANG), -LEAVING, or the consumer
        blocks (the reply comes later)."""
        proxy = request.proxy
        if request.nohang:
            return ([] if proxy else NULL_ARRAY), None
        if self.shard.leaving:
            return LEAVING_ERROR, None
        timeout_ms = request.timeout
        deadline = self.shard.now_ms + timeout_ms if timeout_ms and not proxy else 0
        client = request.client
        b = Blocked(client, request.reqid, queues, request.withcounters, proxy, deadline)
        if request.prefix is not None:
            b.prefix = request.prefix
            self.shard.prefix_waiters.append(b)
        old = self.by_client.pop(client, None)
        if old is not None:
            self.unblock(old)
        self.by_client[client] = b
        for q in queues:
            q.add_waiter(b)
        if deadline:
            self.deadlines.add(deadline, b)
        if clustered:
            for q in queues:
                self.shard.federation.needjobs(q)
        return ([] if proxy else None), None

    def unblock(self, b):
        b.done = True
        if b.prefix is not None:
            try:
                self.shard.prefix_waiters.remove(b)
            except ValueError:
                pass
        if self.by_client.get(b.client) is b:
            del self.by_client[b.client]
        for q in b.queues:
            q.drop_waiter(b)
            if q.fed is not None:
                self.shard.federation.waiters_left(q)

    def answer(self, b, reply, ids):
        """The reply of blocked consumer b: to the front-end, or to the connection this
        worker serves that parked it (a negative wait id, ServedCore.repl_answered)."""
        if b.reqid < 0:
            self.shard.served.repl_answered(b.reqid, reply)
        else:
            self.shard.out.append(link_msg.GetJobReply.encode(b.reqid, reply, ids))

    def release(self, b, reply):
        """Unblock b with a reply that gives it no job (-LEAVING, FLUSHALL)."""
        self.unblock(b)
        self.answer(b, reply, None)

    def unpark(self, client, wid):
        """A served connection's parked GETJOB ends with no reply (gone, handed back)."""
        b = self.by_client.get(client)
        if b is not None and b.reqid == wid:
            self.unblock(b)

    def unblock_client(self, client, reqid):
        """The front-end gave up on this consumer's GETJOB `reqid`. The answer is always
        the last message about that reqid: a null reply (local waiter) or the ack 0."""
        b = self.by_client.get(client)
        if b is not None and b.reqid == reqid:
            self.unblock(b)
            self.shard.out.append(
                link_msg.GetJobReply.encode(reqid, 0 if b.proxy else NULL_ARRAY, None))
        else:
            self.shard.replication.cancel_replication(reqid)      # an ADDJOB waiting for its copies
            self.shard.out.append(link_msg.GetJobReply.encode(reqid, 0, None))

    def serve_ready(self):
        """Give queued jobs to blocked consumers, one job each, in blocking order."""
        while self.shard.ready:
            q = self.shard.ready.pop()
            while q.blocked and len(q.jobs) and not q.paused & PAUSE_OUT:
                b = q.blocked[0]
                self.unblock(b)
                job = self.shard.fetch(q)
                item = encode_job(job, b.withcounters)
                if b.proxy:
                    self.shard.out.append(link_msg.GetJobReply.encode(b.reqid, [item], [job.id]))
                else:
                    self.answer(b, b"*1\r\n" + item, [job.id])
                if not len(q.jobs) and q.fed is not None:
                    self.shard.federation.needjobs(q, reached_zero=True)
            if q.remote is not None and len(q.jobs) and not q.paused & PAUSE_OUT:
                self.shard.federation.push_remote(q)

    def expire(self, now):
        """Consumers whose GETJOB TIMEOUT passed get a null reply."""
        for b in self.deadlines.take_due(now):
            self.unblock(b)
            self.answer(b, NULL_ARRAY, None)
