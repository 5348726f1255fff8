# The job record (SPEC section 6.1). One instance per job known to a worker.
# Small C fields keep a job near 100 bytes before its ID and body.

cdef enum:
    JOB_WAIT_REPL = 0
    JOB_ACTIVE = 1
    JOB_QUEUED = 2
    JOB_ACKED = 3

cdef enum:
    JOB_FLAG_BCAST_QUEUED = 1
    JOB_FLAG_BCAST_WILLQUEUE = 2
    JOB_FLAG_DELIVERED = 4
    JOB_FLAG_NACK_PENDING = 8   # a NACK ... DELAY already counted: the coming requeue is it
    JOB_FLAG_GROUPED = 16       # a member of its group's order (disque/_fast/groups.pyx)
    JOB_FLAG_HELD = 32          # due in its queue, held behind its group's head
    JOB_FLAG_HANDED = 64        # a group's head handed over by federation: queued where it came
    # the flags a group keeps in RAM only: never serialized (the loader rejoins the group)
    JOB_GROUP_FLAGS = 112

cdef class JobOptions:
    # retry back-off, dead-lettering (docs/job-features.md) and the job's group; None on a plain job
    cdef public unsigned int backoff          # max retry seconds; 0 = no back-off
    cdef public unsigned int max_deliveries   # 0 = never dead-lettered
    cdef public bytes deadletter              # dead-letter queue (None without MAXDELIVERIES)
    cdef public bytes origin                  # queue it was dead-lettered from; None = not yet
    cdef public bytes group                   # job group's key (docs/job-groups.md); None = none
    cdef public unsigned long long group_seq  # its place in the group, given once at ADDJOB
    cdef public object member_of              # the JobGroup whose order holds it; None = none

cdef class Job:
    cdef public bytes id
    cdef public object queue            # bytes, or None for a dummy ACK
    cdef public object body             # bytes, or None for a dummy ACK
    cdef public tuple nodes_delivered   # node IDs that may hold a copy (shared tuples)
    cdef public object nodes_confirmed  # None, or a set of node IDs
    cdef public unsigned long long ctime  # ms * 1e6 + tie counter
    cdef public long long qtime         # ms of the next (re)queue; 0 = never again
    cdef public long long awakeme       # ms the scheduler processes the job; 0 = not scheduled
    cdef public unsigned int etime      # absolute expiry, unix seconds
    cdef public unsigned int delay      # seconds
    cdef public unsigned int retry      # seconds
    cdef public unsigned int timer_pos  # index + 1 of its entry in the shard's TimerHeap; 0 = none
    cdef public unsigned short repl
    cdef public unsigned short nacks
    cdef public unsigned short additional_deliveries
    cdef public unsigned char state
    cdef public unsigned char flags
    cdef public unsigned char gc_retry
    cdef public unsigned char in_queue  # 1 while linked in a JobQueue
    # position in the shard's scan log (QSCAN/JSCAN cursors), 48 bits split to fit the
    # padding at the end of the record: seq = scan_hi << 32 | scan_lo; 0 = not logged
    cdef public unsigned short scan_hi
    cdef public unsigned int scan_lo
    cdef public JobOptions ext          # None unless BACKOFF / MAXDELIVERIES were given

cdef long long retry_interval_ms(Job job) noexcept
cdef bint dead_letter_due(Job job) noexcept
cpdef long long expire_ms(Job job)

cdef int job_cmp(Job a, Job b)

# The job state machine: these are the only writers of Job.state (docs/design.md, "The job
# state machine"; tests/test_job_states.py checks that nothing else assigns it).
cpdef void mark_wait_repl(Job job) noexcept
cpdef void mark_active(Job job) noexcept
cpdef void mark_queued(Job job) noexcept
cpdef void mark_acked(Job job) noexcept
cpdef void restore_state(Job job, unsigned char state) noexcept
