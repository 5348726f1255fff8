# cython: language_level=3
"""The hot half of a worker's replication in C: a producer's ADDJOB with copies on other
nodes (replicate_new), the GOTJOBs that confirm them (on_gotjob, replicated), a copy kept
on a replica (on_repljob), and the dispatch of job messages (on_bus). The rest of the
replication (timeouts, requeues, acks, PAUSE) is Python, in
disque/workers/replication.py, whose `Replication` subclasses `ReplicationCore`.

Measured with `bench/bench_affinity.py --loads repl3` (docs/benchmarks.md): with the front-
ends off the job path (direct job links), these methods in Python were the largest share
of the first node's worker (perf: half its CPU in the interpreter).
"""
import random

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.set cimport PySet_Add
from libc.string cimport memcmp

from disque._fast.addjob cimport ReplWait
from disque._fast.groups cimport JobGroup, group_head_id
from disque._fast.job cimport (Job, JobOptions, JOB_ACTIVE, JOB_WAIT_REPL,
                               JOB_FLAG_BCAST_QUEUED, JOB_FLAG_GROUPED, JOB_FLAG_HELD,
                               mark_active, mark_wait_repl)
from disque._fast.resp cimport status
from disque._fast.shardcore cimport PAUSE_IN, ShardCore
from disque._fast.shardqueue cimport Queue

from disque._fast.codec cimport deserialize, serialize
from disque._fast.codec import CodecError
from disque.contracts import bus_messages as _bus

cdef long REPLJOB = _bus.REPLJOB
cdef long GOTJOB = _bus.GOTJOB
cdef long ENQUEUE = _bus.ENQUEUE
cdef long QUEUED = _bus.QUEUED
cdef long WORKING = _bus.WORKING
cdef long WILLQUEUE = _bus.WILLQUEUE
cdef long SETACK = _bus.SETACK
cdef long GOTACK = _bus.GOTACK
cdef long DELJOB = _bus.DELJOB
cdef long PAUSE = _bus.PAUSE
cdef long NEEDJOBS = _bus.NEEDJOBS
cdef long YOURJOBS = _bus.YOURJOBS
cdef long INTEREST = _bus.INTEREST
cdef long GROUPSEQ = _bus.GROUPSEQ
cdef long PLACED = _bus.PLACED
cdef long NOREPLY = _bus.NOREPLY
cdef long ACCEPTED = _bus.ACCEPTED
DEF LLONG_MAX = 9223372036854775807
DEF KNOWN_BY_BYTES = 16     # up to this many nodes, ids are matched by their bytes
cdef bytes NOT_ENOUGH_NODES = (b"-NOREPL Not enough reachable nodes for the requested "
                               b"replication level\r\n")
cdef bytes HOME_UNREACHABLE = (b"-NOREPL The home node of this job's group is not reachable "
                               b"now: try again once the cluster settles (docs/job-groups.md)\r\n")
cdef object choice = random.choice
cdef object random_below_one = random.random


cpdef tuple pick_distinct(tuple pool, Py_ssize_t k):
    """`k` distinct items of `pool` in random order: what random.sample gives, by a partial
    Fisher-Yates shuffle, without its Python frames and ABC checks (every replicated ADDJOB
    picks its copies' nodes here: 2% of a busy worker's time went to random.sample)."""
    cdef list items = list(pool)
    cdef Py_ssize_t n = len(items), i, j
    if k > n:
        raise ValueError("pick_distinct: %d of %d" % (k, n))
    for i in range(k):
        # random() < 1.0, and a double below 1 times a count stays below it: j < n
        j = i + <Py_ssize_t>(<double>random_below_one() * (n - i))
        items[i], items[j] = items[j], items[i]
    return tuple(items[:k])


cdef dict counts_by_type(long long *counts):
    return {t: counts[t] for t in range(COUNTED_TYPES) if counts[t]}


cdef inline bint node_in(bytes node, tuple nodes) except -1:
    """Whether `nodes` holds `node`: by identity first (the worker's ids are one object
    each, ReplicationCore.node_ids), then by value."""
    cdef bytes n
    for n in nodes:
        if n is node:
            return True
    for n in nodes:
        if n == node:
            return True
    return False


