"""Delayed NACK, retry back-off, dead-letter queues and GETJOB FROM-PREFIX: a worker's side
(docs/job-features.md).

The enqueue rule itself (back-off interval, the dead-letter move) is in ShardCore.enqueue;
here are the parts around it:
  * `nack_later`: NACK ... DELAY (or NACK of a BACKOFF job): counted now, queued later;
    the other copies learn the delay from WORKING (aux = the delay in ms, INCR_NACKS), so
    none of them requeues the job before it ends;
  * the dead-letter agreement between copies: a copy moved to its dead-letter queue says
    so on every QUEUED it sends (flag DEADLETTERED) and every copy that hears it moves too;
    a moved copy that hears a QUEUED from one that has not moved answers with its own
    QUEUED + DEADLETTERED, and while it sits queued it repeats that every retry interval,
    so after a partition heals the copies converge on one job, queued in one queue;
  * counters of jobs with options travel as aux = nacks << 16 | additional deliveries on
    QUEUED and merge by maximum, so every copy takes the same dead-letter decision;
  * FROM-PREFIX waiters joining queues created while they wait.
"""
from disque._fast import resp
from disque._fast.job import (FLAG_BCAST_QUEUED, FLAG_DELIVERED, FLAG_BCAST_WILLQUEUE,
                              FLAG_NACK_PENDING, QUEUED, retry_interval)
from disque.contracts import bus_messages as bus_msg


def counters_aux(job):
    return (job.nacks << 16) | job.additional_deliveries


class JobFeatures:
    """Needs from the shard: the ShardCore (enqueue, schedule, the dead-letter move) and
    `shard.replication.send_bus`. Offers: nack_later, announce_dead_letter, merge_counters,
    show_options, offer_new_queue (the core's `queue_created` hook)."""

    def __init__(self, shard):
        self.shard = shard

    # ---- NACK ... DELAY -----------------------------------------------------------------

    def nack_later(self, job, delay_ms):
        """Count a NACK now and queue the job again in `delay_ms` (False for a job that is
        never queued again, like enqueue)."""
        if job.qtime == 0 or (job.retry == 0 and job.flags & FLAG_DELIVERED):
            return False
        job.nacks = min(job.nacks + 1, 65535)
        # the coming requeue is this NACK's: it counts nothing more, and it is a re-queue
        job.flags |= FLAG_NACK_PENDING | FLAG_BCAST_QUEUED | FLAG_BCAST_WILLQUEUE
        job.qtime = self.shard.now_ms + delay_ms
        self.shard.schedule(job)
        if len(job.nodes_delivered) > 1:
            self.shard.replication.send_bus(job.nodes_delivered, bus_msg.WORKING,
                                            [job.id, delay_ms], bus_msg.INCR_NACKS)
        return True

    # ---- dead-letter agreement between copies ---------------------------------------------

    def announce_dead_letter(self, job, dest=None):
        if len(job.nodes_delivered) > 1 or dest is not None:
            self.shard.replication.send_bus(dest or job.nodes_delivered, bus_msg.QUEUED,
                          [job.id, counters_aux(job)], bus_msg.DEADLETTERED)

    def merge_counters(self, job, mflags, aux, working):
        """A QUEUED / WORKING about `job`: its counters, then the dead-letter state.
        Returns True when our queued copy must stay queued whatever the tie-break says."""
        if working:
            if mflags & bus_msg.INCR_NACKS:
                job.nacks = min(job.nacks + 1, 65535)
        elif aux:
            job.nacks = max(job.nacks, (aux >> 16) & 0xffff)
            job.additional_deliveries = max(job.additional_deliveries, aux & 0xffff)
        else:
            if mflags & bus_msg.INCR_NACKS:
                job.nacks = min(job.nacks + 1, 65535)
            if mflags & bus_msg.INCR_DELIV:
                job.additional_deliveries = min(job.additional_deliveries + 1, 65535)
        ext = job.ext
        if ext is None:
            return False
        moved = ext.origin is not None
        if mflags & bus_msg.DEADLETTERED:
            if not moved:
                # the sender's copy is in the dead-letter queue: ours follows it there
                if job.state == QUEUED:
                    self.shard.dequeue(job)
                self.shard.move_to_dead_letter(job)
                if self.shard.aof_on:
                    self.shard.aof_loadjob(job)
            return False
        if moved:
            return True         # the sender has not moved yet: our answer tells it
        return False

    # ---- SHOW ------------------------------------------------------------------------------

    def show_options(self, job):
        """SHOW's extra fields for a job with options: (how many RESP elements, their
        parts). 5 name/value pairs, and for a job of a group 2 more (docs/job-groups.md)."""
        ext = job.ext
        group = [] if ext.group is None else [
            b"$5\r\ngroup\r\n", resp.bulk(ext.group),
            b"$9\r\ngroup-seq\r\n:%d\r\n" % ext.group_seq]
        return (10 if ext.group is None else 14), group + [
            b"$14\r\nretry-interval\r\n:%d\r\n" % retry_interval(job),
            b"$7\r\nbackoff\r\n:%d\r\n" % ext.backoff,
            b"$14\r\nmax-deliveries\r\n:%d\r\n" % ext.max_deliveries,
            b"$10\r\ndeadletter\r\n",
            resp.NULL_BULK if ext.deadletter is None else resp.bulk(ext.deadletter),
            b"$18\r\ndead-lettered-from\r\n",
            resp.NULL_BULK if ext.origin is None else resp.bulk(ext.origin),
        ]

    # ---- GETJOB FROM-PREFIX ------------------------------------------------------------------

    def offer_new_queue(self, q):
        """The shard's `queue_created` hook: ShardCore.get_queue made a queue while
        FROM-PREFIX consumers wait."""
        for b in self.shard.prefix_waiters:
            if not b.done and q.name.startswith(b.prefix):
                b.queues.append(q)
                q.add_waiter(b)
