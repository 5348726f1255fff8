from disque._fast.addjob cimport AddjobOptions
from disque._fast.groups cimport JobGroups
from disque._fast.job cimport Job
from disque._fast.jobid cimport IdMaker, queue_slot, queue_worker
from disque._fast.scanlog cimport ScanLog
from disque._fast.shardqueue cimport Queue
from disque._fast.timers cimport TimerHeap

# PAUSE state bits of a queue (SPEC 3.11): the one home of their values, which the Python
# parts import from this module
cpdef enum QueuePause:
    PAUSE_IN = 1
    PAUSE_OUT = 2

cdef class CommandTally:
    cdef public long long ns             # service time of the command here, ns
    cdef public long long count          # its calls
    cdef public long long served         # calls this worker's connections served (run here or not)


cdef class ShardCore:
    cdef public dict jobs
    cdef public dict queues
    cdef public TimerHeap timers
    cdef public IdMaker ids
    cdef public bytes node_id
    cdef public tuple self_nodes
    cdef public set ready
    cdef public long long now_ms
    cdef public long long now_s
    cdef public long long clock_base_ns   # node clock = CLOCK_MONOTONIC + this (disque/nodeclock.py)
    cdef public int cluster_size
    cdef public int reachable_nodes
    cdef public int roomy_nodes         # of those, below 75% counting spilled jobs
    cdef public bint leaving
    cdef public list bus_out           # (destination node ids, type, flags, payload) for the bus
    cdef public bint aof_on            # append-only file enabled: log new jobs (persistence)
    cdef public bint aof_refusing      # the AOF cannot be written: take no copies (persistence)
    cdef public int memory_level        # of used_memory (SPEC 9)
    cdef public int held_level          # the same counting spilled jobs (docs/memory.md)
    cdef public ScanLog job_log, queue_log
    cdef public JobGroups groups         # the order of job groups (docs/job-groups.md)
    cdef public long long data_bytes     # bytes held by jobs and queues (SPEC 9, docs/memory.md)
    cdef public long long n_added, n_delivered, n_acked, n_nacked, n_requeued, n_expired
    cdef public long long n_commands    # commands run here, on every path (account, account_share)
    cdef unsigned long long rng
    cdef public int index, nworkers      # this worker and how many the node has
    cdef public list prefix_waiters      # consumers blocked in GETJOB FROM-PREFIX
    cdef public dict dead_lettered       # origin queue -> jobs moved to its dead-letter queue
    cdef public list out                 # entries for the front-end's next batch (replies, offers)
    cdef public dict tallies             # command name -> CommandTally (INFO commandstats, stats log)
    cdef public list latency_counts      # the stats log's latency histogram (its list)
    # Hooks: what the core calls on the Python parts, bound once by disque.workers.shard.Shard
    # (SHARD_HOOKS there); a C field holding the bound method, None until bound (tested).
    cdef public long long oom_data       # data_bytes above which the node is over 95% of maxmemory
    cdef public bytes oom_reply          # the refusal then (a failing spill disk has its own)
    cdef public long long cold_jobs      # jobs spilled to disk (disque/workers/spill.py): found by ID there
    cdef public object evict_for_oom     # () eviction before a refused `m` command: True if it may run
    cdef public object aof_loadjob       # (job) a job to log as LOADJOB, if the AOF is on
    cdef public object aof_deljob        # (job) a job to log as DELJOB, if the AOF is on
    cdef public object queue_created     # (queue) a new queue (GETJOB FROM-PREFIX waiters)
    cdef public object load_cold         # (job id) a spilled job back in RAM, or None

    cpdef long long rand_err(self)
    cpdef Queue get_queue(self, bytes name, bint create=*)
    cpdef register_job(self, Job job)
    cpdef remove_queue(self, Queue q)
    cpdef long long job_cost(self, Job job)
    cpdef schedule(self, Job job)
    cpdef tick(self)
    cpdef object run_command(self, bytes name, handler, list argv)
    cpdef bint timers_due(self)
    cpdef bint enqueue(self, Job job, bint nack=*)
    cpdef bint dequeue(self, Job job)
    cpdef delete_job(self, Job job)
    cpdef group_done(self, Job job)
    cdef void release_head(self, object head) except *
    cdef bint first_queueing_due(self, Job job) noexcept
    cpdef bint load_grouped(self, Job job) except -1
    cpdef hold_back(self, Job job)
    cpdef spill_out(self, Job job, object marker)
    cdef long long leave_ram(self, Job job, object marker) except -1
    cpdef long long spill_out_tail(self, Queue q, list tail, object marker)
    cpdef bint register_back(self, Job job, unsigned long long seq)
    cpdef account(self, bytes name, long long ns)
    cpdef add_ns(self, bytes name, long long ns)
    cdef CommandTally tally(self, bytes name)
    cpdef account_share(self, list names, long long ns, bint served=*)
    cpdef long long ack_lone(self, list argv, list left) except -1
    cpdef Job fetch(self, Queue q)
    cpdef list fetch_many(self, Queue q, Py_ssize_t count)
    cdef void deliver(self, Job job) except *
    cpdef move_to_dead_letter(self, Job job)
    cpdef object cmd_addjob(self, list argv)
    cdef object addjob_refusal(self, AddjobOptions *o, bint extrepl, Queue q)
    cdef Job new_job(self, bytes qname, list argv, AddjobOptions *o)

