"""Spilling job bodies to disk (docs/design.md, "Spilled jobs"; docs/memory.md): a worker
over its share of `spill-threshold` % of maxmemory writes whole jobs to its spill log and
keeps about 80 bytes of each in RAM (disque/_fast/coldindex.pyx).

What spills: the jobs of a queue beyond its first `spill-keep` (the tail, the jobs consumers
reach last), then copies held for other nodes (active, never delivered here) whose next
timer is far away. What comes back: a queue's head is refilled from its spilled jobs ahead
of the consumers; a job named by ID (ACKJOB, SHOW, a bus message...) is loaded back at once
(`fault_in`); a sweep brings a job back before its expiry or its timer is due. A loaded job
is the job it was: same ID, fields, counters and timers. A job of a group (docs/job-groups.md)
spills while it is held behind its group's head, as a copy does; the group keeps its ID, and
the job comes back when it is released (ShardCore.release_head, the `load_cold` hook).
"""
import heapq
import logging
import os
import time

from disque._fast import codec
from disque._fast.coldindex import ColdIndex
from disque._fast.job import (ACTIVE, QUEUED, FLAG_DELIVERED, FLAG_GROUPED, FLAG_HELD, Job,
                              expire_ms)
from disque._fast.shardcore import NO_LIMIT
from disque._fast.spillpick import tail_to_spill
from disque.workers.queues import PAUSE_OUT
from disque.workers.spill_compaction import SpillCompaction
from disque.workers.spill_log import ID_AT, SIZE_AT, SpillLog

log = logging.getLogger("disque.worker")

HORIZON_S = 120         # a job due (expiry or timer) sooner than this stays in RAM
SWEEP_EVERY_S = 1       # the sweep walks part of the index once a second ...
SWEEP_PASS_S = 30       # ... so that a whole pass takes at most this (< HORIZON_S / 2)
BATCH = 256             # jobs per write or read
COPIES_IDLE_MS = 1000   # a walk of the job log for copies that found none: the next after this
PICK_QUEUES = 16        # a batch takes from the tails of up to this many longest queues
JOB_RAM = 400           # RAM of a loaded job beyond its record (shardcore.pyx job_cost)
MIN_KEEP = 64           # a queue's head is not spilled below this (or `keep`, if less) ...
HEAD_SHARE = 0.5        # ... and the heads of the spilling queues share at most this of the limit
STEP_NS = 5_000_000     # the longest one `work` call runs
MAKE_ROOM_NS = 100_000_000  # ... and spilling before a command would be refused (rare)
LOW_WATER = 0.9         # spilling stops at this share of the limit ...
PREFETCH_BELOW = 0.97   # ... and refilling heads needs RAM under this share
EMPTY_INDEX_BYTES = 8192     # an empty index past this gives its arrays back
RETRY_FAILED_S = 1.0    # a failing spill disk is tried again after this
SCAN_ENTRY_COST = 16    # a spilled job keeps its scan-log entry (JSCAN): seq and pointer
# what a spilled job's scan-log entry holds until it comes back: a job of no ID, never in
# `jobs`, so every walk of the log that checks `jobs.get(job.id) is job` passes over it
SPILLED = Job(b"")
SPILL_OOM = (b"-OOM command not allowed when used memory > 'spill-threshold' and the spill "
             b"disk refuses writes (%s)\r\n")


