"""One worker's share of a node: its jobs, queues, timers and blocked consumers.

The code follows SPEC sections 3 (commands), 6 (job model), 7 (scheduling) and 8
(queues). Hot structures come from disque._fast; replies are produced here as RESP
bytes so the front-end only copies them to the client.
"""
import collections
import heapq
from time import perf_counter_ns

from disque._fast import resp
from disque._fast.job import (ACKED, ACTIVE, FLAG_BCAST_WILLQUEUE, FLAG_DELIVERED, QUEUED,
                              STATE_NAMES, Job)
from disque._fast.jobid import id_ttl_minutes
from disque._fast.shardcore import ShardCore, encode_job

parse_int = resp.parse_int
NULL_ARRAY = resp.NULL_ARRAY
SYNTAX_ERROR = b"-ERR syntax error\r\n"
NOT_INTEGER = b"-ERR value is not an integer or out of range\r\n"

PAUSE_IN = 1
PAUSE_OUT = 2
PAUSE_NAMES = (b"none", b"in", b"out", b"all")

QUEUE_MAX_IDLE_S = 300
SCHEDULER_BATCH = 10000


def err(msg):
    return b"-" + msg.encode() + b"\r\n"


class Blocked:
    """A consumer waiting in GETJOB on some of this worker's queues.

    proxy=False: the whole GETJOB lives here; we reply to the client (via reqid) with a
    job or, at the deadline, a null array. proxy=True: the GETJOB spans workers and the
    front-end owns it; we only offer the first job that shows up and let it decide.
    """
    __slots__ = ("client", "reqid", "queues", "withcounters", "proxy", "deadline", "done")

    def __init__(self, client, reqid, queues, withcounters, proxy, deadline):
        self.client = client
        self.reqid = reqid
        self.queues = queues
        self.withcounters = withcounters
        self.proxy = proxy
        self.deadline = deadline
        self.done = False


