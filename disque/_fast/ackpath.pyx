# cython: language_level=3
"""Acknowledgements and their garbage collection in C (SPEC 7.4; docs/design.md, "The ack
path"): every acknowledged job of a cluster passes here on each node that holds a copy.

- `ShardAcks` is the shard's side, between ShardCore and disque.workers.shard.Shard: ACKJOB,
  a job acked (`set_acked`), its GC passes and their timer, a job found by ID (spilled ones
  included) and a job forgotten with its DELJOB record.
- `AckMessages` is the replication's side, between ReplicationCore and
  disque.workers.replication.Replication: SETACK, GOTACK and DELJOB from other nodes, and
  the SETACKs a GC pass sends.

In Python these were about a twentieth of the busiest worker of the fault harness' workload
(py-spy, docs/benchmarks.md) and the largest share of a cluster drain's Python frames.
"""
from disque._fast.job cimport (Job, JOB_ACKED, JOB_ACTIVE, JOB_QUEUED, JOB_WAIT_REPL,
                               JOB_FLAG_GROUPED, expire_ms, mark_acked)
from disque._fast.jobid cimport id_ttl_minutes
from disque._fast.addjob cimport ReplWait
from disque._fast.replcore cimport ReplicationCore
from disque._fast.shardcore cimport ShardCore

from disque.contracts import bus_messages as _bus

cdef long SETACK = _bus.SETACK
cdef long GOTACK = _bus.GOTACK
cdef long DELJOB = _bus.DELJOB
DEF GC_RETRY_MAX = 10          # the GC's back-off doubles up to 2**10 s, capped below
DEF GC_DELAY_MAX_MS = 180000   # 3 minutes (SPEC 7.4)

NOREPL_REMOVED = (b"-NOREPL job removed (expired?) before the requested replication "
                  b"level was achieved\r\n")


cdef class ShardAcks(ShardCore):
    """Needs `replication` (an AckMessages) and the ShardCore hooks `aof_deljob` and
    `load_cold`; `make_dummy_ack` here registers the record of an ID acked while its job
    is unknown (SPEC 7.4, dummy ACKs)."""

    cpdef object find_job(self, jid):
        """The job `jid`, loaded back first if it was spilled (disque/workers/spill.py)."""
        job = self.jobs.get(jid)
        if job is None and self.cold_jobs:
            job = self.load_cold(jid)
        return job

    cpdef forget_job(self, Job job):
        """Delete a job; an active/queued one is logged as DELJOB to the AOF (SPEC 12)."""
        if self.aof_on and (job.state == JOB_ACTIVE or job.state == JOB_QUEUED):
            self.aof_deljob(job)
        self.delete_job(job)

    cpdef ack(self, Job job):
        """ACK then GC (SPEC 7.4). On a lone node every copy is ours: delete at once."""
        if self.cluster_size == 1 and job.body is not None and len(job.nodes_delivered) <= 1:
            if self.aof_on and job.state != JOB_ACKED:
                self.aof_deljob(job)
            self.delete_job(job)        # what set_acked + gc come to here, without a timer
            return
        self.set_acked(job)
        self.gc(job)

    cpdef set_acked(self, Job job):
        """ACKJOB / SETACK: out of its queue, acked (the state change itself is
        `mark_acked`), logged as DELJOB, GC scheduled."""
        if self.aof_on and job.state != JOB_ACKED:
            self.aof_deljob(job)
        self.dequeue(job)
        mark_acked(job)
        if job.flags & JOB_FLAG_GROUPED:
            self.group_done(job)        # acked: finished for its group
        job.nodes_confirmed = None
        self.schedule_gc(job)

    cpdef gc(self, Job job):
        """A GC pass: delete the job once every node that may hold it confirmed, else ask
        those that did not (SETACK) and try again later."""
        job.gc_retry = min(job.gc_retry + 1, GC_RETRY_MAX)
        confirmed = job.nodes_confirmed
        if confirmed is None:
            confirmed = job.nodes_confirmed = {self.node_id}
        if job.body is not None and len(job.nodes_delivered) <= len(confirmed):
            self.delete_job(job)
        elif job.body is None and self.cluster_size == 1:
            self.delete_job(job)
        else:
            self.replication.gc_send_setacks(job)
            self.schedule_gc(job)

    cpdef schedule_gc(self, Job job):
        """Next GC attempt: 1 s doubling up to 3 min, or the expiry check (SPEC 7.4)."""
        cdef long long delay = min(1000 * (1 << job.gc_retry), GC_DELAY_MAX_MS) + self.rand_err()
        self.timers.schedule(job, min(expire_ms(job), self.now_ms + delay))

    cpdef Job make_dummy_ack(self, bytes jid):
        """The record of an ACK for a job this node does not know (SPEC 7.4): no body, kept
        until every node confirmed or the ID's TTL passed."""
        cdef Job job = Job(jid, None, None)
        mark_acked(job)
        job.etime = self.now_s + id_ttl_minutes(jid) * 60
        self.register_job(job)
        return job

    cpdef bytes cmd_ackjob(self, list argv):
        cdef long long count = 0
        cdef list ids
        cdef Job job
        if self.cluster_size == 1:
            ids = []
            count = self.ack_lone(argv, ids)    # the jobs all ours, in one C loop; the rest here
        else:
            ids = argv[1:]
        for jid in ids:
            found = self.find_job(jid)
            if found is None:
                if self.cluster_size > 1 and not self.leaving and id_ttl_minutes(jid) & 1:
                    self.gc(self.make_dummy_ack(jid))
                continue
            job = <Job>found
            if job.state != JOB_ACKED:
                self.ack(job)
                count += 1
                self.n_acked += 1
            else:
                self.gc(job)
        return b":%d\r\n" % count


