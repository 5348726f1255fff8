# cython: language_level=3
"""The hot half of a worker's shard: queues, the enqueue rule, scheduling, ADDJOB (its
options parsed by disque/_fast/addjob.pyx).

`disque.workers.shard.Shard` subclasses `ShardCore` and keeps the rest of the state
machine in Python; the code here follows SPEC 3.1, 3.2 ("Fetching a job"), 7.1 and 7.2
line by line.
"""
import os
from disque._fast.sysio cimport mono_ns

from disque._fast.addjob cimport AddjobOptions, ReplWait, copies_wanted, parse_addjob
from disque._fast.job cimport (Job, JobOptions, mark_active, mark_queued, JOB_ACTIVE, JOB_QUEUED,
                               JOB_ACKED, JOB_FLAG_BCAST_QUEUED, JOB_FLAG_BCAST_WILLQUEUE,
                               JOB_FLAG_DELIVERED, JOB_FLAG_NACK_PENDING, JOB_FLAG_GROUPED,
                               JOB_FLAG_HELD, JOB_FLAG_HANDED, retry_interval_ms, dead_letter_due,
                               expire_ms)
from disque._fast.groups cimport JobGroup, JobGroups, group_size
from disque._fast.scanlog cimport ScanLog

from disque._fast.resp cimport status
from disque.statslog import LATENCY_BOUNDS_US

from disque import commands as _commands
from disque import nodeclock
from disque.contracts import bus_messages as _bus
from disque.contracts import worker_link as _link
# bus message type and flags: disque/contracts/bus_messages.py is their one home (C ints, read at import)
cdef int BUS_QUEUED = _bus.QUEUED
cdef long QUEUE_ELSEWHERE = _link.QUEUE_ELSEWHERE   # the link contract (disque/contracts/worker_link.py)
cdef int BUS_INCR_NACKS = _bus.INCR_NACKS
cdef int BUS_INCR_DELIV = _bus.INCR_DELIV
cdef int BUS_DEADLETTERED = _bus.DEADLETTERED
NO_LIMIT = 1 << 62       # oom_data with no maxmemory
# commands refused over maxmemory: flag `m` of the command table (SPEC 2)
DENYOOM = frozenset(name for name, cmd in _commands.BY_BYTES.items() if "m" in cmd.flags)
OOM_ERROR = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
# Bytes the memory accounting (SPEC 9, docs/memory.md) counts per job and per queue, the
# fixed parts measured as RSS growth in a worker (bench/mem_per_job.py); C ints, as job_cost
# runs for every job registered and deleted:
cdef long long JOB_RECORD_COST = 340   # Job record, its ID object, dict, skiplist, timer-heap and scan-log entries
cdef long long BYTES_OBJECT_COST = 40  # header and allocator rounding of the body's bytes object
cdef long long NODE_REF_COST = 8       # one entry of the node list (the node IDs themselves are shared)
cdef long long JOB_OPTIONS_COST = 96   # the options of a job with BACKOFF, MAXDELIVERIES or GROUP, and its slot in its group
cdef long long QUEUE_COST = 650        # Queue, its skiplist (header and last nodes inside), dict and scan-log entries, beyond its name

# the stats log's latency bounds as C numbers: a command's bucket without a Python call
cdef long long LATENCY_BOUNDS[32]
cdef Py_ssize_t N_LATENCY_BOUNDS = len(LATENCY_BOUNDS_US)
assert N_LATENCY_BOUNDS <= 32
for _i, _b in enumerate(LATENCY_BOUNDS_US):
    LATENCY_BOUNDS[_i] = _b


cdef inline Py_ssize_t latency_bucket(long long us):
    """bisect_left(LATENCY_BOUNDS_US, us)."""
    cdef Py_ssize_t i = 0
    while i < N_LATENCY_BOUNDS and LATENCY_BOUNDS[i] < us:
        i += 1
    return i


cdef class CommandTally:
    """One command's counters on this worker (ShardCore.tallies)."""


