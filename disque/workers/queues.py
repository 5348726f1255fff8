"""A worker's queue commands and the life of its queues (SPEC 3.5-3.8, 3.10, 3.12, 8.2):
QLEN, QPEEK, QSTAT, PAUSE, and the eviction of idle queues. The Queue record, its jobs
and the enqueue rule are ShardCore's (disque/_fast/shardcore.pyx), as queue.c's are
beside job.c in the original."""
from disque import replies
from disque._fast import resp
from disque._fast.job import FLAG_DELIVERED, QUEUED
from disque._fast.jobreply import encode_job
from disque.contracts import bus_messages as bus_msg
from disque.contracts.queue_rows import PAUSE_NAMES
from disque._fast.shardcore import QueuePause

parse_int = resp.parse_int

# a queue's PAUSE bits, defined once in shardcore.pxd (the Python parts import them from here)
PAUSE_IN = int(QueuePause.PAUSE_IN)
PAUSE_OUT = int(QueuePause.PAUSE_OUT)
QUEUE_MAX_IDLE_BY_LEVEL = (300, 10, 2)    # seconds, by memory level (SPEC 8.2)
QPEEK_MAX = 1 << 62


def job_order(job):
    """Queue order (SPEC 6.3): creation time, then ID."""
    return job.ctime, job.id