cdef class AckMessages(ReplicationCore):
    """The SETACK / GOTACK / DELJOB handlers (the replication hooks setack_msg, gotack_msg,
    deljob_msg are these methods) and the SETACKs of a GC pass. Needs a ShardAcks shard
    and its hook `wait_failed` (Replication.repl_failed)."""

    cpdef on_setack(self, sender, mflags, payload):
        cdef ShardAcks shard = <ShardAcks>self.shard
        jid, may_have = payload[0], payload[1]
        found = shard.find_job(jid)
        cdef Job job = <Job>found if found is not None else None
        if job is not None and job.state == JOB_WAIT_REPL:
            wait = self.repl_waits.get(jid)
            if wait is not None:
                self.replicated(<ReplWait>wait)
            found = shard.find_job(jid)
            job = <Job>found if found is not None else None
        if job is not None and job.state != JOB_ACKED:
            shard.set_acked(job)
            shard.n_acked += 1
        if job is None or len(job.nodes_delivered) <= may_have:
            self.send_bus((sender,), GOTACK, [jid, 1 if job is not None else 0])
        else:
            if may_have == 0:
                self.send_bus((sender,), GOTACK, [jid, 1])
            shard.gc(job)

    cpdef on_gotack(self, sender, mflags, payload):
        cdef ShardAcks shard = <ShardAcks>self.shard
        jid, known = payload[0], payload[1]
        found = shard.find_job(jid)
        if found is None:
            return
        cdef Job job = <Job>found
        if job.state != JOB_ACKED:
            return
        cdef bint dummy = job.body is None
        if dummy and known:
            shard.delete_job(job)        # a node with a real copy takes over the GC
            return
        if job.nodes_confirmed is None:
            job.nodes_confirmed = {shard.node_id}
        if known or sender in job.nodes_delivered:
            self.add_node(job, sender)
            job.nodes_confirmed.add(sender)
        if not known and dummy:
            job.nodes_confirmed.add(sender)
            if len(job.nodes_confirmed) >= len(self.known):
                shard.delete_job(job)
        elif not dummy and len(job.nodes_confirmed) >= len(job.nodes_delivered):
            self.send_bus(job.nodes_delivered, DELJOB, [jid, 0])
            shard.delete_job(job)

    cpdef on_deljob_msg(self, sender, mflags, payload):
        cdef ShardAcks shard = <ShardAcks>self.shard
        found = shard.find_job(payload[0])
        if found is None:
            return
        cdef Job job = <Job>found
        wait = self.repl_waits.get(job.id)
        if wait is not None and job.state == JOB_WAIT_REPL:
            self.wait_failed(wait, NOREPL_REMOVED)
        else:
            shard.forget_job(job)

    cpdef gc_send_setacks(self, Job job):
        """Ask every possible owner not yet confirmed to ack (all nodes for a dummy ACK)."""
        confirmed = job.nodes_confirmed
        owners = self.known if job.body is None else job.nodes_delivered
        dest = tuple([n for n in owners if n not in confirmed])
        if dest:
            self.send_bus(dest, SETACK, [job.id, len(job.nodes_delivered)])
