"""A worker's memory limits (SPEC 9, docs/memory.md): what it reports to the front-end's
memory poll, the limits the front-end sends back, and eviction before a command that
adds (flag `m`) when the node is over 95% of maxmemory (the core's `evict_for_oom`)."""
import random
import sys
from time import perf_counter_ns

from disque._fast.job import ACKED, FLAG_DELIVERED
from disque._fast.shardcore import NO_LIMIT, OOM_ERROR
from disque.workers.queues import QUEUE_MAX_IDLE_BY_LEVEL

# the structures of an empty shard (dicts, timer heap, scan logs), measured; also what keeps
# `used` above 0, so that `maxmemory 1` means "over the limit" as upstream
SHARD_BASE_COST = 8192
EVICT_MAX_MISSES = 10           # SPEC 9: give up after > 10 non-evictable samples in a row
EVICT_MAX_NS = 1000000          # ... or after 1 ms
# a dict keeps the table of its largest size when its keys go: past SHRINK_MIN_BYTES and
# SHRINK_BYTES_PER_KEY per key left (about 4x a fitted table), it is rebuilt at its size
SHRINK_MIN_BYTES = 1 << 20
SHRINK_BYTES_PER_KEY = 256


class Memory:
    """Needs from the shard: the ShardCore (data_bytes, oom_data, memory_level, jobs,
    job_log, queue_log), forget_job, `shard.persistence.aof_memory` and
    `shard.queue_commands.evict_idle_queues`. Offers: memory_used, memory_report,
    set_memory (the front-end's poll), free_memory (the core's `evict_for_oom` hook)."""

    def __init__(self, shard):
        self.shard = shard
        self.data_ref = 0            # data_bytes when we last reported our memory
        self.oom_data = NO_LIMIT     # shard.oom_data from maxmemory alone
        self.noeviction = False

    def memory_used(self):
        """This worker's share of `used_memory` (SPEC 9, docs/memory.md): the bytes of its
        jobs and queues (ShardCore.data_bytes, updated by every registration and deletion),
        what its AOF holds in memory, and its empty structures. Not the process's RSS: the
        interpreter's fixed footprint is no data, and freed memory that Python and libc keep
        for reuse would make a node that once reached 95% refuse ADDJOB forever."""
        return SHARD_BASE_COST + self.shard.data_bytes + self.shard.persistence.aof_memory()

    def memory_report(self):
        """Answer to the front-end's periodic memory poll: [used, data bytes, AOF bytes,
        next sequence numbers of the job and queue scan logs (QSCAN/JSCAN bounds), spill
        pressure (0 none, 1 spilling, 2 the spill disk refuses writes), what loading every
        spilled job back would add to `used` (Spill.held_extra)]."""
        shard = self.shard
        self.data_ref = shard.data_bytes
        return [self.memory_used(), shard.data_bytes, shard.persistence.aof_memory(),
                shard.job_log.next_seq, shard.queue_log.next_seq, shard.spill.pressure(),
                shard.spill.held_extra()]

    def set_memory(self, level, excess, noeviction, spill_limit=None, held_level=None):
        """The front-end's view of the node: memory level 0-2 (SPEC 9) of `used_memory`,
        `held_level`, the same level counting spilled jobs as if they were in RAM (it
        decides external replication; docs/memory.md), and `excess`, the node's
        used memory minus 95% of maxmemory (None: no limit), computed from our previous
        report. Our own data changes since that report are added live (oom_data), so the
        OOM check before `m` commands is exact for this worker's growth and for what its
        evictions free, instead of lagging one poll behind. `spill_limit`: [the node's
        spill threshold, every worker's last use] (None: no spilling); this worker may use
        what the others leave of the threshold."""
        if spill_limit is None:
            self.shard.spill.set_limit(None)
        else:
            total, shares = spill_limit
            others = sum(shares) - (shares[self.shard.index] if self.shard.index < len(shares) else 0)
            self.shard.spill.set_limit(max(0, total - others))
        self.shard.memory_level = level
        self.shard.held_level = level if held_level is None else held_level
        self.noeviction = noeviction
        self.oom_data = NO_LIMIT if excess is None else self.data_ref - excess
        self.spill_changed()

    def spill_changed(self):
        """A failing spill disk also stops commands that add at the spill threshold
        (disque/workers/spill.py), with its own error."""
        shard = self.shard
        spill_limit = shard.spill.oom_limit()
        if spill_limit < self.oom_data:
            shard.oom_data = spill_limit
            shard.oom_reply = shard.spill.oom_reply()
        else:
            shard.oom_data = self.oom_data
            shard.oom_reply = OOM_ERROR

    def shrink_tables(self):
        """Twice a second (the slow cron): the job and queue dicts rebuilt in place once
        most of their keys are gone (after a drain they kept the table of the backlog, 24
        bytes a job it once held). O(keys left), at most a quarter of the table."""
        shard = self.shard
        for table in (shard.jobs, shard.queues):
            size = sys.getsizeof(table)
            if size > SHRINK_MIN_BYTES and size > SHRINK_BYTES_PER_KEY * len(table):
                kept = dict(table)
                table.clear()
                table.update(kept)

    def free_memory(self):
        """Eviction before an `m` command when the node is over 95% of maxmemory (SPEC 9,
        policy `acks`). True when the command may run: enough was freed to go back under.

        First, on a node that spills, jobs go to the spill log at once (not eviction:
        nothing is lost, so `noeviction` allows it). Then random jobs are sampled (the scan log gives O(1) random access); acked jobs and
        delivered at-most-once jobs are deleted; with no jobs at all, idle queues go.
        Give up after > 10 non-evictable samples in a row or 1 ms. Each worker evicts
        from its own jobs only.
        """
        shard = self.shard
        if shard.spill.make_room(shard.oom_data):
            return True                 # spilled now: producers faster than the worker loop
        if self.noeviction:
            return False
        items = shard.job_log.items
        deadline = perf_counter_ns() + EVICT_MAX_NS
        misses = 0
        rnd = random.random
        jobs = shard.jobs
        while shard.data_bytes > shard.oom_data:
            if not jobs or not items:
                if not jobs:
                    shard.queue_commands.evict_idle_queues(QUEUE_MAX_IDLE_BY_LEVEL[2])
                break
            job = items[int(rnd() * len(items))]
            if job is not None and jobs.get(job.id) is job:
                if job.state == ACKED or (job.retry == 0 and job.flags & FLAG_DELIVERED):
                    shard.forget_job(job)
                    misses = 0
                else:
                    misses += 1
                    if misses > EVICT_MAX_MISSES:
                        break
            if perf_counter_ns() > deadline:
                break
        return shard.data_bytes <= shard.oom_data