class Spill:
    """Needs from the shard: the ShardCore (jobs, queues, job_log, data_bytes, register_job,
    delete_job, get_queue, schedule, ready, now_s/now_ms, index, node_id, cold_jobs),
    `shard.memory` (memory_used) and `shard.persistence` (aof_cfg, aof_rw, write_loadjob).
    Offers: set_limit (the memory poll), work (the worker loop), pending, fault_in,
    refill, queue_length, peek, cold_records (AOF rewrite, JSCAN), clear, stats."""

    def __init__(self, shard):
        self.shard = shard
        self.index = ColdIndex()
        self.log = None                 # opened at the first spill
        self.limit = NO_LIMIT           # this worker's share of spill-threshold, bytes
        self.trigger = NO_LIMIT         # data_bytes past which the worker loop calls `work`
        self.keep = int(shard.config.get("spill-keep") or 4096)
        self.keep_at = 0                # the second `keep` was last worked out
        self.accounted = 0              # index bytes counted in shard.data_bytes
        self.held_bytes = 0             # what the spilled jobs took in RAM (job_cost each)
        self.failing = None             # the spill disk's last error, while it lasts
        self.retry_at = 0.0
        self.sweep_pos = 0
        self.sweep_at = 0
        self.copy_pos = 0               # the copies' walk over the job log
        self.copies_after = (0, 0)      # (job log seq, ms): no walk before one of them
        self.compaction = SpillCompaction(self)
        self.jobs_spilled = self.jobs_loaded = self.faults = 0
        self.errors = 0
        self.rate_mark = (time.monotonic(), 0, 0)
        self.rate = (0.0, 0.0)

    # ---- limits ------------------------------------------------------------------------

    def set_limit(self, limit):
        """The front-end's poll: this worker's share of spill-threshold (None: no spill)."""
        self.limit = NO_LIMIT if limit is None else max(0, int(limit))
        self.trigger = NO_LIMIT if limit is None else self.hot_limit()

    def hot_limit(self):
        """data_bytes allowed before spilling: the limit less what is not jobs."""
        return self.limit - (self.shard.memory.memory_used() - self.shard.data_bytes)

    def oom_limit(self):
        """While the spill disk refuses writes, commands that add stop at the limit."""
        return self.hot_limit() if self.failing is not None else NO_LIMIT

    def oom_reply(self):
        return SPILL_OOM % (self.failing or "error").encode()

    def pressure(self):
        """0: nothing spilled; 1: jobs on the spill disk; 2: the spill disk refuses writes."""
        return 2 if self.failing is not None else 1 if self.index.count else 0

    def held_extra(self):
        """What loading every spilled job back would add to this worker's used memory: their
        RAM cost, less their index. The front-end adds it to used_memory for the level that
        decides external replication (docs/memory.md, "Spilling and the memory levels")."""
        return max(0, self.held_bytes - self.accounted)

    def head_keep(self):
        """Jobs kept in RAM at the head of each queue that spills: `spill-keep`, or fewer
        when the heads of this worker's queues would take more than HEAD_SHARE of its share
        of the threshold; never below 1 (docs/memory.md, "How many jobs stay at a head").
        Counting the queues walks them all, so only near or past the threshold."""
        shard = self.shard
        configured = max(MIN_KEEP, int(shard.config.get("spill-keep") or 4096))
        if self.limit == NO_LIMIT or (shard.data_bytes < self.hot_limit() // 2
                                      and not self.index.count):
            return configured
        queues = sum(1 for q in shard.queues.values()
                     if len(q.jobs) or (q.cold is not None and q.cold.live))
        per_job = JOB_RAM + (self.log.bytes_written // max(1, self.log.records_written)
                             if self.log is not None else 0)
        fit = int(self.limit * HEAD_SHARE) // (per_job * max(1, queues))
        return max(1, min(configured, fit))

    def pending(self):
        """Whether `work` has something to do now: jobs on disk, or RAM past the limit (as
        of the last poll). The worker loop asks at every pass, so it is two comparisons."""
        return self.index.count > 0 or self.shard.data_bytes > self.trigger

    # ---- the worker loop's share ---------------------------------------------------------

    def work(self):
        """Spill, refill heads, sweep and compact, for at most STEP_NS."""
        deadline = time.perf_counter_ns() + STEP_NS
        shard = self.shard
        if shard.now_s != self.keep_at:
            self.keep_at = shard.now_s
            self.keep = self.head_keep()
        # a compaction that may go on keeps half of the step: behind spilling and refills
        # that took every step it never started, or lost the credit they banked for it
        compacting = self.compaction.due()
        share = deadline - STEP_NS // 2 if compacting else deadline
        if self.limit != NO_LIMIT and shard.data_bytes > self.hot_limit():
            if self.failing is None or time.monotonic() >= self.retry_at:
                self.spill_until(int(self.hot_limit() * LOW_WATER), share)
        if self.index.count:
            if shard.now_s >= self.sweep_at:
                self.sweep()
            self.prefetch(share)
        if compacting:
            self.compaction.step(deadline)
        if self.index.sparse() and not self.shard.persistence.walks_spilled():
            self.index.repack()         # a partial drain gives the index's memory back
            self.sweep_pos = 0          # slots moved: the sweep starts again
        self.account()

    def idle(self):
        """The slow cron: a worker with nothing spilled gives its spill log's write buffer
        back (docs/memory.md, "RSS")."""
        if self.log is not None and not self.index.count:
            self.log.drop_buffer()

    def account(self):
        """The index's bytes in data_bytes (used_memory), as it grows and shrinks."""
        if not self.index.count:
            self.held_bytes = 0
            if self.accounted > EMPTY_INDEX_BYTES:
                self.index.shrink()
        now = (self.index.memory() + SCAN_ENTRY_COST * self.index.count
               if self.index.count or self.accounted else 0)
        self.shard.data_bytes += now - self.accounted
        self.accounted = now
        self.shard.cold_jobs = self.index.count

    # ---- spilling ------------------------------------------------------------------------

    def make_room(self, oom_data):
        """A command that adds finds the worker over 95%: spill now rather than refuse it
        (producers can outrun the loop's spilling on a small maxmemory). True when the
        worker is back under `oom_data`."""
        if self.limit == NO_LIMIT or self.failing is not None:
            return False
        target = min(int(self.hot_limit() * LOW_WATER), oom_data)
        self.spill_until(target, time.perf_counter_ns() + MAKE_ROOM_NS, last_resort=True)
        self.account()
        return self.shard.data_bytes <= oom_data

    def spill_until(self, target, deadline, last_resort=False):
        """Spill down to `target` bytes: queue tails beyond `keep`, then copies with far
        timers; a queue's head beyond MIN_KEEP only while over the limit itself (a head
        spilled below the limit would be loaded back at once), and while the index alone
        is under `target` unless a command would be refused (`last_resort`): past it no
        head spilled brings the worker there, and its consumers would read it back at once
        (a drain of a backlog whose index outgrew the limit wrote a job again for every
        two it read)."""
        shard = self.shard
        while shard.data_bytes > target and time.perf_counter_ns() < deadline:
            if (not last_resort and self.log is not None and self.log.writing()
                    and shard.data_bytes <= self.hot_limit()):
                return      # under the limit: the batch in flight ends while the loop serves
            jobs, runs = self.pick(shard.data_bytes > self.hot_limit()
                                   and (last_resort or self.accounted < target))
            if not jobs or len(jobs) > self.index.room or not self.write(jobs, runs):
                return      # (a full index: RAM fills and the memory levels apply)

    def pick(self, heads_too):
        """The next batch to spill: (jobs, runs), each run (queue or None, first, end) of
        `jobs`; from the tails beyond `keep` of the longest queues, newest first, else
        copies with far timers, else (heads_too) tails beyond MIN_KEEP (or `keep`, if
        less)."""
        shard = self.shard
        horizon = shard.now_s + HORIZON_S
        for floor in (self.keep, None, min(MIN_KEEP, self.keep) if heads_too else None):
            if floor is None:
                copies = self.pick_copies(horizon)
                if copies:
                    return copies, [(None, 0, len(copies))]
                continue
            out = []
            runs = []
            for q in heapq.nlargest(PICK_QUEUES, shard.queues.values(),
                                    key=lambda q: len(q.jobs)):
                extra = len(q.jobs) - floor
                if extra <= 0:
                    break
                first = len(out)
                out += tail_to_spill(q.jobs, min(extra, BATCH - first), horizon)
                if len(out) > first:
                    runs.append((q, first, len(out)))
                if len(out) >= BATCH:
                    break
            if out:
                return out, runs
        return None, None

    def pick_copies(self, horizon):
        """Copies this node holds for others, walking the job log from where it stopped.
        A walk that found none waits for as many new jobs as it looked at, or a second:
        with every job queued (a lone node's) it found nothing at every pick, a sixth of a
        spilling worker's time."""
        shard = self.shard
        job_log = shard.job_log
        after_seq, after_ms = self.copies_after
        if job_log.next_seq < after_seq and shard.now_ms < after_ms:
            return []
        items = job_log.items
        n = len(items)
        if self.copy_pos >= n:
            self.copy_pos = 0
        out = []
        looked = 0
        pos = self.copy_pos
        horizon_ms = horizon * 1000
        while pos < n and len(out) < BATCH and looked < 16 * BATCH:
            job = items[pos]
            pos += 1
            looked += 1
            # a job of a group spills while it is held behind its head (never the head)
            if (job is not None and job.state == ACTIVE and not job.flags & FLAG_DELIVERED
                    and (not job.flags & FLAG_GROUPED or job.flags & FLAG_HELD)
                    and not job.in_queue and job.body is not None and job.queue is not None
                    and shard.jobs.get(job.id) is job and self.awake_ms(job) > horizon_ms):
                out.append(job)
        self.copy_pos = pos
        if not out:
            self.copies_after = (job_log.next_seq + looked, shard.now_ms + COPIES_IDLE_MS)
        return out

    @staticmethod
    def awake_ms(job):
        """When a job that is not queued must be in RAM again: its expiry or its timer (a
        job held behind its group's head has no timer but its expiry)."""
        t = expire_ms(job)
        if job.qtime and job.qtime - 1000 < t and not job.flags & FLAG_HELD:
            t = job.qtime - 1000        # before the WILLQUEUE announcement, 500 ms earlier
        return t

    def write(self, jobs, runs):
        """Write a batch (`pick`) and drop it from RAM; False when the disk refused it (the
        jobs stay in RAM, nothing is lost)."""
        shard = self.shard
        self.settle()
        try:
            if self.log is None:
                self.log = SpillLog(shard.persistence.aof_cfg("dir") or os.getcwd(),
                                    "spill-%s-w%d" % (shard.node_id.decode()[:8], shard.index))
                self.log.lost = self.write_lost
            # in the background while the disk is fine: a failure shows at the next
            # settle (write_lost); while it fails, each try is known at once
            sizes, seg, off = self.log.append_jobs(jobs, background=self.failing is None)
        except OSError as e:
            self.disk_failed(e)
            return False
        self.compaction.earn(sum(sizes))
        if self.failing is not None:
            log.warning("Spill disk writable again: spilling resumes")
            self.failing = None
            shard.memory.spill_changed()
        held = 0
        for q, first, end in runs:  # a queue's tail, newest first (see `pick`), or copies
            held += self.leave_ram(q, jobs[first:end], sizes[first:end], seg, off)
            off += sum(sizes[first:end])
        self.held_bytes += held
        self.jobs_spilled += len(jobs)
        shard.cold_jobs = self.index.count      # find_job looks on disk from now on
        return True

    def leave_ram(self, q, run, sizes, seg, off):
        """Jobs written to the spill log, one after the other from `off` of segment `seg`,
        leave RAM for the index: a queue's tail is cut from its queue at once, copies (q
        None) one at a time. Returns the RAM they held."""
        shard = self.shard
        index = self.index
        held = -1 if q is None else shard.spill_out_tail(q, run, SPILLED)
        if held < 0:
            held = 0
            for job in run:
                held += shard.job_cost(job)
                shard.spill_out(job, SPILLED)
        if q is None:
            for job, size in zip(run, sizes):
                index.add(job.id, seg, off, size, job.etime, -(-self.awake_ms(job) // 1000),
                          None, False, (job.scan_hi << 32) | job.scan_lo)
                off += size
            return held
        if q.cold is None:
            q.cold = index.new_ring(q)
        index.add_tail(q.cold, run, sizes, seg, off)
        return held

    def settle(self):
        """The background write in flight is done (its jobs are back in RAM if it failed):
        before the index's locations are read."""
        if self.log is not None:
            self.log.settle()

    def write_lost(self, error, data, sizes, locs):
        """A background write failed: its jobs, which left RAM, come back from its batch."""
        index = self.index
        view = memoryview(data)
        at = restored = 0
        for size, (seg, off) in zip(sizes, locs):
            rec = view[at:at + size]
            at += size
            slot = index.find(bytes(rec[ID_AT:ID_AT + 40]))
            if slot >= 0 and index.location(slot) == (seg, off, size):
                self.bring_back(slot, rec)
                restored += 1
        self.jobs_spilled -= restored
        log.info("Spill write failed (%s): its %d jobs are back in memory",
                 error.strerror or error, restored)
        self.disk_failed(error)
        self.account()

    def disk_failed(self, e):
        self.errors += 1
        self.retry_at = time.monotonic() + RETRY_FAILED_S
        if self.failing is None:
            self.failing = e.strerror or str(e)
            log.warning("Spill disk error (%s): jobs stay in memory; commands that add are "
                        "refused over the spill threshold until it writes again", self.failing)
            self.shard.memory.spill_changed()

    # ---- loading back ----------------------------------------------------------------------

    def decode(self, rec):
        rec = bytes(rec)
        qtime, flags, _state = codec.spill_header(rec)
        shard = self.shard
        job, _ = codec.deserialize(rec, SIZE_AT, True, shard.now_s, shard.now_ms)
        job.qtime = qtime
        job.flags = flags
        return job

    def read(self, slots):
        """The records of `slots` (None when the disk fails: the jobs stay spilled)."""
        locs = [self.index.location(s) for s in slots]
        try:
            return locs, self.log.read(locs)
        except OSError as e:
            self.errors += 1
            log.warning("Spill disk read error (%s): %d jobs stay on disk", e.strerror or e,
                        len(slots))
            return locs, None

    def load(self, slots):
        """Bring jobs back into RAM, as they were; returns them (empty on a read error).
        The slots may have been taken before the write in flight settled: a batch whose
        write failed brought its jobs back itself, and its slots are skipped."""
        self.settle()
        slots = [s for s in slots if self.index.location(s)[2]]
        if not slots:
            return []
        locs, recs = self.read(slots)
        if recs is None:
            return []
        out = []
        for slot, (seg, _, size), rec in zip(slots, locs, recs):
            out.append(self.bring_back(slot, rec))
            self.log.forget(seg, size)
        self.jobs_loaded += len(out)
        self.account()
        return out

    def bring_back(self, slot, rec):
        """The job of `slot`, whose record is `rec`, out of the index and back in RAM."""
        shard = self.shard
        job = self.decode(rec)
        seq = self.index.seq_of(slot)
        self.index.remove(slot)
        self.restore(job, seq)
        self.held_bytes -= shard.job_cost(job)
        if shard.aof_on and shard.persistence.aof_rw is not None:
            shard.persistence.write_loadjob(job)   # the rewrite's list did not have it
        return job

    def restore(self, job, seq):
        """A loaded job back in its place: `jobs`, its scan-log entry, queue and timer."""
        shard = self.shard
        if job.state == QUEUED:
            q = shard.get_queue(job.queue, True)
            job.queue = q.name
            shard.register_back(job, seq)
            q.jobs.push(job)
            if (q.blocked or q.remote is not None) and not q.paused & PAUSE_OUT:
                shard.ready.add(q)
        else:
            q = shard.queues.get(job.queue)
            if q is not None:
                job.queue = q.name
            shard.register_back(job, seq)
        if job.flags & FLAG_GROUPED:
            shard.groups.relink(job)
        shard.schedule(job)

    def fault_in(self, jid):
        """The job `jid` back in RAM if it was spilled (by ID: ACKJOB, SHOW, bus messages)."""
        self.settle()
        slot = self.index.find(jid)
        if slot < 0:
            return None
        self.faults += 1
        jobs = self.load([slot])
        return jobs[0] if jobs else None

    def refill(self, q, want):
        """A consumer found the head of `q` short: load up to `want` jobs now."""
        ring = q.cold
        if ring is None or not ring.live:
            return
        slots = self.index.take_front(ring, max(want, BATCH))
        if slots and not self.load(slots):
            self.index.put_front(ring, slots)

    def prefetch(self, deadline):
        """Refill the head of every queue with spilled jobs, ahead of its consumers, as far
        as RAM under the limit allows (a head refilled past it would be spilled again)."""
        shard = self.shard
        limited = self.limit != NO_LIMIT
        if limited:
            ceiling = self.hot_limit() * PREFETCH_BELOW
            per_job = JOB_RAM + (self.log.bytes_written // max(1, self.log.records_written))
        for ring in self.index.rings:
            if ring is None or not ring.live:
                continue
            q = ring.queue
            hot = len(q.jobs)
            if hot * 2 >= self.keep:
                continue
            while hot < self.keep and ring.live and time.perf_counter_ns() < deadline:
                want = min(BATCH, self.keep - hot)
                if limited:
                    room = int((ceiling - shard.data_bytes) // per_job)
                    want = min(want, max(room, min(MIN_KEEP, self.keep) - hot))
                    if want <= 0:
                        break
                slots = self.index.take_front(ring, want)
                if not self.load(slots):
                    self.index.put_front(ring, slots)
                    return
                hot = len(q.jobs)

    def sweep(self):
        """Bring back jobs whose expiry or timer comes within HORIZON_S / 2; a whole pass
        over the index takes at most SWEEP_PASS_S."""
        shard = self.shard
        self.sweep_at = shard.now_s + SWEEP_EVERY_S
        steps = max(100_000, self.index.slot_limit * SWEEP_EVERY_S // SWEEP_PASS_S + 1)
        slots, self.sweep_pos = self.index.due(self.sweep_pos, steps, shard.now_s + HORIZON_S // 2)
        for i in range(0, len(slots), BATCH):
            self.load(slots[i:i + BATCH])

    # ---- what the commands see ---------------------------------------------------------------

    def peek(self, q, count, from_back):
        """QPEEK's spilled part: up to `count` jobs decoded from disk, not loaded."""
        self.settle()
        if q.cold is None or not q.cold.live or count <= 0:
            return []
        slots = self.index.peek(q.cold, count, from_back)
        _, recs = self.read(slots)
        return [self.decode(r) for r in recs] if recs is not None else []

    def cold_records(self, start, steps):
        """The AOF payloads (storage form) of spilled jobs among slots [start, start +
        steps), and the next start (-1: done): AOF rewrite and JSCAN."""
        self.settle()
        slots, nxt = self.index.live_slots(start, steps)
        if not slots:
            return [], nxt
        _, recs = self.read(slots)
        if recs is None:
            raise OSError("spill disk read error")
        return [bytes(r[SIZE_AT:]) for r in recs], nxt

    def job_at(self, seq):
        """The spilled job whose scan-log entry is `seq`, decoded, not loaded (JSCAN)."""
        self.settle()
        slot = self.index.find_seq(seq)
        if slot < 0:
            return None
        _, recs = self.read([slot])
        return self.decode(recs[0]) if recs else None

    def payload_of(self, jid):
        """The AOF payload of one spilled job, or None."""
        self.settle()
        slot = self.index.find(jid)
        if slot < 0:
            return None
        _, recs = self.read([slot])
        return bytes(recs[0][SIZE_AT:]) if recs else None

    def clear(self):
        """FLUSHALL: every spilled job goes."""
        for ring in self.index.rings:
            if ring is not None:
                ring.queue.cold = None
        self.index.clear()
        self.index.rings.clear()
        if self.log is not None:
            self.log.remove_all()
        self.compaction.reset()
        self.accounted = 0
        self.held_bytes = 0
        self.shard.cold_jobs = 0

    def rates(self):
        """Jobs written and read per second, over the last second or more."""
        now = time.monotonic()
        t, written, read = self.rate_mark
        if now - t >= 1.0:
            self.rate = ((self.jobs_spilled - written) / (now - t),
                         (self.jobs_loaded - read) / (now - t))
            self.rate_mark = (now, self.jobs_spilled, self.jobs_loaded)
        return self.rate

    def stats(self):
        segments, disk = self.log.files() if self.log is not None else (0, 0)
        log_ = self.log
        writes, reads = self.rates()
        return {
            "spill_writes_per_sec": int(writes),
            "spill_reads_per_sec": int(reads),
            "spilled_jobs": self.index.count,
            "spill_index_bytes": self.accounted,
            "spilled_job_bytes": self.held_bytes,
            "spill_segments": segments,
            "spill_disk_bytes": disk,
            "spill_jobs_written": self.jobs_spilled,
            "spill_jobs_read": self.jobs_loaded,
            "spill_bytes_written": log_.bytes_written if log_ else 0,
            "spill_bytes_read": log_.bytes_read if log_ else 0,
            "spill_faults": self.faults,
            "spill_compactions": self.compaction.done,
            "spill_compacted_bytes": self.compaction.bytes_copied,
            "spill_errors": self.errors,
            "spill_failing": self.failing or "",
            "spill_limit": self.limit if self.limit != NO_LIMIT else 0,
        }

