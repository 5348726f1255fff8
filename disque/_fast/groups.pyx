# cython: language_level=3
"""The order of job groups in one worker (docs/job-groups.md): per queue and group key, the
group's jobs by sequence number. The first is the group's head, the one job of the group
that may be queued or delivered; ShardCore.enqueue asks `is_head` before it queues a job of
a group, and releases the next head when a job `leave`s (acked, deleted, expired or
dead-lettered).

A group's order holds its jobs themselves while they are in RAM and only the ID of one
that spilled to disk (`spilled`; `relink` puts it back when it is read again): releasing
the next head, the step of every ack in a drain, then costs no lookup in the shard's map
of every job. The jobs stay in that map; a group adds a list slot per job, and in the
job's options its sequence number and its group, so that a job finds its group without a
lookup (the jobs of a group share one key object).

In a cluster each group has a **home**, the one node that gives its jobs their sequence
numbers and queues its head: the first of the group's nodes ranked by rendezvous hashing
(highest random weight) over the membership every node sees, `nodes`. Every node works it
out on its own; when a node leaves the membership only its groups move, each to the next
node of its ranking (the heir), which holds a copy of every job of the group.
"""
from libc.stdint cimport uint64_t
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.object cimport PyObject

from disque._fast.job cimport Job, JobOptions, JOB_FLAG_GROUPED, JOB_GROUP_FLAGS


cdef extern from "Python.h":
    # a list's item, borrowed, as a pointer: compared without touching the object
    PyObject *list_item "PyList_GET_ITEM" (object l, Py_ssize_t i)

# a job's place in a new group's order is never below the node clock in microseconds: a
# group that empties and fills again keeps increasing numbers
DEF SEQ_PER_MS = 1000
# the slots of heads that left are cut off once there are this many and they are half
# the group's list: a move per this many acks at least, not one per ack
DEF CUT_LEFT_HEADS = 32

# The rendezvous weights, the same on every node whatever its Python hash seed: 64-bit
# FNV-1a over the group (queue \0 key) and over the node ID, each finished by MurmurHash3's
# fmix64, then the two XORed and mixed again. Every ADDJOB ... GROUP in a cluster ranks
# the nodes (the BLAKE2b this replaced was a tenth of the producer's CPU); a weight needs
# spread, not secrecy. Changing it moves groups between versions: tests pin its values.
cdef uint64_t FNV_OFFSET = 0xcbf29ce484222325ULL
cdef uint64_t FNV_PRIME = 0x100000001b3ULL


cdef inline uint64_t fmix64(uint64_t k) noexcept nogil:
    k ^= k >> 33
    k *= 0xff51afd7ed558ccdULL
    k ^= k >> 33
    k *= 0xc4ceb9fe1a85ec53ULL
    k ^= k >> 33
    return k


cdef inline uint64_t fnv1a(const unsigned char *p, Py_ssize_t n, uint64_t h) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        h ^= p[i]
        h *= FNV_PRIME
    return h


cdef uint64_t group_hash(bytes queue, bytes key):
    cdef uint64_t h = fnv1a(queue, len(queue), FNV_OFFSET)
    h = fnv1a(<const unsigned char *>b"\0", 1, h)
    return fmix64(fnv1a(key, len(key), h))


cdef uint64_t node_hash(bytes node):
    return fmix64(fnv1a(node, len(node), FNV_OFFSET))


def group_weight(bytes queue, bytes key, bytes node):
    """Node `node`'s rendezvous weight for group (queue, key): the larger, the earlier in
    the group's ranking."""
    return fmix64(group_hash(queue, key) ^ node_hash(node))


cdef inline bint is_member(object m, Job job) except -1:
    """Whether the member `m` stands for `job` (itself, its ID while it was spilled, or
    the job read back under the same ID)."""
    if m is job:
        return True
    if type(m) is Job:
        return (<Job>m).id == job.id
    return <bytes>m == job.id


cdef Py_ssize_t index_of(JobGroup g, Job job, bint from_back) except -2:
    """Where `job` is in g's list (from g.first on), -1 if it is not."""
    cdef list order = g.order
    cdef Py_ssize_t n = len(order), first = g.first, i
    for i in range(n - first):
        if is_member(order[n - 1 - i if from_back else first + i], job):
            return n - 1 - i if from_back else first + i
    return -1