cdef class ReplicationCore:
    """Needs from the shard (a ShardCore): jobs, bus_out, the job state calls, `answer`
    and the `aof_loadjob` hook. Calls the Python handlers of the other job messages
    through its hooks (declared in replcore.pxd)."""

    def __init__(self, ShardCore shard):
        self.shard = shard
        self.reachable = self.roomy = self.crowded = ()
        self.node_ids = {}
        self.set_known(frozenset(shard.self_nodes))
        self.repl_waits = {}
        self.repl_by_reqid = {}

    @property
    def bus_in(self):
        """Job messages received, {type: count} (INFO's workerstats)."""
        return counts_by_type(self.bus_in_counts)

    @property
    def bus_sent(self):
        """Job messages sent, {type: count}."""
        return counts_by_type(self.bus_sent_counts)

    cdef int count_sent(self, list entries) except -1:
        """A turn's job messages, (destinations, type, flags, payload) each (send_bus)."""
        cdef long t
        for e in entries:
            t = e[1]
            if 0 <= t < COUNTED_TYPES:
                self.bus_sent_counts[t] += 1
        return 0

    cpdef send_bus(self, dest, long mtype, payload, long mflags=0):
        self.shard.bus_out.append((dest, mtype, mflags, payload))

    cpdef on_bus(self, list msgs):
        """Job messages from other nodes, [sender, type, flags, payload] each, already
        checked for shape by the front-end or the job link (busrelay.route_job_messages)."""
        cdef long mtype
        for m in msgs:
            sender, t, mflags, payload = m
            mtype = t
            hook = None
            if mtype != GOTJOB and mtype != REPLJOB and mtype != GROUPSEQ and mtype != PLACED:
                hook = self.message_hook(mtype)
                if hook is None:
                    continue
            if 0 <= mtype < COUNTED_TYPES:
                self.bus_in_counts[mtype] += 1
            try:
                if hook is not None:
                    hook(sender, mflags, payload)
                elif mtype == GOTJOB:
                    self.on_gotjob(sender, mflags, payload)
                elif mtype == REPLJOB:
                    self.on_repljob(sender, mflags, payload)
                elif mtype == GROUPSEQ:
                    self.on_groupseq(sender, payload)
                else:
                    self.on_placed(payload)
            except (TypeError, ValueError, IndexError, KeyError, OverflowError, CodecError):
                # a malformed message from a peer is dropped, like upstream
                pass

    cdef object message_hook(self, long mtype):
        """The hook handling a job message type in Python; None for a type that is no
        job message (REPLJOB and GOTJOB are handled here)."""
        if mtype == ENQUEUE:
            return self.enqueue_msg
        if mtype == QUEUED:
            return self.queued_msg
        if mtype == WORKING:
            return self.working_msg
        if mtype == WILLQUEUE:
            return self.willqueue_msg
        if mtype == SETACK:
            return self.setack_msg
        if mtype == GOTACK:
            return self.gotack_msg
        if mtype == DELJOB:
            return self.deljob_msg
        if mtype == PAUSE:
            return self.pause_msg
        if mtype == NEEDJOBS:
            return self.needjobs_msg
        if mtype == YOURJOBS:
            return self.yourjobs_msg
        if mtype == INTEREST:
            return self.interest_msg
        return None

    # ---- ADDJOB with copies on other nodes (SPEC 3.1 step 10) ------------------------------

    cpdef replicate_new(self, long long reqid, ReplWait wait):
        """Finish an ADDJOB whose job needs copies (REPLICATE > 1 or external replication):
        `wait` is what ShardCore.cmd_addjob returned for it. Returns the reply now, or None
        when the client waits for GOTJOBs (its reply then goes to `reqid`)."""
        cdef ShardCore shard = self.shard
        cdef Job job = wait.job
        cdef tuple roomy = self.roomy
        cdef tuple targets
        if wait.home is not None:
            refusal = self.group_holders(wait)
            if refusal is not None:
                return refusal
        cdef bint extrepl = wait.extrepl
        cdef int needed = job.repl if extrepl else job.repl - 1
        # a group's job: its holders are its group's (group_holders); any other, nodes with
        # room first (docs/memory.md, "Spilling and the memory levels"); while every node
        # has room, roomy is reachable
        if wait.targets is not None:
            targets = wait.targets
        elif needed < len(roomy):
            targets = pick_distinct(roomy, needed)
        elif needed == len(roomy) or not self.crowded:
            targets = roomy
        else:
            targets = roomy + pick_distinct(self.crowded,
                                            min(needed - len(roomy), len(self.crowded)))
        if wait.is_async:
            if extrepl:
                # not kept here: copies elsewhere, one of them queues it
                job.nodes_delivered = targets
                self.send_bus(targets, REPLJOB, serialize(job, False, shard.now_s), NOREPLY)
                self.send_bus((choice(targets),), ENQUEUE, [job.id, job.delay])
                return status(job.id)
            job.nodes_delivered = shard.self_nodes + targets
            data = serialize(job, False, shard.now_s)
            shard.register_job(job)
            self.activate(job)
            self.send_bus(targets, REPLJOB, data, NOREPLY)
            return status(job.id)
        mark_wait_repl(job)
        if extrepl:
            job.nodes_delivered = targets
            job.nodes_confirmed = set()
        else:
            job.nodes_delivered = shard.self_nodes + targets
            job.nodes_confirmed = {shard.node_id}
        shard.register_job(job)
        shard.schedule(job)
        # a group's job placed elsewhere goes to its holders as GROUPSEQ: each places it and
        # says where, the home's word is the job's place (PLACED tells the others)
        self.send_bus(targets, GROUPSEQ if wait.seq_pending else REPLJOB,
                      serialize(job, False, shard.now_s))
        cdef long long now = shard.now_ms
        wait.reqid = reqid
        if not wait.timeout:
            wait.deadline = 0
        elif wait.timeout > LLONG_MAX - now:
            wait.deadline = LLONG_MAX
        else:
            wait.deadline = now + wait.timeout
        wait.last_add = now
        wait.started = now
        self.repl_waits[job.id] = wait
        self.repl_by_reqid[reqid] = wait
        return None

    cdef object group_holders(self, ReplWait wait):
        """A job of a group in a cluster (docs/job-groups.md): its copies go to the first
        REPLICATE reachable nodes of its group's ranking (ranked once, by ADDJOB), the
        home first, and this node
        keeps one only when it is among them. On the home the job takes its place now;
        elsewhere the home gives it (GROUPSEQ). The error reply when that cannot be."""
        cdef ShardCore shard = self.shard
        cdef Job job = wait.job
        cdef bytes me = shard.node_id, home = wait.home, n
        cdef tuple reachable = self.reachable
        if home != me and not node_in(home, reachable):
            return HOME_UNREACHABLE
        cdef list targets = []
        cdef bint mine = False
        for n in wait.ranking:
            if len(targets) + mine >= job.repl:
                break
            if n == me:
                mine = True
            elif node_in(n, reachable):
                targets.append(n)
        if len(targets) + mine < job.repl:
            return NOT_ENOUGH_NODES
        wait.extrepl = not mine
        wait.targets = tuple(targets)
        if home == me:
            shard.groups.join_new(job, shard.now_ms)
        else:
            wait.seq_pending = True
        return None

    cpdef activate(self, Job job):
        """A job of ours that may now be delivered: queue it (or schedule its DELAY), log it."""
        mark_active(job)
        if job.delay:
            self.shard.schedule(job)
        else:
            self.shard.enqueue(job)
        if self.shard.aof_on:
            self.shard.aof_loadjob(job)

    cpdef replicated(self, ReplWait wait):
        """Every copy confirmed: answer the producer."""
        cdef Job job = wait.job
        self.end_wait(wait)
        cdef bytes home = wait.home
        if home is not None and home != self.shard.node_id:
            # a job of a group placed by its home elsewhere: its holders learn the place
            # (their copies left without it), and the home queues it (PLACED)
            self.send_bus(wait.targets, PLACED, [job.id, (<JobOptions>job.ext).group_seq])
        elif wait.extrepl:
            self.send_bus((choice(sorted(job.nodes_confirmed)),), ENQUEUE, [job.id, job.delay])
        if wait.extrepl:
            self.shard.delete_job(job)
        else:
            job.nodes_confirmed = None
            self.activate(job)
        reply = status(job.id)
        # Shard.answer, without its Python frame: a served producer (negative wait id)
        # or the front-end's request
        if wait.reqid < 0:
            if self.served is None:     # a negative wait id is a served producer's
                raise RuntimeError("a served producer's reply on a worker serving none")
            self.served.repl_answered(wait.reqid, reply)
        else:
            self.shard.out.append([wait.reqid, reply])

    cpdef end_wait(self, ReplWait wait):
        self.repl_waits.pop(wait.job.id, None)
        self.repl_by_reqid.pop(wait.reqid, None)

    cpdef on_gotjob(self, sender, mflags, payload):
        wait = self.repl_waits.get(payload[0])
        if wait is None:
            return
        cdef Job job = (<ReplWait>wait).job
        if job.state != JOB_WAIT_REPL:
            return
        if (<ReplWait>wait).seq_pending and sender == (<ReplWait>wait).home:
            if payload[1] <= 0:
                return
            self.placed(<ReplWait>wait, payload[1])
        self.add_node(job, sender)
        confirmed = job.nodes_confirmed
        if type(confirmed) is set:
            PySet_Add(confirmed, sender)    # the set replicate_new made, without a method call
        else:
            confirmed.add(sender)
        if len(job.nodes_confirmed) >= job.repl and not (<ReplWait>wait).seq_pending:
            self.replicated(<ReplWait>wait)

    cdef placed(self, ReplWait wait, unsigned long long seq):
        """The home gave a job of its group its place (the aux of its GOTJOB): the job
        joins the group here if it is kept here."""
        cdef ShardCore shard = self.shard
        cdef Job job = wait.job
        (<JobOptions>job.ext).group_seq = seq
        wait.seq_pending = False
        if not wait.extrepl:
            shard.groups.rejoin(job, shard.jobs)

    cpdef on_placed(self, payload):
        """PLACED [id, place]: a job of a group, its copies confirmed, with the place its
        home gave it. On its home, queued (what ENQUEUE does for a plain job). On another
        holder, whose copy came without the place and joined its group at a place of this
        node's clock: moved to its place, and logged again with it; the group's head is
        never held, and a job that is no longer its head is not queued."""
        cdef ShardCore shard = self.shard
        job = shard.jobs.get(payload[0])
        if job is None and shard.cold_jobs:
            job = shard.load_cold(payload[0])
        if job is None:
            return
        cdef Job copy = job
        cdef unsigned long long seq = payload[1]
        if copy.body is None or not copy.flags & JOB_FLAG_GROUPED or seq == 0:
            return
        cdef JobGroup g = (<JobOptions>copy.ext).member_of
        if g is None:
            return
        if (<JobOptions>copy.ext).group_seq != seq:
            old_head = group_head_id(g)
            if shard.groups.move(copy, seq, shard.jobs):
                for jid in (old_head, copy.id):
                    job = shard.jobs.get(jid)
                    if job is not None:
                        self.hold_unless_head(job)
            if shard.aof_on:
                shard.aof_loadjob(copy)
        if shard.groups.home_here(g):
            self.enqueue_copy(copy, copy.delay)

    cdef hold_unless_head(self, Job job):
        """After a member moved: the head waits for no one, the others wait in no queue."""
        cdef ShardCore shard = self.shard
        if not shard.groups.is_head(job):
            shard.hold_back(job)
        elif job.flags & JOB_FLAG_HELD:
            job.flags &= ~JOB_FLAG_HELD
            shard.schedule(job)

    # ---- copies of other nodes' jobs -------------------------------------------------------

    cpdef on_repljob(self, sender, mflags, data):
        """A copy from the originator. The front-end already refused it while this node
        leaves or is above 75% of maxmemory; with ACCEPTED it also answered GOTJOB.
        Upstream also refuses copies for a queue paused in input; a copy is not queued
        (a requeue respects the pause, see Shard.run_timers), so here it is kept."""
        cdef ShardCore shard = self.shard
        cdef long flags = mflags
        if not flags & ACCEPTED and (shard.memory_level > 0 or shard.leaving
                                     or shard.aof_refusing):
            return                      # no GOTJOB: the originator picks another node
        job, _ = deserialize(data, 0, False, shard.now_s, shard.now_ms, shard.rand_err())
        cdef Job copy = job
        known = shard.jobs.get(copy.id)
        if known is None and shard.cold_jobs:
            known = shard.find_job(copy.id)     # spilled here: loaded back, not held twice
        if known is not None:
            if (<Job>known).body is not None:
                self.merge_nodes(known, copy.nodes_delivered)
        else:
            self.keep_copy(copy, sender)
        if not flags & NOREPLY:
            self.send_bus((sender,), GOTJOB, [copy.id, 0])

    cdef keep_copy(self, Job copy, sender):
        """A copy of a job new here: registered with its known nodes, in its group if it
        has one, its requeue timer set, logged."""
        cdef ShardCore shard = self.shard
        q = shard.queues.get(copy.queue)
        if q is not None:
            copy.queue = (<Queue>q).name    # share the queue name object
        copy.nodes_delivered = self.known_nodes(copy.nodes_delivered)
        copy.flags |= JOB_FLAG_BCAST_QUEUED
        mark_active(copy)
        shard.register_job(copy)
        if copy.ext is not None:
            self.join_copy(copy)
        shard.schedule(copy)
        if shard.aof_on:
            shard.aof_loadjob(copy)

    cpdef join_copy(self, Job job):
        """A copy of another node's job, just registered here (REPLJOB, GROUPSEQ, YOURJOBS):
        into its group's order when it has a group (docs/job-groups.md). One without a
        place yet gets the group's next: on the home that is its place (GROUPSEQ); on
        another holder a place by this node's clock until PLACED tells it the home's."""
        cdef JobOptions ext = job.ext
        if ext is None or ext.group is None or job.flags & JOB_FLAG_GROUPED:
            return
        cdef ShardCore shard = self.shard
        if ext.group_seq == 0:
            shard.groups.join_new(job, shard.now_ms)
        else:
            shard.load_grouped(job)
        cdef JobGroup g = ext.member_of
        if not shard.groups.home_here(g) and g.home is not None and g.home not in job.nodes_delivered:
            # its producer saw another membership (a node coming back, a partition healing):
            # the home, which queues the group's head, gets the job now rather than at this
            # copy's requeue timer, one RETRY per job of the group (rehome_groups' rule)
            self.send_to_home(job, g.home)

    cpdef send_to_home(self, Job job, bytes home):
        """A job of a group to its home, which may not hold it: a copy with its place."""
        self.add_node(job, home)
        self.send_bus((home,), REPLJOB, serialize(job, False, self.shard.now_s), NOREPLY)

    cpdef enqueue_copy(self, Job job, long long delay):
        """ENQUEUE (SPEC 10.4), and a group's home on PLACED: the copy `job` is queued now,
        or after `delay` seconds, unless its queue is paused in input."""
        cdef ShardCore shard = self.shard
        if job.body is None or (job.state != JOB_WAIT_REPL and job.state != JOB_ACTIVE):
            return
        q = shard.queues.get(job.queue)
        if q is not None and (<Queue>q).paused & PAUSE_IN:
            return
        job.flags &= ~JOB_FLAG_BCAST_QUEUED
        if job.state == JOB_WAIT_REPL:
            mark_active(job)
        if delay:
            job.qtime = shard.now_ms + delay * 1000
            shard.schedule(job)
            return
        if job.qtime == 0:
            if not job.flags & JOB_FLAG_GROUPED:
                return      # SPEC 3.1 quirk: an at-most-once copy is never queued
            job.qtime = shard.now_ms    # but a group's home queues its at-most-once job
        shard.enqueue(job)

    cpdef on_groupseq(self, sender, data):
        """A job of a group held here, from a producer that is not the group's home: kept
        as a copy, given the group's next place here, answered GOTJOB with it (once its
        LOADJOB record is written, as any copy's). On the home that place is the job's;
        elsewhere it holds until PLACED brings the home's. Taken whatever the memory level:
        a group's jobs live on its holders (spilled if they must). Asked again (a lost
        GOTJOB), the same place is given again."""
        cdef ShardCore shard = self.shard
        if shard.leaving or shard.aof_refusing:
            return
        job, _ = deserialize(data, 0, False, shard.now_s, shard.now_ms, shard.rand_err())
        cdef Job copy = job
        if copy.ext is None or (<JobOptions>copy.ext).group is None:
            return
        known = shard.jobs.get(copy.id)
        if known is None and shard.cold_jobs:
            known = shard.find_job(copy.id)     # spilled here: loaded back, not held twice
        if known is not None:
            copy = known
            if copy.body is None or copy.ext is None or not (<JobOptions>copy.ext).group_seq:
                return
            self.merge_nodes(copy, job.nodes_delivered)
        else:
            (<JobOptions>copy.ext).group_seq = 0
            self.keep_copy(copy, sender)
        self.send_bus((sender,), GOTJOB, [copy.id, (<JobOptions>copy.ext).group_seq])

    cpdef set_known(self, frozenset known):
        """Every node of the cluster (this one included): kept as the id objects this
        worker already holds for them (`node_ids`), and as a tuple for known_nodes."""
        cdef dict had = self.node_ids
        cdef dict ids = {}
        for n in known:
            n = had.get(n, n)
            ids[n] = n                  # the kept object as the key too: found by identity
        self.node_ids = ids
        self.known = frozenset(ids.values())
        self.known_ids = tuple(self.known)

    cpdef tuple known_nodes(self, tuple nodes):
        """The nodes of a copy that this node knows, as the id objects of `known` itself: a
        copy's list holds no bytes of its own (three fewer objects per job), and ids just
        decoded are matched by their bytes, not hashed (hashing them was 9% of a replica's
        instructions per copy, callgrind), walking both tuples as C arrays into the tuple
        returned (a list turned into a tuple was half of this method's instructions). Past
        KNOWN_BY_BYTES nodes, by hash (`node_ids`)."""
        cdef tuple ids = self.known_ids
        cdef Py_ssize_t nk = PyTuple_GET_SIZE(ids), nn = PyTuple_GET_SIZE(nodes), j, k, size
        cdef Py_ssize_t count = 0
        cdef PyObject *n
        cdef PyObject *c
        cdef PyObject *found[KNOWN_BY_BYTES]
        cdef tuple out
        if nk > KNOWN_BY_BYTES:
            node_ids = self.node_ids
            return tuple([x for x in map(node_ids.get, nodes) if x is not None])
        if nn > KNOWN_BY_BYTES:         # a peer's odd list: one node at a time
            return tuple([x for j in range(nn) for x in self.known_nodes(nodes[j:j + 1])])
        for j in range(nn):
            n = PyTuple_GET_ITEM(nodes, j)
            if not PyBytes_CheckExact(<object>n):
                continue
            size = PyBytes_GET_SIZE(<object>n)
            for k in range(nk):
                c = PyTuple_GET_ITEM(ids, k)
                if (c == n or (PyBytes_GET_SIZE(<object>c) == size
                               and memcmp(PyBytes_AS_STRING(<object>c),
                                          PyBytes_AS_STRING(<object>n), size) == 0)):
                    found[count] = c
                    count += 1
                    break
        out = PyTuple_New(count)
        for j in range(count):
            Py_INCREF(<object>found[j])
            PyTuple_SET_ITEM(out, j, <object>found[j])
        return out

    cpdef merge_nodes(self, Job job, tuple nodes):
        """Add the known nodes of `nodes` the job does not list yet, each once: `nodes` may
        name one twice (YOURJOBS adds its sender to the list it carries), and a node listed
        twice would keep the ACK's garbage collection from ever completing (SPEC 7.4)."""
        have = job.nodes_delivered
        extra = []
        for n in self.known_nodes(nodes):
            if n not in have and n not in extra:
                extra.append(n)
        if extra:
            job.nodes_delivered = have + tuple(extra)

    cpdef add_node(self, Job job, node):
        if node not in job.nodes_delivered:
            job.nodes_delivered = job.nodes_delivered + (node,)
