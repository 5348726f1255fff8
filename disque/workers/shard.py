"""One worker's share of a node: its jobs, queues and timers, the commands it executes, and
its parts (docs/design.md, "Shard parts").

The code follows SPEC sections 3 (commands), 6 (job model), 7 (scheduling) and 8
(queues). Hot structures come from disque._fast; replies are produced here as RESP
bytes so the front-end only copies them to the client.
"""
import heapq
from time import perf_counter_ns

from disque import replies
from disque import commands as commands_mod
from disque._fast import resp
from disque._fast.addjob import ReplWait
from disque._fast.job import (ACKED, ACTIVE, FLAG_BCAST_WILLQUEUE, FLAG_DELIVERED, FLAG_GROUPED,
                              FLAG_HELD, QUEUED, STATE_NAMES, WAIT_REPL, expire_ms,
                              mark_queued, retry_interval_msec)
from disque._fast.dispatch import ids_end, nack_delay
from disque.statslog import TOP_QUEUES, LatencyHistogram
from disque._fast.ackpath import ShardAcks
from disque.contracts import bus_messages as bus_msg
from disque.contracts import worker_link as link_msg
from disque.workers.consumers import Consumers
from disque.workers.federation import Federation
from disque.workers.job_features import JobFeatures
from disque.workers.memory import Memory
from disque.workers.persistence import Persistence
from disque.workers.queues import PAUSE_IN, PAUSE_OUT, QueueCommands
from disque.workers.scan_share import scan_share
from disque.workers.spill import Spill
from disque.workers.replication import NOREPL_REMOVED, Replication

parse_int = resp.parse_int
NULL_ARRAY = resp.NULL_ARRAY
SYNTAX_ERROR = replies.SYNTAX_ERROR
NOT_INTEGER = replies.NOT_INTEGER

SCHEDULER_BATCH = 10000


def err(msg):
    return b"-" + msg.encode() + b"\r\n"


# attribute of Shard -> the part's class (tests resolve "part.method" handler names here)
SHARD_PARTS = {
    "consumers": Consumers,
    "queue_commands": QueueCommands,
    "memory": Memory,
    "features": JobFeatures,
    "federation": Federation,
    "persistence": Persistence,
    "replication": Replication,
}

# the hooks the Cython core calls (declared in shardcore.pxd): hook -> method
SHARD_HOOKS = {
    "aof_loadjob": "persistence.write_loadjob",
    "aof_deljob": "persistence.aof_deljob",
    "queue_created": "features.offer_new_queue",
    "evict_for_oom": "memory.free_memory",
    "load_cold": "spill.fault_in",
}