cdef Py_ssize_t place_in(JobGroup g, Job job, dict jobs) except -1:
    """Insert `job` among g's members by its sequence number (`jobs`: the shard's map, for
    the sequence number of a member read back under its ID); its place (0: the head)."""
    cdef unsigned long long seq = (<JobOptions>job.ext).group_seq
    cdef list members = g.order
    cdef Py_ssize_t lo = g.first, hi = len(members), mid
    cdef object other
    if seq > g.last_seq:
        # later than every member (the usual case: jobs come in their order): the last
        members.append(job)
        g.last_seq = seq
        return hi - g.first
    while lo < hi:                      # bisect by the members' sequence numbers
        mid = (lo + hi) // 2
        other = members[mid]
        if type(other) is not Job:
            other = jobs.get(other)     # None while spilled: placed as if after `job`
        if other is not None and (<JobOptions>(<Job>other).ext).group_seq < seq:
            lo = mid + 1
        else:
            hi = mid
    members.insert(lo, job)
    if seq > g.last_seq:
        g.last_seq = seq
    return lo - g.first


cdef class JobGroup:
    def __init__(self, bytes queue, bytes key):
        self.queue = queue
        self.key = key
        self.order = []
        self.first = 0
        self.last_seq = 0
        self.home = None
        self.home_epoch = 0

    def __len__(self):
        return group_size(self)

    @property
    def members(self):
        """Its jobs (or IDs of spilled ones) in their order, the head first (a copy)."""
        return self.order[self.first:]

    @property
    def head(self):
        """The ID of the group's head, None when it has no job."""
        return group_head_id(self)

    @property
    def ids(self):
        """The members' IDs in their order (a copy)."""
        return [member_id(m) for m in self.members]


