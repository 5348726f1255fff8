"""Federation: jobs move to the node where consumers wait (SPEC 8.4-8.6, NEEDJOBS / YOURJOBS).

Upstream only pulls: a node whose consumers wait broadcasts NEEDJOBS with a back-off of
2 s, 4 s, 8 s ... and nodes answer with the jobs they hold at that moment. A job added
elsewhere after the first broadcast waits for the next one, which is why its first
cross-node delivery takes seconds. Here a node whose consumers wait sends INTEREST
[queue, consumers waiting] instead: the receiver answers like NEEDJOBS and also keeps the
interest, {node: [credit, expiry]} on the queue (`Queue.remote`). When a job is queued
there and no local consumer takes it, it is pushed at once with YOURJOBS to a node with
credit left, so a waiting consumer gets it within one bus round trip.

Interest lives exactly as long as the consumers that caused it (docs/federation-interest.md):
when the last of them stops waiting (timeout, disconnect, served) the node sends INTEREST
[queue, 0] and the others drop it; a change in the number waiting is sent within 100 ms.
While consumers stay blocked the interest is refreshed once a second (expiry 2.5 s, a
safety net for a lost cancel). Plain NEEDJOBS (a NOHANG poller's back-off, the ad hoc and
"reached zero" requests to responders) only pulls what is queued now and leaves no
interest, as upstream.
"""
import math

from disque.contracts import bus_messages as bus_msg
from disque.contracts.job_codec import deserialize, serialize
from disque._fast.job import ACKED, FLAG_BCAST_QUEUED, FLAG_DELIVERED, FLAG_GROUPED, FLAG_HANDED
from disque.workers.queues import PAUSE_OUT

RESPONDER_VALID_MS = 5000
INTEREST_TTL_MS = 2500
REFRESH_MS = 1000               # interest refresh while consumers stay blocked
NEW_WAITER_MS = 50              # a changed number of waiters is told at most this often
ADHOC_BASE_MS, ADHOC_MAX_MS = 25, 2000
FETCH_MIN, FETCH_MAX = 5, 100
BCAST_BASE_MS, BCAST_MAX_MS = 2000, 30000


class FedState:
    """A queue's federation bookkeeping, created on first use (Queue.fed)."""
    __slots__ = ("responders", "last_bcast", "bcast_attempt", "last_adhoc", "adhoc_attempt",
                 "cur_start", "cur_count", "prev_start", "prev_count", "advertised",
                 "last_interest")

    def __init__(self):
        self.responders = {}            # node id -> ms of its last YOURJOBS
        self.advertised = 0             # consumers waiting as last told the others (INTEREST)
        self.last_interest = 0          # ms of that INTEREST
        self.last_bcast = 0
        self.bcast_attempt = 0
        self.last_adhoc = 0
        self.adhoc_attempt = 0
        self.cur_start = self.cur_count = self.prev_start = self.prev_count = 0

    def import_rate(self, now):
        """SPEC 8.5: jobs/s imported over the current and previous 1 s windows."""
        if not self.importing(now):
            return 0
        return math.ceil((self.prev_count + self.cur_count) * 1000
                         / max(now - self.prev_start, 50))

    def importing(self, now):
        """import_rate(now) > 0, without computing it (every NEEDJOBS asks)."""
        return self.cur_count > 0 and now - self.cur_start <= 5000

    def imported(self, now):
        if now - self.cur_start > 1000:
            self.prev_start, self.prev_count = self.cur_start, self.cur_count
            self.cur_start, self.cur_count = now, 0
        self.cur_count += 1