class QueueCommands:
    """Needs from the shard: the ShardCore (queues, get_queue, remove_queue, ready,
    cluster_size, memory_level), `shard.federation` (QSTAT's import rate) and
    `shard.replication.send_bus` (PAUSE ... BCAST). Offers: the queue commands,
    set_pause (also PAUSE from the bus), evict_idle_queues (worker cron, eviction)."""

    def __init__(self, shard):
        self.shard = shard

    def cmd_qlen(self, argv):
        q = self.shard.queues.get(argv[1])
        return b":%d\r\n" % (q.length() if q is not None else 0)

    def cmd_qpeek(self, argv):
        count = parse_int(argv[2])
        if count is None:
            return replies.NOT_INTEGER
        q = self.shard.queues.get(argv[1])
        if q is None or count == 0:
            return resp.EMPTY_ARRAY
        jobs = self.peek(q, count)
        return b"*%d\r\n" % len(jobs) + b"".join([encode_job(j, False) for j in jobs])

    def peek(self, q, count):
        """The first `count` queued jobs of q (the last -count, newest first, when count < 0),
        spilled ones included: QPEEK and the console's job pages."""
        # |count| may not fit a Py_ssize_t (QPEEK q -9223372036854775808): no queue is longer
        count = max(-QPEEK_MAX, min(count, QPEEK_MAX))
        jobs = q.jobs.peek(count) if count > 0 else q.jobs.peek_tail(-count)
        if q.cold is not None and len(q.cold):
            # spilled jobs sit between the head kept in RAM and the newest, not spilled yet
            cold = self.shard.spill.peek(q, abs(count), count < 0)
            jobs = sorted(jobs + cold, key=job_order, reverse=count < 0)[:abs(count)]
        return jobs

    def cmd_qstat(self, argv):
        q = self.shard.queues.get(argv[1])
        if q is None:
            return resp.NULL_ARRAY
        now = self.shard.now_s
        groups = self.group_fields(q.name)
        return b"".join([
            b"*%d\r\n$4\r\nname\r\n" % (20 + 2 * len(groups)), resp.bulk(q.name),
            b"$3\r\nlen\r\n:%d\r\n" % q.length(),
            b"$3\r\nage\r\n:%d\r\n" % max(0, now - q.ctime),
            b"$4\r\nidle\r\n:%d\r\n" % max(0, now - q.atime),
            b"$7\r\nblocked\r\n:%d\r\n" % q.waiting(),
            b"$11\r\nimport-from\r\n",
            resp.bulk_array(sorted(q.fed.responders) if q.fed is not None else []),
            b"$11\r\nimport-rate\r\n:%d\r\n" % self.shard.federation.import_rate(q),
            b"$7\r\njobs-in\r\n:%d\r\n" % q.jobs_in,
            b"$8\r\njobs-out\r\n:%d\r\n" % q.jobs_out,
            b"$5\r\npause\r\n", resp.bulk(PAUSE_NAMES[q.paused]),
        ] + groups)

    def group_stats(self, name):
        """(groups with jobs, groups whose head is delivered and not finished, jobs held
        behind their head) of queue `name`, over the groups this node is the home of
        (docs/job-groups.md): in a cluster the other nodes that hold their jobs do not
        count them, so QSTAT ... CLUSTER counts each group once."""
        groups = self.shard.groups
        count, held = groups.of_queue(name)
        if not count:
            return 0, 0, 0
        jobs = self.shard.jobs
        blocked = 0
        for g in groups.by_queue[name].values():
            head = jobs.get(g.head)
            if (head is not None and head.state != QUEUED and head.flags & FLAG_DELIVERED
                    and groups.home_here(g)):
                blocked += 1
        return count, blocked, held

    def group_fields(self, name):
        """QSTAT's group fields, for a queue that has groups (a queue without any keeps
        the original's reply)."""
        count, blocked, held = self.group_stats(name)
        if not count:
            return []
        return [b"$6\r\ngroups\r\n:%d\r\n" % count,
                b"$14\r\ngroups-blocked\r\n:%d\r\n" % blocked,
                b"$4\r\nheld\r\n:%d\r\n" % held]

    def cmd_pause(self, argv):
        """PAUSE <queue> <opt> ... (SPEC 3.12): options left to right, all or nothing."""
        flags = 0
        update = False
        bcast = False
        for opt in argv[2:]:
            opt = opt.lower()
            if opt == b"none":
                flags = 0
                update = True
            elif opt == b"in":
                flags |= PAUSE_IN
                update = True
            elif opt == b"out":
                flags |= PAUSE_OUT
                update = True
            elif opt == b"all":
                flags |= PAUSE_IN | PAUSE_OUT
                update = True
            elif opt == b"state":
                pass
            elif opt == b"bcast":
                bcast = True
            else:
                return replies.SYNTAX_ERROR
        q = self.shard.queues.get(argv[1])
        if q is None and update and flags:
            q = self.shard.get_queue(argv[1], create=True)
        if q is not None and update:
            self.set_pause(q, flags)
        state = q.paused if q is not None else 0
        if bcast and self.shard.cluster_size > 1:
            self.shard.replication.send_bus(None, bus_msg.PAUSE, [argv[1], state])
        return b"+%s\r\n" % PAUSE_NAMES[state]

    def set_pause(self, q, flags):
        old = q.paused
        q.paused = flags
        if old & PAUSE_OUT and not flags & PAUSE_OUT and (q.blocked or q.remote) and len(q.jobs):
            self.shard.ready.add(q)     # consumers blocked while it was paused get served now

    def evict_idle_queues(self, max_idle=None):
        """Drop queues that are empty, unpaused, unwaited and idle (SPEC 8.2): idle for 300 s,
        10 s above 75% of maxmemory, 2 s above 95%."""
        shard = self.shard
        if max_idle is None:
            max_idle = QUEUE_MAX_IDLE_BY_LEVEL[min(shard.memory_level, 2)]
        limit = shard.now_s - max_idle
        now = shard.now_ms
        grouped = shard.groups.by_queue     # a queue whose groups wait on a job stays
        stale = [q for q in shard.queues.values()
                 if not q.length() and not q.blocked and not q.paused and q.atime <= limit
                 and (q.remote is None or all(exp < now for _, exp in q.remote.values()))
                 and q.name not in grouped]
        for q in stale:
            if q.cold is not None:
                shard.spill.index.drop_ring(q.cold)     # empty: its jobs all came back
                q.cold = None
            shard.remove_queue(q)