cdef class JobGroups:
    def __init__(self):
        self.by_queue = {}
        self.count = 0
        self.members = 0
        self.nodes = ()
        self.me = b""
        self.epoch = 1

    def __dealloc__(self):
        PyMem_Free(self.c_hashes)
        PyMem_Free(self.c_weights)
        PyMem_Free(self.c_order)

    cpdef bint set_nodes(self, tuple nodes, bytes me) except -1:
        """The membership homes are chosen among, and this node's id: `nodes` holds `me`
        unless this node leaves the cluster. True when it changed."""
        nodes = tuple(sorted(set(nodes)))
        if nodes == self.nodes and me == self.me:
            return False
        cdef Py_ssize_t size = len(nodes) or 1, i
        cdef uint64_t *hashes = <uint64_t *>PyMem_Malloc(size * sizeof(uint64_t))
        cdef uint64_t *weights = <uint64_t *>PyMem_Malloc(size * sizeof(uint64_t))
        cdef Py_ssize_t *order = <Py_ssize_t *>PyMem_Malloc(size * sizeof(Py_ssize_t))
        if hashes == NULL or weights == NULL or order == NULL:
            PyMem_Free(hashes)
            PyMem_Free(weights)
            PyMem_Free(order)
            raise MemoryError()
        PyMem_Free(self.c_hashes)
        PyMem_Free(self.c_weights)
        PyMem_Free(self.c_order)
        self.c_hashes, self.c_weights, self.c_order = hashes, weights, order
        self.nodes = nodes
        for i in range(len(nodes)):
            hashes[i] = node_hash(nodes[i])
        self.me = me
        self.epoch += 1
        return True

    cpdef list ranking(self, bytes queue, bytes key):
        """The nodes by their rendezvous weight for the group, its home first, its heir
        second (equal weights: the larger node ID first). Ranked in C: every ADDJOB ...
        GROUP in a cluster asks, and a sort of Python tuples was a twentieth of the
        producer's CPU."""
        cdef Py_ssize_t n = len(self.nodes), i, j, k
        if n <= 1:
            return list(self.nodes) or [self.me]
        cdef uint64_t g = group_hash(queue, key), w
        cdef uint64_t *weights = self.c_weights
        cdef Py_ssize_t *order = self.c_order
        for i in range(n):              # insertion sort: a cluster has few nodes
            w = fmix64(g ^ self.c_hashes[i])
            weights[i] = w
            j = i
            while j > 0 and weights[order[j - 1]] <= w:
                order[j] = order[j - 1]
                j -= 1
            order[j] = i
        cdef list out = []
        for k in range(n):
            out.append(self.nodes[order[k]])
        return out

    cpdef bytes home_of(self, bytes queue, bytes key):
        """The first node of the group's ranking."""
        return self.ranking(queue, key)[0]

    cpdef bint is_home(self, Job job) except -1:
        """Whether this node is the home of `job`'s group, the node that queues its head."""
        if len(self.nodes) <= 1:
            return not self.nodes or self.nodes[0] == self.me
        cdef JobOptions ext = job.ext
        cdef JobGroup g = ext.member_of
        if g is None:
            return self.home_of(job.queue, ext.group) == self.me
        return self.home_here(g)

    cpdef bint home_here(self, JobGroup g) except -1:
        """Whether this node is the home of group `g` (its home is kept until the
        membership changes)."""
        if len(self.nodes) <= 1:
            return not self.nodes or self.nodes[0] == self.me
        if g.home_epoch != self.epoch:
            g.home = self.home_of(g.queue, g.key)
            g.home_epoch = self.epoch
        return g.home == self.me

    cpdef JobGroup group_of(self, Job job):
        """The group `job` names in its queue (None when it has none yet)."""
        cdef JobOptions ext = job.ext
        if ext.member_of is not None:
            return ext.member_of
        cdef dict groups = self.by_queue.get(job.queue)
        if groups is None:
            return None
        return groups.get(ext.group)

    cdef JobGroup make(self, Job job):
        cdef dict groups = self.by_queue.get(job.queue)
        if groups is None:
            groups = self.by_queue[job.queue] = {}
        cdef bytes key = (<JobOptions>job.ext).group
        cdef JobGroup g = groups.get(key)
        if g is None:
            g = groups[key] = JobGroup(job.queue, key)
            self.count += 1
        return g

    cpdef bint join_new(self, Job job, long long now_ms) except -1:
        """A new job (ADDJOB ... GROUP) takes the group's next place; True when it is the
        head (the group had no job)."""
        cdef JobGroup g = self.make(job)
        cdef unsigned long long seq = g.last_seq + 1
        cdef unsigned long long floor = <unsigned long long>now_ms * SEQ_PER_MS
        if seq < floor:
            seq = floor
        cdef JobOptions ext = job.ext
        ext.group_seq = seq
        ext.group = g.key
        ext.member_of = g
        g.last_seq = seq
        g.order.append(job)
        job.flags |= JOB_FLAG_GROUPED
        self.members += 1
        return group_size(g) == 1

    cpdef bint rejoin(self, Job job, dict jobs) except -1:
        """A loaded job (AOF) goes back to its place, the one its sequence number gives
        among the members' (`jobs`: the shard's map, which holds them); True when that is
        the head."""
        if job.flags & JOB_FLAG_GROUPED:
            return False
        cdef JobGroup g = self.make(job)
        cdef JobOptions ext = job.ext
        cdef Py_ssize_t at = place_in(g, job, jobs)
        ext.group = g.key
        ext.member_of = g
        job.flags |= JOB_FLAG_GROUPED
        self.members += 1
        return at == 0

    cpdef bint move(self, Job job, unsigned long long seq, dict jobs) except -1:
        """A member's place changes (PLACED: the home's, for one this node placed by its
        own clock): it moves to where `seq` puts it among the others. True when the order
        changed (usually it does not: only its number does)."""
        cdef JobOptions ext = job.ext
        cdef JobGroup g = ext.member_of
        cdef list members = g.order
        cdef Py_ssize_t n = len(members)
        cdef Py_ssize_t at = index_of(g, job, True)
        if at < 0:
            raise ValueError("job not in its group")
        cdef Job before = self.member_job(members[at - 1], jobs) if at > g.first else None
        cdef Job after = self.member_job(members[at + 1], jobs) if at + 1 < n else None
        if ((before is None or (<JobOptions>before.ext).group_seq < seq)
                and (after is None or seq < (<JobOptions>after.ext).group_seq)):
            ext.group_seq = seq
            if seq > g.last_seq:
                g.last_seq = seq
            return False
        del members[at]
        ext.group_seq = seq
        place_in(g, job, jobs)
        return True

    cpdef bint relink(self, Job job) except -1:
        """A job of a group read back from the spill log (a new record: its options do not
        know their group): linked to the group whose order still holds its ID. False, and
        no longer a member, when that group forgot it."""
        if not job.flags & JOB_FLAG_GROUPED:
            return False
        cdef JobOptions ext = job.ext
        cdef JobGroup g = self.group_of(job)
        cdef Py_ssize_t at = -1 if g is None else index_of(g, job, False)
        if at < 0:
            job.flags &= ~JOB_GROUP_FLAGS
            return False
        g.order[at] = job             # in RAM again: the group holds it, not its ID
        ext.group = g.key
        ext.member_of = g
        return True

    cpdef spilled(self, Job job):
        """`job` leaves RAM for the spill log: its group keeps its ID in its place (a held
        job spills from the newest, so the search starts at the back)."""
        if not job.flags & JOB_FLAG_GROUPED:
            return
        cdef JobGroup g = (<JobOptions>job.ext).member_of
        if g is None:
            return
        cdef Py_ssize_t at = index_of(g, job, True)
        if at >= 0:
            g.order[at] = job.id

    cdef Job member_job(self, object m, dict jobs):
        """The job a member stands for, if it is in RAM."""
        return <Job>m if type(m) is Job else jobs.get(m)

    cpdef bint is_head(self, Job job) except -1:
        """Whether `job` may be queued: the head of its group, or no longer in it."""
        if not job.flags & JOB_FLAG_GROUPED:
            return True
        cdef JobGroup g = (<JobOptions>job.ext).member_of
        if g is None:
            return True
        cdef list order = g.order
        if list_item(order, g.first) == <PyObject *>job:
            return True
        if group_size(g) > 1 and list_item(order, len(order) - 1) == <PyObject *>job:
            return False            # the newest (a job just added): its cold head not read
        return is_member(order[g.first], job)

    cpdef bytes head_id(self, Job job):
        """The ID of the head of `job`'s group, or None."""
        cdef JobGroup g = self.group_of(job)
        return None if g is None else group_head_id(g)

    cpdef object leave(self, Job job):
        """`job` is finished (or leaves for its dead-letter queue): out of its group. The
        group's new head when `job` was the head and others wait (its job, or its ID while
        it is spilled), else None."""
        if not job.flags & JOB_FLAG_GROUPED:
            return None
        job.flags &= ~JOB_GROUP_FLAGS
        cdef JobOptions ext = job.ext
        cdef JobGroup g = ext.member_of
        ext.member_of = None
        if g is None:
            return None
        cdef list members = g.order
        cdef Py_ssize_t first = g.first, at = first
        if not is_member(members[first], job):
            at = index_of(g, job, False)      # not the head (deleted, expired): rare
            if at < 0:
                return None
        self.members -= 1
        cdef dict groups
        if group_size(g) == 1:
            del members[:]
            g.first = 0
            groups = self.by_queue[g.queue]
            del groups[g.key]
            self.count -= 1
            if not groups:
                del self.by_queue[g.queue]
            return None
        if at != first:
            del members[at]
            return None
        members[first] = None
        first += 1
        if first >= CUT_LEFT_HEADS and first * 2 >= len(members):
            del members[:first]
            first = 0
        g.first = first
        return members[first]

    def of_queue(self, bytes queue):
        """(groups, jobs held behind their head) of one queue, over the groups this node is
        the home of (in a cluster the other holders of their jobs do not count them, so
        the nodes' figures add up): QSTAT's and the console's."""
        cdef dict groups = self.by_queue.get(queue)
        if not groups:
            return 0, 0
        cdef JobGroup g
        cdef Py_ssize_t held = 0, count = 0
        for g in groups.values():
            if self.home_here(g):
                count += 1
                held += group_size(g) - 1
        return count, held

    cpdef clear(self):
        """Forget every group (DEBUG FLUSHALL). A member and its group reference each other
        and neither is seen by the cycle collector (disque/_fast/job.pyx): the links are cut
        here, as `leave` cuts them one job at a time."""
        cdef JobGroup g
        for groups in self.by_queue.values():
            for g in groups.values():
                for m in g.order:
                    if type(m) is Job:
                        (<JobOptions>(<Job>m).ext).member_of = None
                del g.order[:]
                g.first = 0
        self.by_queue.clear()
        self.count = 0
        self.members = 0