class Shard(ShardCore):
    def __init__(self, index, nworkers, node_id, config=None):
        super().__init__(node_id)
        self.index = index
        self.nworkers = nworkers
        self.blocked_by_client = {}
        self.block_deadlines = []             # heap of (deadline_ms, seq, Blocked)
        self.block_seq = 0
        self.out = []                         # replies/offers for the front-end
        self.config = config or {}
        self.command_ns = collections.Counter()     # service time per command (INFO commandstats)
        self.handlers = {
            b"addjob": self.cmd_addjob, b"ackjob": self.cmd_ackjob, b"fastack": self.cmd_fastack,
            b"deljob": self.cmd_deljob, b"show": self.cmd_show, b"qlen": self.cmd_qlen,
            b"qpeek": self.cmd_qpeek, b"qstat": self.cmd_qstat, b"enqueue": self.cmd_enqueue,
            b"nack": self.cmd_nack, b"dequeue": self.cmd_dequeue, b"working": self.cmd_working,
        }

    # ---- requests from the front-end ----------------------------------------------

    def execute(self, reqid, argv):
        """A whole command routed to this worker; returns its RESP reply."""
        name = argv[0].lower()
        handler = self.handlers.get(name)
        if handler is None:
            return err("ERR unknown command '%s'" % argv[0].decode(errors="replace"))
        t0 = perf_counter_ns()
        reply = handler(argv)
        self.command_ns[name] += perf_counter_ns() - t0
        return reply

    # ---- job state machine (the hot half lives in ShardCore) ----------------------------

    def ack(self, job):
        """ACK then GC (SPEC 7.4). On a lone node every copy is ours: delete at once."""
        self.dequeue(job)
        job.state = ACKED
        job.nodes_confirmed = None
        self.gc(job)

    def gc(self, job):
        job.gc_retry = min(job.gc_retry + 1, 10)
        confirmed = job.nodes_confirmed
        if confirmed is None:
            confirmed = job.nodes_confirmed = {self.node_id}
        if job.body is not None and len(job.nodes_delivered) <= len(confirmed):
            self.delete_job(job)
        elif job.body is None and self.cluster_size == 1:
            self.delete_job(job)
        else:
            delay = min(1000 * (1 << job.gc_retry), 180000) + self.rand_err()
            self.timers.schedule(job, min(job.etime * 1000 + 1000, self.now_ms + delay))

    def run_timers(self):
        """Process due jobs (SPEC 7.1) and blocked clients whose timeout passed."""
        now = self.now_ms
        for job in self.timers.pop_due(now, SCHEDULER_BATCH):
            if job.etime <= self.now_s:
                self.delete_job(job)
                self.n_expired += 1
                continue
            state = job.state
            if state == ACTIVE or state == QUEUED:
                if job.flags & FLAG_BCAST_WILLQUEUE and job.qtime - 500 <= now:
                    job.flags &= ~FLAG_BCAST_WILLQUEUE
                if state == ACTIVE and job.qtime and job.qtime <= now:
                    q = self.queues.get(job.queue)
                    if job.retry and q is not None and q.paused & PAUSE_IN:
                        job.qtime = now + job.retry * 1000 + self.rand_err()
                    elif self.enqueue(job):
                        if job.flags & FLAG_DELIVERED:
                            self.n_requeued += 1
                        continue
                elif state == QUEUED and job.retry and job.qtime <= now:
                    job.flags |= FLAG_BCAST_WILLQUEUE
                    job.qtime = now + job.retry * 1000 + self.rand_err()
                self.schedule(job)
            elif state == ACKED:
                self.gc(job)
            else:
                self.schedule(job)
        deadlines = self.block_deadlines
        while deadlines and deadlines[0][0] <= now:
            _, _, b = heapq.heappop(deadlines)
            if not b.done:
                self.unblock(b)
                self.out.append([b.reqid, NULL_ARRAY, None])
        if len(deadlines) > 1024:
            # consumers served before their timeout leave an entry behind: drop them in bulk
            live = [e for e in deadlines if not e[2].done]
            if len(live) * 2 < len(deadlines):
                heapq.heapify(live)
                self.block_deadlines = live

    # ---- GETJOB (SPEC 3.2) ------------------------------------------------------------

    def getjob(self, reqid, client, count, nohang, withcounters, timeout_ms, proxy, queue_names):
        """Serve or block a consumer. Local mode returns the full reply (or None when it
        blocked); proxy mode returns a list of encoded jobs (empty: blocked/none)."""
        t0 = perf_counter_ns()
        try:
            return self.fetch_or_block(reqid, client, count, nohang, withcounters, timeout_ms,
                                       proxy, queue_names)
        finally:
            self.command_ns[b"getjob"] += perf_counter_ns() - t0

    def fetch_or_block(self, reqid, client, count, nohang, withcounters, timeout_ms, proxy,
                       queue_names):
        queues = []
        seen = set()
        for name in queue_names:
            if name not in seen:
                seen.add(name)
                queues.append(self.get_queue(name, create=True))
        jobs = []
        while len(jobs) < count:
            got = False
            for q in queues:
                if q.paused & PAUSE_OUT or not len(q.jobs):
                    continue
                jobs.append(self.fetch(q))
                got = True
                if len(jobs) == count:
                    break
            if not got:
                break
        if jobs:
            encoded = [encode_job(j, withcounters) for j in jobs]
            ids = [j.id for j in jobs]
            if proxy:
                return encoded, ids
            return b"*%d\r\n" % len(encoded) + b"".join(encoded), ids
        if nohang:
            return ([] if proxy else NULL_ARRAY), None
        deadline = self.now_ms + timeout_ms if timeout_ms and not proxy else 0
        b = Blocked(client, reqid, queues, withcounters, proxy, deadline)
        old = self.blocked_by_client.pop(client, None)
        if old is not None:
            self.unblock(old)
        self.blocked_by_client[client] = b
        for q in queues:
            q.blocked.append(b)
        if deadline:
            self.block_seq += 1
            heapq.heappush(self.block_deadlines, (deadline, self.block_seq, b))
        return ([] if proxy else None), None

    def unblock(self, b):
        b.done = True
        if self.blocked_by_client.get(b.client) is b:
            del self.blocked_by_client[b.client]
        for q in b.queues:
            try:
                q.blocked.remove(b)
            except ValueError:
                pass

    def unblock_client(self, client, reqid):
        """The front-end gave up on this consumer's GETJOB `reqid`. The answer is always
        the last message about that reqid: a null reply (local waiter) or the ack 0."""
        b = self.blocked_by_client.get(client)
        if b is not None and b.reqid == reqid:
            self.unblock(b)
            self.out.append([reqid, 0 if b.proxy else NULL_ARRAY, None])
        else:
            self.out.append([reqid, 0, None])

    def serve_ready(self):
        """Give queued jobs to blocked consumers, one job each, in blocking order."""
        while self.ready:
            q = self.ready.pop()
            while q.blocked and len(q.jobs) and not q.paused & PAUSE_OUT:
                b = q.blocked[0]
                self.unblock(b)
                job = self.fetch(q)
                item = encode_job(job, b.withcounters)
                if b.proxy:
                    self.out.append([b.reqid, [item], [job.id]])
                else:
                    self.out.append([b.reqid, b"*1\r\n" + item, [job.id]])

    def return_jobs(self, ids):
        """Undo fetches the front-end could not deliver (consumer gone or already served)."""
        for jid in ids:
            job = self.jobs.get(jid)
            if job is None or job.state != ACTIVE:
                continue
            q = self.get_queue(job.queue, create=True)
            job.flags &= ~FLAG_DELIVERED
            job.state = QUEUED
            q.jobs.push(job)
            q.jobs_out -= 1
            self.n_delivered -= 1
            if q.blocked and not q.paused & PAUSE_OUT:
                self.ready.add(q)

    # ---- commands on job IDs (the front-end validated the IDs) ------------------------

    def cmd_ackjob(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.jobs.get(jid)
            if job is None:
                if self.cluster_size > 1 and not self.leaving and id_ttl_minutes(jid) & 1:
                    job = self.make_dummy_ack(jid)
                    self.gc(job)
                continue
            if job.state != ACKED:
                self.ack(job)
                count += 1
                self.n_acked += 1
            else:
                self.gc(job)
        return b":%d\r\n" % count

    def make_dummy_ack(self, jid):
        job = Job(jid, None, None)
        job.state = ACKED
        job.etime = self.now_s + id_ttl_minutes(jid) * 60
        self.jobs[jid] = job
        return job

    def cmd_fastack(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.jobs.get(jid)
            if job is not None:
                self.delete_job(job)
                count += 1
        return b":%d\r\n" % count

    cmd_deljob = cmd_fastack

    def cmd_enqueue(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.jobs.get(jid)
            if job is not None and job.state == ACTIVE and self.enqueue(job):
                count += 1
        return b":%d\r\n" % count

    def cmd_nack(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.jobs.get(jid)
            if job is not None and job.state == ACTIVE and self.enqueue(job, nack=True):
                count += 1
                self.n_nacked += 1
        return b":%d\r\n" % count

    def cmd_dequeue(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.jobs.get(jid)
            if job is not None and self.dequeue(job):
                count += 1
        return b":%d\r\n" % count

    def cmd_working(self, argv):
        job = self.jobs.get(argv[1])
        if job is None:
            return b"-NOJOB Job not known in the context of this node.\r\n"
        ctime_ms = job.ctime // 1000000
        life_ms = job.etime * 1000 - ctime_ms
        if life_ms > 0 and self.now_ms - ctime_ms > life_ms // 2:
            return (b"-TOOLATE Half of job TTL already elapsed, you are no longer allowed "
                    b"to postpone the next delivery.\r\n")
        if job.state != ACKED:
            self.dequeue(job)
            job.flags |= FLAG_BCAST_WILLQUEUE
            if job.retry and job.qtime:
                job.qtime = self.now_ms + job.retry * 1000 + self.rand_err()
            self.schedule(job)
        return b":%d\r\n" % job.retry

    def cmd_show(self, argv):
        job = self.jobs.get(argv[1])
        if job is None:
            return resp.NULL_BULK
        return self.show_reply(job)

    def show_reply(self, job):
        now = self.now_ms
        dummy = job.body is None
        parts = [
            b"*30\r\n$2\r\nid\r\n", resp.bulk(job.id),
            b"$5\r\nqueue\r\n", resp.NULL_BULK if dummy else resp.bulk(job.queue),
            b"$5\r\nstate\r\n", resp.bulk(STATE_NAMES[job.state]),
            b"$4\r\nrepl\r\n:%d\r\n" % job.repl,
            b"$3\r\nttl\r\n:%d\r\n" % max(0, job.etime - self.now_s),
            b"$5\r\nctime\r\n:%d\r\n" % job.ctime,
            b"$5\r\ndelay\r\n:%d\r\n" % job.delay,
            b"$5\r\nretry\r\n:%d\r\n" % job.retry,
            b"$5\r\nnacks\r\n:%d\r\n" % job.nacks,
            b"$21\r\nadditional-deliveries\r\n:%d\r\n" % job.additional_deliveries,
            b"$15\r\nnodes-delivered\r\n", resp.bulk_array(list(job.nodes_delivered)),
            b"$15\r\nnodes-confirmed\r\n",
            resp.bulk_array(sorted(job.nodes_confirmed) if job.nodes_confirmed else []),
            b"$19\r\nnext-requeue-within\r\n",
            b":%d\r\n" % max(0, job.qtime - now) if job.qtime and not dummy else resp.NULL_BULK,
            b"$17\r\nnext-awake-within\r\n",
            b":%d\r\n" % max(0, job.awakeme - now) if job.awakeme else resp.NULL_BULK,
            b"$4\r\nbody\r\n", resp.NULL_BULK if dummy else resp.bulk(job.body),
        ]
        return b"".join(parts)

    # ---- queue commands ------------------------------------------------------------------

    def cmd_qlen(self, argv):
        q = self.queues.get(argv[1])
        return b":%d\r\n" % (len(q.jobs) if q is not None else 0)

    def cmd_qpeek(self, argv):
        count = parse_int(argv[2])
        if count is None:
            return NOT_INTEGER
        q = self.queues.get(argv[1])
        if q is None or count == 0:
            return resp.EMPTY_ARRAY
        jobs = q.jobs.peek(count) if count > 0 else q.jobs.peek_tail(-count)
        return b"*%d\r\n" % len(jobs) + b"".join([encode_job(j, False) for j in jobs])

    def cmd_qstat(self, argv):
        q = self.queues.get(argv[1])
        if q is None:
            return NULL_ARRAY
        now = self.now_s
        return b"".join([
            b"*20\r\n$4\r\nname\r\n", resp.bulk(q.name),
            b"$3\r\nlen\r\n:%d\r\n" % len(q.jobs),
            b"$3\r\nage\r\n:%d\r\n" % max(0, now - q.ctime),
            b"$4\r\nidle\r\n:%d\r\n" % max(0, now - q.atime),
            b"$7\r\nblocked\r\n:%d\r\n" % len(q.blocked),
            b"$11\r\nimport-from\r\n*0\r\n",
            b"$11\r\nimport-rate\r\n:0\r\n",
            b"$7\r\njobs-in\r\n:%d\r\n" % q.jobs_in,
            b"$8\r\njobs-out\r\n:%d\r\n" % q.jobs_out,
            b"$5\r\npause\r\n", resp.bulk(PAUSE_NAMES[q.paused]),
        ])

    # ---- maintenance -----------------------------------------------------------------------

    def evict_idle_queues(self):
        """Drop queues that are empty, unpaused, unwaited and idle (SPEC 8.2)."""
        limit = self.now_s - QUEUE_MAX_IDLE_S
        stale = [name for name, q in self.queues.items()
                 if not len(q.jobs) and not q.blocked and not q.paused and q.atime <= limit]
        for name in stale:
            del self.queues[name]

    def flushall(self):
        """DEBUG FLUSHALL: drop every job and queue; waiting consumers get a null array."""
        for b in list(self.blocked_by_client.values()):
            self.unblock(b)
            self.out.append([b.reqid, None if b.proxy else NULL_ARRAY, None])
        for q in self.queues.values():
            q.jobs.clear()
        for job in self.jobs.values():
            self.timers.cancel(job)
        self.jobs.clear()
        self.queues.clear()
        self.block_deadlines.clear()
        self.ready.clear()

    def info(self):
        """Counters for INFO's node totals and per-worker lines."""
        queued = sum(len(q.jobs) for q in self.queues.values())
        return {
            "jobs": len(self.jobs),
            "queues": len(self.queues),
            "queued": queued,
            "blocked": sum(1 for b in self.blocked_by_client.values() if not b.proxy),
            "added": self.n_added,
            "delivered": self.n_delivered,
            "acked": self.n_acked,
            "nacked": self.n_nacked,
            "requeued": self.n_requeued,
            "expired": self.n_expired,
            "command_usec": {k.decode(): v // 1000 for k, v in self.command_ns.items()},
        }