class Shard(ShardAcks):
    """A worker's jobs and queues: the Cython ShardCore (the job record, queues, timers,
    ADDJOB / enqueue / fetch) and ShardAcks (ACKJOB, acked jobs and their GC), plus the
    commands and timers here, and its parts
    (docs/design.md, "Shard parts"): `consumers` (GETJOB's blocked consumers),
    `queue_commands` (QLEN / QPEEK / QSTAT / PAUSE, idle queues), `memory` (limits and
    eviction), `features` (NACK delay, back-off, dead letters, FROM-PREFIX), `federation`
    (NEEDJOBS / INTEREST / YOURJOBS), `persistence` (its AOF) and `replication` (copies on
    other nodes, requeue coordination, acks and GC)."""

    def __init__(self, index, nworkers, node_id, config=None):
        super().__init__(node_id)
        self.index = index
        self.nworkers = nworkers
        self.interest_due = set()             # queues whose INTEREST waits for its rate limit; never replaced
        self.out = []                         # replies/offers for the front-end
        self.config = config or {}
        self.tallies = {}                           # per command: service time, calls (ShardCore.tally)
        self.n_deleted = 0                          # jobs removed by DELJOB / FASTACK
        self.latency = LatencyHistogram()           # service time distribution (stats log)
        self.latency_counts = self.latency.counts   # (its list, updated inline per command)
        self.consumers = Consumers(self)
        self.queue_commands = QueueCommands(self)
        self.memory = Memory(self)
        self.features = JobFeatures(self)
        self.federation = Federation(self)
        self.persistence = Persistence(self)
        self.replication = Replication(self)     # its bus handlers include federation's
        self.spill = Spill(self)
        self.served = None       # ServedClients, when this worker serves connections itself
        self.job_links = None    # JobLinks, when copies go to other nodes' workers directly
        self.handlers = commands_mod.worker_handlers(self)    # disque/commands.py (parts first)
        for hook, handler in SHARD_HOOKS.items():
            setattr(self, hook, commands_mod.resolve(self, handler))

    # ---- requests from the front-end ----------------------------------------------

    def execute(self, reqid, argv):
        """A whole command routed to this worker; returns its RESP reply. The handlers are
        the `worker` names of disque/commands.py, whose `front` names give each command's
        front-end half (the core's route, or Routing.route_ids for multi-ID commands)."""
        name = argv[0].lower()
        handler = self.handlers.get(name)
        if handler is None:
            return err("ERR unknown command '%s'" % argv[0].decode(errors="replace"))
        t0 = perf_counter_ns()
        reply = self.run_with_copies(reqid, name, handler, argv)
        self.account(name, perf_counter_ns() - t0)
        return reply

    def run_with_copies(self, reqid, name, handler, argv):
        """run_command, and for an ADDJOB that needs copies on other nodes its replication:
        the reply now, or None while the producer waits (its reply then comes through
        answer(reqid, ...)). The link's path (execute) and the served one
        (ServedCore.addjob_clustered) both come here."""
        reply = self.run_command(name, handler, argv)
        if type(reply) is ReplWait:
            reply = self.replication.replicate_new(reqid, reply)    # copies on other nodes
        return reply

    def answer(self, reqid, reply):
        """The late reply of a producer's ADDJOB that waited for its copies: to the
        front-end, or (a negative wait id) to the connection this worker serves
        (ServedCore.repl_answered)."""
        if reqid < 0:
            self.served.repl_answered(reqid, reply)
        else:
            self.out.append(link_msg.Reply.encode(reqid, reply))

    # ---- job state machine (the hot half lives in ShardCore) ----------------------------

    def run_timers(self):
        """Process due jobs (SPEC 7.1) and blocked clients whose timeout passed."""
        now = self.now_ms
        for job in self.timers.pop_due(now, SCHEDULER_BATCH):
            if expire_ms(job) <= now:
                if job.state == WAIT_REPL:
                    self.replication.expire_waiting(job)
                else:
                    self.forget_job(job)
                self.n_expired += 1
                continue
            state = job.state
            if state == ACTIVE or state == QUEUED:
                if job.flags & FLAG_BCAST_WILLQUEUE and job.qtime - 500 <= now:
                    job.flags &= ~FLAG_BCAST_WILLQUEUE
                    if state == ACTIVE and len(job.nodes_delivered) > 1:
                        self.replication.send_bus(job.nodes_delivered, bus_msg.WILLQUEUE,
                                                  [job.id, 0])
                if state == ACTIVE and job.qtime and job.qtime <= now:
                    q = self.queues.get(job.queue)
                    if job.retry and q is not None and q.paused & PAUSE_IN:
                        job.qtime = now + retry_interval_msec(job) + self.rand_err()
                    elif self.enqueue(job):
                        if job.flags & FLAG_DELIVERED:
                            self.n_requeued += 1
                        continue
                    elif job.flags & FLAG_GROUPED and not job.flags & FLAG_HELD:
                        self.replication.remind_home(job)   # a group's head, its home elsewhere
                elif state == QUEUED and job.retry and job.qtime <= now:
                    job.flags |= FLAG_BCAST_WILLQUEUE
                    job.qtime = now + retry_interval_msec(job) + self.rand_err()
                    if job.ext is not None and job.ext.origin is not None:
                        self.features.announce_dead_letter(job)
                self.schedule(job)
            elif state == ACKED:
                self.gc(job)
            else:
                self.schedule(job)
        if self.consumers.deadlines.due(now):
            self.consumers.expire(now)

    # ---- GETJOB (SPEC 3.2) ------------------------------------------------------------

    def getjob(self, request):
        """GETJOB's worker half for the front-end's message and another worker's NOHANG
        one, counted in the command statistics (a served connection's GETJOB goes to
        Consumers.fetch_or_block from ServedCore.getjob_served, counted with the other
        commands of its turn): a GetjobRequest (contracts/getjob_options.py); the front
        half is disque/frontend/getjob.py. Serve or block a consumer: (reply, job ids).
        Local mode replies in full (None when it blocked); proxy mode with a list of
        encoded jobs (empty: blocked or none)."""
        t0 = perf_counter_ns()
        try:
            return self.consumers.fetch_or_block(request)
        finally:
            self.account(b"getjob", perf_counter_ns() - t0)

    def any_ready(self, queue_names):
        """Whether GETJOB FROM these queues would get a job now (no blocking)."""
        queues = self.queues
        for name in queue_names:
            q = queues.get(name)
            if q is not None and len(q.jobs) and not q.paused & PAUSE_OUT:
                return True
        return False

    def leaving_cron(self):
        """CLUSTER LEAVING yes: consumers blocked here get -LEAVING (SPEC 8.7), and so do
        producers whose copies are still not confirmed after a cron pass (SPEC 3.1)."""
        if self.replication.repl_waits:
            self.replication.repl_leaving_cron()
        for b in list(self.consumers.by_client.values()):
            self.consumers.release(b, replies.LEAVING_ERROR)

    def return_jobs(self, ids):
        """Undo fetches the front-end could not deliver (consumer gone or already served)."""
        for jid in ids:
            job = self.find_job(jid)
            if job is None or job.state != ACTIVE:
                continue
            q = self.get_queue(job.queue, create=True)
            job.flags &= ~FLAG_DELIVERED
            mark_queued(job)
            q.jobs.push(job)
            q.jobs_out -= 1
            self.n_delivered -= 1
            if q.blocked and not q.paused & PAUSE_OUT:
                self.ready.add(q)

    # ---- commands on job IDs (the front-end validated the IDs) ------------------------

    def cmd_fastack(self, argv):
        """Best effort: DELJOB to every node that may have a copy (all nodes for an unknown
        ID), then delete here (SPEC 3.4)."""
        count = 0
        clustered = self.cluster_size > 1
        for jid in argv[1:]:
            job = self.find_job(jid)
            if job is not None:
                if clustered:
                    self.replication.send_bus(job.nodes_delivered, bus_msg.DELJOB, [jid, 0])
                self.forget_job(job)
                count += 1
            elif clustered:
                self.replication.send_bus(None, bus_msg.DELJOB, [jid, 0])
        self.n_deleted += count
        return b":%d\r\n" % count

    def cmd_deljob(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.find_job(jid)
            if job is not None:
                wait = self.replication.repl_waits.get(jid)
                if wait is not None and job.state == WAIT_REPL:
                    self.replication.repl_failed(wait, NOREPL_REMOVED)
                else:
                    self.forget_job(job)
                count += 1
        self.n_deleted += count
        return b":%d\r\n" % count

    def cmd_enqueue(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.find_job(jid)
            if job is not None and job.state == ACTIVE and self.enqueue(job):
                count += 1
        return b":%d\r\n" % count

    def cmd_nack(self, argv):
        """NACK <id> ... [DELAY <seconds>] (the dispatch kernel checked the IDs and the delay)."""
        end = ids_end(argv)
        ids = argv[1:end]
        delay_ms = nack_delay(argv) * 1000 if end < len(argv) else 0
        count = 0
        for jid in ids:
            job = self.find_job(jid)
            if job is None or job.state != ACTIVE:
                continue
            wait = delay_ms
            if not wait and job.ext is not None and job.ext.backoff:
                wait = retry_interval_msec(job)     # BACKOFF: a NACK waits its turn too
            if self.features.nack_later(job, wait) if wait else self.enqueue(job, nack=True):
                count += 1
                self.n_nacked += 1
        return b":%d\r\n" % count

    def cmd_dequeue(self, argv):
        count = 0
        for jid in argv[1:]:
            job = self.find_job(jid)
            if job is not None and self.dequeue(job):
                count += 1
        return b":%d\r\n" % count

    def cmd_working(self, argv):
        job = self.find_job(argv[1])
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
                job.qtime = self.now_ms + retry_interval_msec(job) + self.rand_err()
            self.schedule(job)
            if len(job.nodes_delivered) > 1:
                self.replication.send_bus(job.nodes_delivered, bus_msg.WORKING, [job.id, 0])
        return b":%d\r\n" % job.retry

    def cmd_show(self, argv):
        job = self.find_job(argv[1])
        if job is None:
            return resp.NULL_BULK
        return self.show_reply(job)

    def show_reply(self, job):
        now = self.now_ms
        dummy = job.body is None
        extra_count, extra = (self.features.show_options(job) if job.ext is not None
                              else (0, None))
        parts = [
            b"*%d\r\n$2\r\nid\r\n" % (30 + extra_count), resp.bulk(job.id),
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
        if extra:
            parts.extend(extra)
        return b"".join(parts)

    # ---- QSCAN / JSCAN, this worker's share (SPEC 3.11; the front-end drives the cursor) ----

    def scan(self, kind, low, bits, bound, count, steps, opts):
        """This worker's share of a QSCAN / JSCAN call (disque/workers/scan_share.py)."""
        return scan_share(self, kind, low, bits, bound, count, steps, opts)

    # ---- maintenance -----------------------------------------------------------------------

    def flushall(self):
        """DEBUG FLUSHALL / CLUSTER RESET: drop every job and queue; waiting consumers get a
        null array, producers waiting for copies -NOREPL."""
        for wait in list(self.replication.repl_waits.values()):
            self.replication.end_wait(wait)
            self.answer(wait.reqid, NOREPL_REMOVED)
        for b in list(self.consumers.by_client.values()):
            self.consumers.release(b, None if b.proxy else NULL_ARRAY)
        self.spill.clear()
        for q in self.queues.values():
            q.jobs.clear()
        for job in self.jobs.values():
            self.timers.cancel(job)
        self.jobs.clear()
        self.queues.clear()
        self.groups.clear()
        self.job_log.clear()
        self.queue_log.clear()
        self.data_bytes = 0
        self.spill.account()
        self.consumers.deadlines.clear()
        self.ready.clear()
        self.interest_due.clear()

    def info(self):
        """Counters for INFO's node totals and per-worker lines."""
        queued = sum(q.length() for q in self.queues.values())
        return {
            # spilled jobs too: registered_jobs:0 tells an operator a LEAVING node holds
            # nothing and can go (SPEC 8.7), and a spilled copy may be a job's last one
            "jobs": len(self.jobs) + self.spill.index.count,
            "queues": len(self.queues),
            "queued": queued,
            # INFO blocked_clients counts producers waiting for copies too (SPEC 14)
            "blocked": sum(1 for b in self.consumers.by_client.values() if not b.proxy)
            + len(self.replication.repl_waits),
            "added": self.n_added,
            "delivered": self.n_delivered,
            "acked": self.n_acked,
            "nacked": self.n_nacked,
            "requeued": self.n_requeued,
            "expired": self.n_expired,
            "deleted": self.n_deleted,
            "data_bytes": self.data_bytes,
            "dead_lettered": {k.decode(errors="replace"): v
                              for k, v in self.dead_lettered.items()},
            "groups": self.groups.count,
            "group_jobs": self.groups.members,
            "group_held": self.groups.members - self.groups.count,
            "bus_in": {bus_msg.NAMES[t]: n for t, n in self.replication.bus_in.items()},
            "bus_out": {bus_msg.NAMES[t]: n for t, n in self.replication.bus_sent.items()},
            "command_usec": {k.decode(): v // 1000 for k, v in self.command_ns.items()},
            "commands": {k.decode(): v for k, v in self.command_count.items()},
            "latency_counts": list(self.latency.counts),
            "spill": self.spill.stats(),
            "top_queues": [{"queue": q.name.decode(errors="replace"), "len": q.length(),
                            "jobs_in": q.jobs_in, "jobs_out": q.jobs_out}
                           for q in heapq.nlargest(TOP_QUEUES, self.queues.values(),
                                                   key=lambda q: q.length())],
        }
