# cython: language_level=3
"""The order of job groups in one worker (docs/job-groups.md): per queue and group key, the
group's jobs by sequence number. The first is the group's head, the one job of the group
that may be queued or delivered; ShardCore.enqueue asks `is_head` before it queues a job of
a group, and releases the next head when a job `leave`s (acked, deleted, expired or
dead-lettered).

A group holds job IDs, not jobs: the jobs stay in the shard's map, and a group's order is
all it adds (two list slots and a sequence number in the job's options per job).
"""
from bisect import bisect_left

from disque._fast.job cimport Job, JobOptions, JOB_FLAG_GROUPED, JOB_GROUP_FLAGS

# a job's place in a new group's order is never below the node clock in microseconds: a
# group that empties and fills again keeps increasing numbers
DEF SEQ_PER_MS = 1000


cdef class JobGroup:
    def __init__(self):
        self.seqs = []
        self.ids = []
        self.last_seq = 0

    def __len__(self):
        return len(self.ids)

    @property
    def head(self):
        return self.ids[0] if self.ids else None


cdef class JobGroups:
    def __init__(self):
        self.by_queue = {}
        self.count = 0
        self.members = 0

    cpdef JobGroup group_of(self, Job job):
        """The group `job` names in its queue (None when it has none yet)."""
        cdef dict groups = self.by_queue.get(job.queue)
        if groups is None:
            return None
        return groups.get((<JobOptions>job.ext).group)

    cdef JobGroup make(self, Job job):
        cdef dict groups = self.by_queue.get(job.queue)
        if groups is None:
            groups = self.by_queue[job.queue] = {}
        cdef bytes key = (<JobOptions>job.ext).group
        cdef JobGroup g = groups.get(key)
        if g is None:
            g = groups[key] = JobGroup()
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
        (<JobOptions>job.ext).group_seq = seq
        g.last_seq = seq
        g.seqs.append(seq)
        g.ids.append(job.id)
        job.flags |= JOB_FLAG_GROUPED
        self.members += 1
        return len(g.ids) == 1

    cpdef bint rejoin(self, Job job) except -1:
        """A loaded job (AOF) goes back to its place, the one its sequence number gives;
        True when that is the head."""
        if job.flags & JOB_FLAG_GROUPED:
            return False
        cdef JobGroup g = self.make(job)
        cdef unsigned long long seq = (<JobOptions>job.ext).group_seq
        cdef Py_ssize_t at = bisect_left(g.seqs, seq)
        g.seqs.insert(at, seq)
        g.ids.insert(at, job.id)
        if seq > g.last_seq:
            g.last_seq = seq
        job.flags |= JOB_FLAG_GROUPED
        self.members += 1
        return at == 0

    cpdef bint is_head(self, Job job) except -1:
        """Whether `job` may be queued: the head of its group, or no longer in it."""
        if not job.flags & JOB_FLAG_GROUPED:
            return True
        cdef JobGroup g = self.group_of(job)
        return g is None or (<bytes>g.ids[0]) == job.id

    cpdef bytes head_id(self, Job job):
        """The ID of the head of `job`'s group, or None."""
        cdef JobGroup g = self.group_of(job)
        return None if g is None or not g.ids else g.ids[0]

    cpdef bytes leave(self, Job job):
        """`job` is finished (or leaves for its dead-letter queue): out of its group. The
        ID of the group's new head when `job` was the head and others wait, else None."""
        if not job.flags & JOB_FLAG_GROUPED:
            return None
        job.flags &= ~JOB_GROUP_FLAGS
        cdef dict groups = self.by_queue.get(job.queue)
        cdef bytes key = (<JobOptions>job.ext).group
        cdef JobGroup g = None if groups is None else groups.get(key)
        if g is None:
            return None
        cdef Py_ssize_t at = bisect_left(g.seqs, (<JobOptions>job.ext).group_seq)
        if at >= len(g.ids) or (<bytes>g.ids[at]) != job.id:
            if job.id not in g.ids:
                return None
            at = g.ids.index(job.id)
        del g.seqs[at]
        del g.ids[at]
        self.members -= 1
        if not g.ids:
            del groups[key]
            self.count -= 1
            if not groups:
                del self.by_queue[job.queue]
            return None
        return g.ids[0] if at == 0 else None

    cpdef clear(self):
        self.by_queue.clear()
        self.count = 0
        self.members = 0