cdef class ShardCore:
    def __init__(self, bytes node_id):
        self.node_id = node_id
        self.self_nodes = (node_id,)     # shared nodes_delivered tuple for local jobs
        self.ids = IdMaker(node_id)
        self.jobs = {}
        self.queues = {}
        self.timers = TimerHeap()
        self.ready = set()
        self.cluster_size = 1
        self.reachable_nodes = 0
        self.leaving = False
        self.aof_on = False
        self.bus_out = []
        self.memory_level = 0
        self.held_level = 0
        self.roomy_nodes = 0
        self.oom_data = NO_LIMIT
        self.oom_reply = OOM_ERROR
        self.cold_jobs = 0
        self.job_log = ScanLog()
        self.queue_log = ScanLog()
        self.groups = JobGroups()
        self.data_bytes = 0
        self.rng = int.from_bytes(os.urandom(8), "little") | 1
        self.index = 0
        self.nworkers = 1
        self.prefix_waiters = []
        self.dead_lettered = {}
        self.clock_base_ns = nodeclock.BASE_NS
        self.tick()

    cpdef object run_command(self, bytes name, handler, list argv):
        """The handler's reply, or -OOM for a command that adds (flag `m`) while the node is
        over 95% of maxmemory and eviction cannot make room (SPEC 9; docs/memory.md). Every
        road to a handler passes here: Shard.execute (the link) and ServedCore (served and
        forwarded commands)."""
        if self.data_bytes > self.oom_data and name in DENYOOM and not self.evict_for_oom():
            return self.oom_reply
        return handler(argv)

    cpdef tick(self):
        # the node clock (disque/nodeclock.py), not CLOCK_REALTIME: a step of the wall
        # clock must not fire job timers early nor hold them back
        self.now_ms = (mono_ns() + self.clock_base_ns) // 1000000
        self.now_s = self.now_ms // 1000

    cpdef long long rand_err(self):
        """De-synchronization jitter of every requeue/GC time: [-250, +249] ms."""
        cdef unsigned long long x = self.rng
        x ^= x << 13
        x ^= x >> 7
        x ^= x << 17
        self.rng = x
        return <long long>(x % 500) - 250

    cpdef Queue get_queue(self, bytes name, bint create=False):
        cdef Queue q = self.queues.get(name)
        if q is None and create:
            q = Queue(name, self.now_s)
            self.queues[name] = q
            q.scan_seq = self.queue_log.add(q)
            self.data_bytes += QUEUE_COST + len(name)
            if self.nworkers > 1 and queue_worker(name, self.nworkers) != self.index:
                self.out.append([QUEUE_ELSEWHERE, name, self.index])
            if self.prefix_waiters:
                self.queue_created(q)
        return q

    cpdef register_job(self, Job job):
        """Every job enters `self.jobs` here (scan log and memory estimate follow it)."""
        self.jobs[job.id] = job
        cdef unsigned long long seq = self.job_log.add(job)
        job.scan_hi = <unsigned short>(seq >> 32)
        job.scan_lo = <unsigned int>(seq & 0xffffffffULL)
        self.data_bytes += self.job_cost(job)

    cpdef remove_queue(self, Queue q):
        """Every queue leaves `self.queues` here."""
        if self.queues.get(q.name) is q:
            del self.queues[q.name]
            self.queue_log.kill(q.scan_seq)
            self.data_bytes -= QUEUE_COST + len(q.name)

    cpdef long long job_cost(self, Job job):
        """Bytes the job holds (SPEC 9 accounting, docs/memory.md). Uses only fields fixed
        at creation (body, queue name, REPLICATE, whether it has options), so registering
        and deleting a job count the same amount however its node list changed meanwhile."""
        if job.body is None or job.queue is None:      # a dummy ACK: the record alone
            return JOB_RECORD_COST
        return (JOB_RECORD_COST + BYTES_OBJECT_COST + len(<bytes>job.body)
                + len(<bytes>job.queue) + NODE_REF_COST * job.repl
                + (JOB_OPTIONS_COST if job.ext is not None else 0))

    cpdef schedule(self, Job job):
        """Recompute when the scheduler must look at `job` again (SPEC 7.1)."""
        cdef long long awake = expire_ms(job), t
        # a job held behind its group's head waits for the head, not for its own timer
        if (job.state == JOB_ACTIVE or job.state == JOB_QUEUED) and job.qtime and not (
                job.flags & JOB_FLAG_HELD):
            t = job.qtime - 500 if job.flags & JOB_FLAG_BCAST_WILLQUEUE else job.qtime
            if t < awake:
                awake = t
        self.timers.schedule(job, awake)

    cpdef bint timers_due(self):
        """A job timer is due now (the worker runs them between request batches)."""
        cdef long long when = self.timers.next_when()
        return when != 0 and when <= self.now_ms

    cpdef bint enqueue(self, Job job, bint nack=False):
        """The enqueue rule of SPEC 7.2; True when the job went into its queue. A job due
        for its dead-letter queue (MAXDELIVERIES) goes there instead."""
        if job.state == JOB_QUEUED or job.qtime == 0:
            return False
        if job.retry == 0 and job.flags & JOB_FLAG_DELIVERED:
            return False
        if job.flags & JOB_FLAG_GROUPED and not job.flags & JOB_FLAG_HANDED:
            if not self.groups.is_head(job):
                job.flags |= JOB_FLAG_HELD     # its turn comes when the head leaves (group_done)
                self.schedule(job)
                return False
            if not self.groups.is_home(job):
                # the group's home queues its head; this copy keeps a requeue timer, which
                # queues it once this node is the home (a failed home's heir)
                if job.retry:
                    job.qtime = self.now_ms + retry_interval_ms(job) + self.rand_err()
                self.schedule(job)
                return False
        cdef bint again = job.flags & JOB_FLAG_BCAST_QUEUED or nack
        cdef bint moved = False
        cdef int mflags = 0
        cdef long long aux = 0
        if again:
            if job.flags & JOB_FLAG_NACK_PENDING:
                job.flags &= ~JOB_FLAG_NACK_PENDING     # NACK ... DELAY counted it already
            elif nack:
                job.nacks += 1
                mflags = BUS_INCR_NACKS
            else:
                job.additional_deliveries += 1
                mflags = BUS_INCR_DELIV
            if job.ext is not None and dead_letter_due(job):
                self.move_to_dead_letter(job)
                self.dead_lettered[job.ext.origin] = self.dead_lettered.get(job.ext.origin, 0) + 1
                moved = True
        else:
            job.flags |= JOB_FLAG_BCAST_QUEUED
        cdef Queue q = self.get_queue(job.queue, True)
        mark_queued(job)
        if job.retry:
            job.flags |= JOB_FLAG_BCAST_WILLQUEUE
            job.qtime = self.now_ms + retry_interval_ms(job) + self.rand_err()
        else:
            job.qtime = 0
        if again and len(job.nodes_delivered) > 1:
            if job.ext is not None:
                # jobs with options carry their counters, so every copy converges on the
                # same dead-letter decision (docs/job-features.md), and the move itself
                aux = (<long long>job.nacks << 16) | job.additional_deliveries
                if job.ext.origin is not None:
                    mflags |= BUS_DEADLETTERED
            # tell the other copies, so they postpone their own requeue (SPEC 7.3)
            self.bus_out.append((job.nodes_delivered, BUS_QUEUED, mflags, [job.id, aux]))
        q.jobs.push(job)
        q.atime = self.now_s
        q.jobs_in += 1
        if (q.blocked or q.remote is not None) and not q.paused & PAUSE_OUT:
            self.ready.add(q)
        self.schedule(job)
        if moved and self.aof_on:
            self.aof_loadjob(job)          # the last LOADJOB of a job wins at load time
        return True

    cpdef move_to_dead_letter(self, Job job):
        """Rename a job's queue to its dead-letter queue (not queued here), once."""
        cdef JobOptions ext = job.ext
        if ext is None or ext.origin is not None or ext.deadletter is None:
            return
        if job.flags & JOB_FLAG_GROUPED:
            self.group_done(job)            # a dead letter is finished for its group
        ext.origin = job.queue
        cdef Queue q = self.queues.get(ext.deadletter)
        job.queue = q.name if q is not None else ext.deadletter

    cpdef bint dequeue(self, Job job):
        if job.state != JOB_QUEUED:
            return False
        cdef Queue q = self.queues.get(job.queue)
        if q is not None:
            q.jobs.remove(job)
        mark_active(job)
        return True

    cpdef delete_job(self, Job job):
        if job.state == JOB_QUEUED:
            self.dequeue(job)
        self.timers.cancel(job)
        if self.jobs.pop(job.id, None) is job:
            self.job_log.kill((<unsigned long long>job.scan_hi << 32) | job.scan_lo)
            self.data_bytes -= self.job_cost(job)
        if job.flags & JOB_FLAG_GROUPED:
            self.group_done(job)

    cpdef group_done(self, Job job):
        """`job` is finished for its group (acked, deleted, expired, dead-lettered): out of
        the group's order, and the next job of the group is released."""
        head = self.groups.leave(job)
        if head is not None:
            self.release_head(head)

    cdef void release_head(self, object head) except *:
        """`head` (the job, or its ID while it is spilled) is its group's head now: queued
        at once if it waited for that (held, or never queued and past its DELAY), else its
        own timer queues it (a delivered head loaded from the AOF comes back after RETRY,
        as any delivered job)."""
        cdef Job job = <Job>head if type(head) is Job else self.jobs.get(head)
        if job is None and self.cold_jobs:
            job = self.load_cold(head)          # a held job spilled to disk
        if job is None or job.state != JOB_ACTIVE:
            return
        cdef bint held = job.flags & JOB_FLAG_HELD
        job.flags &= ~JOB_FLAG_HELD
        if (held or self.first_queueing_due(job)) and self.enqueue(job, False):
            return
        self.schedule(job)

    cdef bint first_queueing_due(self, Job job) noexcept:
        """An active job never delivered whose DELAY has passed: it waits for its first
        queueing (a head just released, or read back from the AOF)."""
        return (job.state == JOB_ACTIVE and not job.flags & JOB_FLAG_DELIVERED
                and <long long>(job.ctime // 1000000) + <long long>job.delay * 1000 <= self.now_ms)

    cpdef bint load_grouped(self, Job job) except -1:
        """A job of a group read back from the AOF takes its place in the group's order (by
        its sequence number, whatever order the file gave). A queued job it comes before
        leaves the queue and waits behind it. True when the job is its group's head and
        waits for its first queueing: the loader then queues it at once."""
        cdef Job previous
        if not self.groups.rejoin(job, self.jobs):
            return False
        cdef JobGroup g = (<JobOptions>job.ext).member_of
        if group_size(g) > 1:
            previous = self.groups.member_job(g.order[g.first + 1], self.jobs)   # the head it comes before
            if previous is not None:
                self.hold_back(previous)
        return self.first_queueing_due(job)

    cpdef hold_back(self, Job job):
        """A job no longer its group's head: out of its queue, held (no redelivery counted)."""
        if job.state == JOB_QUEUED:
            self.dequeue(job)
            job.flags = (job.flags & ~JOB_FLAG_BCAST_QUEUED) | JOB_FLAG_HELD
            self.schedule(job)

    cpdef spill_out(self, Job job, object marker):
        """`job` leaves RAM for the spill log (disque/workers/spill.py): as delete_job, but
        its scan-log entry stays, holding `marker`, for when it comes back."""
        if job.state == JOB_QUEUED:
            self.dequeue(job)
        self.leave_ram(job, marker)

    cdef long long leave_ram(self, Job job, object marker) except -1:
        """spill_out's share once `job` is out of its queue: its RAM (job_cost)."""
        self.timers.cancel(job)
        cdef long long cost = self.job_cost(job)
        if self.jobs.pop(job.id, None) is job:
            self.job_log.replace((<unsigned long long>job.scan_hi << 32) | job.scan_lo, marker)
            self.data_bytes -= cost
        if job.flags & JOB_FLAG_GROUPED:
            self.groups.spilled(job)        # its group keeps its ID, not the job
        return cost

    cpdef long long spill_out_tail(self, Queue q, list tail, object marker):
        """As spill_out for each job of `tail`, the newest jobs of `q` (newest first, as
        peek_tail gives them), unlinked from the queue at once: the RAM they held (their
        job_cost), or -1, with nothing done, when they are no longer its tail."""
        cdef Py_ssize_t n = len(tail), i
        cdef list now = q.jobs.peek_tail(n)
        if len(now) != n:
            return -1
        for i in range(n):
            if now[i] is not tail[i]:
                return -1
        q.jobs.cut_tail(n)
        cdef long long held = 0
        for i in range(n):
            mark_active(<Job>tail[i])
            held += self.leave_ram(<Job>tail[i], marker)
        return held

    cpdef bint register_back(self, Job job, unsigned long long seq):
        """A spilled job back in RAM, in its old scan-log entry; False if that entry is gone
        (then it was registered as a new job)."""
        self.jobs[job.id] = job
        self.data_bytes += self.job_cost(job)
        if seq and self.job_log.replace(seq, job):
            job.scan_hi = <unsigned short>(seq >> 32)
            job.scan_lo = <unsigned int>(seq & 0xffffffffULL)
            return True
        seq = self.job_log.add(job)
        job.scan_hi = <unsigned short>(seq >> 32)
        job.scan_lo = <unsigned int>(seq & 0xffffffffULL)
        return False

    cdef CommandTally tally(self, bytes name):
        """The counters of command `name`, made at its first call. C counters behind one
        lookup: two Counters updated per read cost a producer at one connection 2,800
        instructions per replicated ADDJOB (callgrind, docs/benchmarks.md)."""
        t = self.tallies.get(name)
        if t is None:
            t = self.tallies[name] = CommandTally()
        return <CommandTally>t

    @property
    def command_ns(self):
        """{name: service ns} (INFO commandstats)."""
        return {name: (<CommandTally>t).ns for name, t in self.tallies.items()}

    @property
    def command_count(self):
        """{name: calls} (the stats log)."""
        return {name: (<CommandTally>t).count for name, t in self.tallies.items()}

    @property
    def served_calls(self):
        """{name: calls served by this worker's connections} (commandstats' calls)."""
        return {name: (<CommandTally>t).served for name, t in self.tallies.items()
                if (<CommandTally>t).served}

    cpdef add_ns(self, bytes name, long long ns):
        """Time spent for `name` outside its call (a shared scan's part on this worker)."""
        cdef CommandTally t = self.tally(name)
        t.ns += ns

    cpdef account(self, bytes name, long long ns):
        """One command took `ns`: commandstats (its tally) and the latency histogram of
        the stats log."""
        cdef CommandTally t = self.tally(name)
        t.ns += ns
        t.count += 1
        self.latency_counts[latency_bucket(ns // 1000)] += 1
        self.n_commands += 1

    cpdef account_share(self, list names, long long ns, bint served=False):
        """The commands `names` took `ns` together (one read of a served connection): each
        is counted with its share, and with `served` as served by this worker's connections
        too (commandstats' calls)."""
        cdef Py_ssize_t n = len(names)
        cdef long long share = ns // n
        cdef Py_ssize_t i = 0, j
        cdef CommandTally t
        while i < n:
            # a run of one command (a pipeline of ADDJOBs) is counted at once; the names
            # are the command table's objects, so `is` finds the run
            name = names[i]
            j = i + 1
            while j < n and names[j] is name:
                j += 1
            t = self.tally(name)
            t.ns += share * (j - i)
            t.count += j - i
            if served:
                t.served += j - i
            i = j
        self.latency_counts[latency_bucket(share // 1000)] += n
        self.n_commands += n

    cpdef long long ack_lone(self, list argv, list left) except -1:
        """ACKJOB's common case on a lone node (ShardAcks.cmd_ackjob): every job whose
        copies are all ours is deleted at once, as ShardAcks.ack does, with no call per job.
        The IDs of the other jobs (acked already, copies on other nodes, dummy acks) go
        to `left` in order; unknown IDs are skipped. Returns the jobs acked here."""
        cdef long long count = 0
        cdef Py_ssize_t i, n = len(argv)
        cdef Job job
        for i in range(1, n):
            jid = argv[i]
            job = self.jobs.get(jid)
            if job is None:
                if self.cold_jobs:
                    left.append(jid)        # spilled: the Python path loads it back
                continue
            if job.state != JOB_ACKED and job.body is not None and len(job.nodes_delivered) <= 1:
                if self.aof_on:
                    self.aof_deljob(job)
                self.delete_job(job)
                count += 1
                self.n_acked += 1
            else:
                left.append(jid)
        return count

    cpdef Job fetch(self, Queue q):
        """Pop the head of `q` for a consumer (SPEC 3.2 "Fetching a job")."""
        cdef Job job = q.jobs.pop()
        if job is None:
            return None
        self.deliver(job)
        q.atime = self.now_s
        q.jobs_out += 1
        self.n_delivered += 1
        return job

    cdef void deliver(self, Job job) except *:
        """A job taken from its queue for a consumer (or a NEEDJOBS answer): active,
        delivered, and its requeue time RETRY from now. RETRY counts from the delivery on
        the node that delivers (docs/differences.md): the time set when the job was queued
        rolls forward by RETRY each time it passes while the job waits (SPEC 7.3), so a job
        that waited longer than its RETRY would otherwise be queued again at any moment
        after its delivery."""
        mark_active(job)
        job.flags |= JOB_FLAG_DELIVERED
        if job.retry and job.qtime:
            job.qtime = self.now_ms + retry_interval_ms(job) + self.rand_err()
            job.flags |= JOB_FLAG_BCAST_WILLQUEUE
            self.schedule(job)

    cpdef list fetch_many(self, Queue q, Py_ssize_t count):
        """Up to `count` jobs from the head of one queue (GETJOB FROM a single queue):
        fetch() in a loop without a Python call per job."""
        cdef list out = []
        cdef Job job
        while len(out) < count:
            job = q.jobs.pop()
            if job is None:
                break
            self.deliver(job)
            out.append(job)
        if out:
            q.atime = self.now_s
            q.jobs_out += len(out)
            self.n_delivered += len(out)
        return out

    cpdef object cmd_addjob(self, list argv):
        """ADDJOB <queue> <body> <ms-timeout> [options] (SPEC 3.1, in its order): the
        options, the node's limits, the new job; then the job is queued here, or handed
        to the replication as a ReplWait when it needs copies on other nodes."""
        cdef AddjobOptions o
        refusal = parse_addjob(argv, &o, self.cluster_size)
        if refusal is not None:
            return refusal
        # external replication (SPEC 3.1 step 5) from memory level 1 in a cluster only (a
        # lone node stores jobs until the OOM check at 95%), counting spilled jobs, when
        # enough nodes below their level can take the copies (docs/memory.md, "Spilling and
        # the memory levels"); a job of a group goes where its group's ranking says.
        cdef bint grouped = o.group_at and self.cluster_size > 1
        cdef bint extrepl = not grouped and (self.leaving or (self.cluster_size > 1 and (
            self.memory_level >= 1
            or (self.held_level >= 1 and self.roomy_nodes >= o.replicate))))
        cdef bytes qname = argv[1]
        cdef Queue q = self.queues.get(qname)
        refusal = self.addjob_refusal(&o, extrepl, q)
        if refusal is not None:
            return refusal
        if q is not None:
            qname = q.name                   # one bytes object per queue name, shared by its jobs
        cdef Job job = self.new_job(qname, argv, &o)
        self.n_added += 1
        cdef ReplWait wait
        cdef list ranking
        if grouped:
            ranking = self.groups.ranking(qname, (<JobOptions>job.ext).group)
            if ranking[0] != self.node_id or o.replicate > 1:
                # copies on the group's first nodes, and its place given by its home
                wait = copies_wanted(job, &o, False)
                wait.ranking = ranking
                wait.home = ranking[0]
                return wait
        elif o.replicate > 1 or extrepl:
            return copies_wanted(job, &o, extrepl)      # Replication.replicate_new's
        self.register_job(job)
        if o.group_at:
            # its place before the AOF record, which holds it; enqueue's gate holds a job
            # that is not its group's head
            self.groups.join_new(job, self.now_ms)
        if o.delay:
            self.schedule(job)
        else:
            self.enqueue(job, False)
        if self.aof_on:
            self.aof_loadjob(job)
        return status(job.id)

    cdef object addjob_refusal(self, AddjobOptions *o, bint extrepl, Queue q):
        """The error of an ADDJOB the node cannot take now: too few reachable nodes for
        its copies, its queue full (MAXLEN) or paused in input; None when it can."""
        cdef long long needed = o.replicate if extrepl else o.replicate - 1
        if needed > self.reachable_nodes:
            if extrepl and needed - 1 == self.reachable_nodes:
                reason = b"I'm leaving the cluster" if self.leaving else b"I'm out of memory"
                return (b"-NOREPL Not enough reachable nodes for the requested replication level, "
                        b"since I'm unable to hold a copy of the message for the following reason: "
                        + reason + b"\r\n")
            return b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"
        if q is not None:
            if o.maxlen and q.length() >= o.maxlen:
                return b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n"
            if q.paused & PAUSE_IN:
                return b"-PAUSED Queue paused in input, try later\r\n"
        return None

    cdef Job new_job(self, bytes qname, list argv, AddjobOptions *o):
        """The job an accepted ADDJOB creates: active, not registered yet."""
        cdef long long now = self.now_ms
        cdef Job job = Job.__new__(Job)     # Job.__init__'s Python call, without it
        job.id = self.ids.make(queue_slot(qname), o.ttl, o.retry)
        job.queue = qname
        job.body = argv[2]
        job.ctime = self.ids.next_ctime(now)
        job.etime = self.now_s + o.ttl
        job.delay = o.delay
        job.retry = o.retry
        job.repl = o.replicate
        job.nodes_delivered = self.self_nodes
        job.qtime = now + o.delay * 1000 if o.delay else now + o.retry * 1000
        mark_active(job)
        cdef JobOptions ext
        if o.backoff or o.maxdeliveries or o.group_at:
            ext = JobOptions.__new__(JobOptions)    # (no Python call of __init__)
            ext.backoff = o.backoff
            ext.max_deliveries = o.maxdeliveries
            if o.maxdeliveries:
                ext.deadletter = argv[o.deadletter_at] if o.deadletter_at else qname + b":dead"
            if o.group_at:
                ext.group = argv[o.group_at]
            job.ext = ext
        return job
