# cython: language_level=3
"""The job record, its ordering (SPEC 6.1 and 6.3) and its state transitions (docs/design.md,
"The job state machine")."""
cimport cython
from libc.string cimport memcmp

STATE_NAMES = (b"wait-repl", b"active", b"queued", b"acked")
WAIT_REPL = JOB_WAIT_REPL
ACTIVE = JOB_ACTIVE
QUEUED = JOB_QUEUED
ACKED = JOB_ACKED
FLAG_BCAST_QUEUED = JOB_FLAG_BCAST_QUEUED
FLAG_BCAST_WILLQUEUE = JOB_FLAG_BCAST_WILLQUEUE
FLAG_DELIVERED = JOB_FLAG_DELIVERED
FLAG_NACK_PENDING = JOB_FLAG_NACK_PENDING
FLAG_GROUPED = JOB_FLAG_GROUPED
FLAG_HELD = JOB_FLAG_HELD
FLAG_HANDED = JOB_FLAG_HANDED
GROUP_FLAGS = JOB_GROUP_FLAGS


# ints, bytes and a JobGroup, which holds its jobs: a cycle that nothing collects, so
# JobGroups.leave and JobGroups.clear cut it (a spilled member is held by its ID alone)
@cython.no_gc
cdef class JobOptions:
    def __init__(self, unsigned int backoff=0, unsigned int max_deliveries=0,
                 deadletter=None, origin=None, group=None, unsigned long long group_seq=0):
        self.backoff = backoff
        self.max_deliveries = max_deliveries
        self.deadletter = deadletter
        self.origin = origin
        self.group = group
        self.group_seq = group_seq
        self.member_of = None

    def __repr__(self):
        return (f"<JobOptions backoff={self.backoff} max_deliveries={self.max_deliveries} "
                f"deadletter={self.deadletter!r} origin={self.origin!r} "
                f"group={self.group!r} group_seq={self.group_seq}>")


@cython.no_gc   # bytes, tuples and sets of bytes, and its options (see JobOptions above)
@cython.freelist(64)
cdef class Job:
    def __init__(self, bytes id, queue=None, body=None):
        self.id = id
        self.queue = queue
        self.body = body
        self.nodes_delivered = ()
        self.nodes_confirmed = None
        self.ext = None

    def __repr__(self):
        return f"<Job {self.id!r} q={self.queue!r} state={STATE_NAMES[self.state].decode()}>"

    @property
    def state_name(self):
        return STATE_NAMES[self.state]

    @property
    def is_dummy_ack(self):
        return self.body is None


cdef int job_cmp(Job a, Job b):
    """Queue order: ascending ctime, ties broken by byte comparison of the ID."""
    if a.ctime < b.ctime:
        return -1
    if a.ctime > b.ctime:
        return 1
    cdef Py_ssize_t la = len(a.id), lb = len(b.id)
    cdef int r = memcmp(<const char*>a.id, <const char*>b.id, la if la < lb else lb)
    if r != 0:
        return r
    return (la > lb) - (la < lb)


cdef long long retry_interval_ms(Job job) noexcept:
    """The wait before the next requeue: RETRY, or with BACKOFF RETRY * 2^k capped at
    BACKOFF, k = redeliveries so far (nacks + additional deliveries)."""
    cdef long long r = job.retry
    cdef JobOptions ext = job.ext
    if ext is None or ext.backoff == 0 or r == 0:
        return r * 1000
    cdef int k = job.nacks + job.additional_deliveries
    while k > 0 and r < ext.backoff:
        r <<= 1
        k -= 1
    if r > ext.backoff:
        r = ext.backoff
    return r * 1000


cdef bint dead_letter_due(Job job) noexcept:
    """A job about to be queued again goes to its dead-letter queue instead: delivered
    MAXDELIVERIES times (the first delivery + one per requeue counted so far)."""
    cdef JobOptions ext = job.ext
    return (ext is not None and ext.max_deliveries != 0 and ext.origin is None
            and <unsigned int>job.nacks + job.additional_deliveries >= ext.max_deliveries)


def retry_interval(Job job):
    """retry_interval_ms in seconds (SHOW, WORKING, Python callers)."""
    return retry_interval_ms(job) // 1000


def retry_interval_msec(Job job):
    return retry_interval_ms(job)


def is_dead_letter_due(Job job):
    return dead_letter_due(job)


def compare(Job a, Job b):
    return job_cmp(a, b)


# ---- the job state machine: the only writers of Job.state ------------------------------

cpdef void mark_wait_repl(Job job) noexcept:
    """A new job waits for its copies on other nodes (ADDJOB, synchronous replication)."""
    job.state = JOB_WAIT_REPL


cpdef void mark_active(Job job) noexcept:
    """Held, not queued: delivered, dequeued, a copy from another node, a new job with a
    DELAY, or one whose copies are confirmed."""
    job.state = JOB_ACTIVE


cpdef void mark_queued(Job job) noexcept:
    """In its queue, ready for a consumer (ShardCore.enqueue, a job given back)."""
    job.state = JOB_QUEUED


cpdef void mark_acked(Job job) noexcept:
    """Acknowledged (ACKJOB, SETACK, a dummy ACK): waiting for its garbage collection."""
    job.state = JOB_ACKED


cpdef void restore_state(Job job, unsigned char state) noexcept:
    """The state a decoded job had when it was written (the AOF's storage form)."""
    job.state = state


cpdef long long expire_ms(Job job):
    """When `job` expires, in ms (docs/timers.md). `etime` holds whole seconds, the creation
    second + TTL as upstream; adding the creation's millisecond (from ctime) makes the job
    live its TTL to the millisecond on the node that created it, neither up to a second
    less (etime alone) nor up to a second more (upstream wakes the job at etime + 1 s)."""
    return <long long>job.etime * 1000 + <long long>((job.ctime // 1000000ULL) % 1000)