class Federation:
    """Needs from the shard: the ShardCore (queues, jobs, bus_out, now_ms), `interest_due`,
    and `shard.replication.send_bus`. Offers: needjobs, waiters_left, push_remote,
    tell_interest_due, federation_cron, and the NEEDJOBS / INTEREST / YOURJOBS handlers."""

    def __init__(self, shard):
        self.shard = shard

    def import_rate(self, q):
        return q.fed.import_rate(self.shard.now_ms) if q.fed is not None else 0

    def importing(self, q):
        return q.fed is not None and q.fed.importing(self.shard.now_ms)

    def needjobs(self, q, reached_zero=False):
        """Ask other nodes for jobs of `q` (SPEC 8.4); tell them how many consumers wait."""
        if self.shard.leaving or self.shard.cluster_size < 2:
            return
        now = self.shard.now_ms
        fed = q.fed
        if fed is None:
            if reached_zero:
                return                  # ignored while the import rate is 0
            fed = q.fed = FedState()
        responders = fed.responders
        for node in [n for n, t in responders.items() if now - t > RESPONDER_VALID_MS]:
            del responders[node]
        rate = fed.import_rate(now)
        if reached_zero and rate == 0:
            return
        waiting = q.waiting()
        if waiting:
            delay = REFRESH_MS if waiting == fed.advertised else NEW_WAITER_MS
            if now - fed.last_interest > delay:
                fed.last_interest = now
                fed.advertised = waiting
                self.shard.replication.send_bus(None, bus_msg.INTEREST, [q.name, waiting])
            elif waiting != fed.advertised:
                self.shard.interest_due.add(q)        # told when the rate limit allows
        else:
            # nobody blocked (GETJOB NOHANG, or a fetch emptied the queue): upstream's
            # back-off, 2 s doubling up to 30 s, reset when a new responder shows up
            delay = min(BCAST_BASE_MS << min(fed.bcast_attempt, 5), BCAST_MAX_MS)
            if now - fed.last_bcast > delay:
                fed.last_bcast = now
                fed.bcast_attempt += 1
                self.shard.replication.send_bus(None, bus_msg.NEEDJOBS, [q.name, 1])
        if responders:
            delay = min(ADHOC_BASE_MS << min(fed.adhoc_attempt, 10), ADHOC_MAX_MS)
            if reached_zero or now - fed.last_adhoc > delay:
                fed.last_adhoc = now
                fed.adhoc_attempt += 1
                to_fetch = min(max(rate // len(responders), FETCH_MIN), FETCH_MAX)
                self.shard.replication.send_bus(tuple(responders), bus_msg.NEEDJOBS,
                                                [q.name, to_fetch])

    def waiters_left(self, q):
        """Consumers stopped waiting on `q` (timeout, disconnect, served): once none is left,
        end the interest we told the other nodes, so they push nothing more here."""
        fed = q.fed
        if fed is None or not fed.advertised:
            return
        if not q.blocked:
            fed.advertised = 0
            self.shard.replication.send_bus(None, bus_msg.INTEREST, [q.name, 0])
        elif q.waiting() < fed.advertised:
            self.shard.interest_due.add(q)            # fewer waiting: lower the credit soon

    def tell_interest_due(self):
        """Each loop: INTEREST for queues whose waiters changed while rate-limited."""
        due = self.shard.interest_due
        now = self.shard.now_ms
        for q in list(due):
            fed = q.fed
            if fed is None or q.waiting() == fed.advertised or self.shard.leaving:
                due.discard(q)
            elif now - fed.last_interest > NEW_WAITER_MS:
                due.discard(q)
                if q.blocked:
                    self.needjobs(q)
                else:
                    self.waiters_left(q)

    def federation_cron(self):
        """Every 100 ms: refresh interest for every queue a local consumer is blocked on."""
        if self.shard.cluster_size < 2 or self.shard.leaving:
            return
        seen = set()
        for b in self.shard.consumers.by_client.values():
            for q in b.queues:
                if q.name not in seen:
                    seen.add(q.name)
                    if not len(q.jobs) or q.paused & PAUSE_OUT:
                        self.needjobs(q)

    def on_needjobs(self, sender, mflags, payload):
        """Upstream's pull: hand over some of what is queued here now; nothing is kept. As
        upstream, not while this node imports the queue itself: every fetch that empties a
        queue sends one, and answering them all moved jobs back and forth between busy nodes
        (INTEREST, consumers waiting now, is answered whatever the import rate)."""
        name, count = payload[0], payload[1]
        if type(name) is not bytes or type(count) is not int or count <= 0:
            return
        q = self.shard.queues.get(name)
        if q is not None and not self.importing(q):
            self.hand_over_queued(q, sender, count)

    def on_interest(self, sender, mflags, payload):
        """`count` consumers wait for `name` on `sender` (0: none any more)."""
        name, count = payload[0], payload[1]
        if type(name) is not bytes or type(count) is not int:
            return
        q = self.shard.queues.get(name)
        if count <= 0:
            if q is not None and q.remote is not None:
                q.remote.pop(sender, None)
                if not q.remote:
                    q.remote = None
            return
        if q is None:
            q = self.shard.get_queue(name, create=True)    # so the interest is there when jobs come
        if q.remote is None:
            q.remote = {}
        q.remote[sender] = [count, self.shard.now_ms + INTEREST_TTL_MS]
        self.hand_over_queued(q, sender, count)

    def hand_over_queued(self, q, node, count):
        # On INTEREST this runs even while this node imports the queue: a queued job means
        # no consumer of ours waits for it, and the asking node's consumers do. Without that,
        # a job pushed to a node whose consumer was meanwhile served elsewhere was stuck
        # there for the 5 s of the import rate.
        qlen = len(q.jobs)
        if qlen and not q.paused & PAUSE_OUT:
            n = count if qlen >= 2 * count else max(1, qlen // 2)
            self.send_jobs(q, node, n)

    def push_remote(self, q):
        """Jobs queued while other nodes' consumers wait on `q`: hand them over."""
        remote = q.remote
        now = self.shard.now_ms
        for node in [n for n, (credit, exp) in remote.items() if exp < now or credit <= 0]:
            del remote[node]
        if not remote:
            q.remote = None
            return
        for node in sorted(remote, key=lambda n: remote[n][1]):
            if not len(q.jobs) or q.paused & PAUSE_OUT:
                break
            self.send_jobs(q, node, min(remote[node][0], len(q.jobs)))

    def send_jobs(self, q, node, n):
        """YOURJOBS: fetch n jobs from the head of q like a consumer would (SPEC 8.6)."""
        entry = q.remote.get(node) if q.remote is not None else None
        if entry is not None:
            entry[0] -= n
        jobs = []
        while len(jobs) < n:
            job = self.shard.fetch(q)
            if job is None:
                break
            self.shard.n_delivered -= 1       # moved, not delivered to a consumer
            if node not in job.nodes_delivered:
                job.nodes_delivered = job.nodes_delivered + (node,)
            jobs.append(job)
        if not jobs:
            return
        now_s = self.shard.now_s
        self.shard.replication.send_bus((node,), bus_msg.YOURJOBS,
                                        [serialize(j, False, now_s) for j in jobs])
        for job in jobs:
            # at-most-once: only one copy may exist. A group's head stays here, never to
            # be queued again, as its group's head until its ACK comes (docs/job-groups.md)
            if job.retry == 0 and not job.flags & FLAG_GROUPED:
                self.shard.forget_job(job)

    def on_yourjobs(self, sender, mflags, payload):
        now = self.shard.now_ms
        for data in payload:
            job, _ = deserialize(data, 0, False, self.shard.now_s, now, self.shard.rand_err())
            local = self.shard.find_job(job.id)
            if local is not None:
                if local.state == ACKED or local.body is None:
                    continue
                self.shard.replication.merge_nodes(local, job.nodes_delivered + (sender,))
                job = local
            else:
                q = self.shard.queues.get(job.queue)
                if q is not None:
                    job.queue = q.name
                nodes = self.shard.replication.known_nodes(job.nodes_delivered)
                if self.shard.node_id not in nodes:
                    nodes += (self.shard.node_id,)
                if sender not in nodes:
                    nodes += (sender,)
                job.nodes_delivered = nodes
                self.shard.register_job(job)
                if job.ext is not None:
                    self.shard.replication.join_copy(job)
            job.flags &= ~(FLAG_BCAST_QUEUED | FLAG_DELIVERED)
            if job.flags & FLAG_GROUPED:
                # a group's head, queued by its sender (its home, or a node it handed it
                # to): queued here too, whatever this node's place in the group
                job.flags |= FLAG_HANDED
            if job.retry == 0:
                job.qtime = now         # an at-most-once job may be queued here once
            if self.shard.enqueue(job):
                q = self.shard.queues[job.queue]
                fed = q.fed
                if fed is None:
                    fed = q.fed = FedState()
                if sender not in fed.responders:
                    fed.bcast_attempt = 0
                fed.responders[sender] = now
                fed.imported(now)
                fed.adhoc_attempt = 0
            else:
                self.shard.schedule(job)
