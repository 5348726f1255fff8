from disque._fast.job cimport Job

cdef struct AddjobOptions:
    # ADDJOB's options after parse_addjob: checked, with SPEC 3.1's defaults filled in
    long long replicate
    long long delay             # seconds
    long long retry             # seconds
    long long ttl               # seconds
    long long maxlen            # 0: no limit
    long long timeout           # ms the producer waits for its copies; 0: no limit
    long long backoff           # job features (docs/job-features.md); 0: not given
    long long maxdeliveries
    Py_ssize_t deadletter_at    # argv index of DEADLETTER's queue name; 0: not given
    Py_ssize_t group_at         # argv index of GROUP's key (docs/job-groups.md); 0: not given
    bint is_async

cdef object parse_addjob(list argv, AddjobOptions *o, int cluster_size)


cdef class ReplWait:
    # An ADDJOB whose job needs copies on other nodes: what ShardCore.cmd_addjob returns
    # to the replication, which keeps it while the producer waits for the copies
    cdef public Job job
    cdef public long long timeout       # as parsed (ms; 0: none)
    cdef public bint is_async
    cdef public bint extrepl            # external replication: no copy kept here
    # a job of a group in a cluster (docs/job-groups.md): its copy holders, the first
    # REPLICATE nodes of its group's ranking (None: picked at random), and its group's
    # home when that is another node, which gives the job its place (GROUPSEQ) and queues it
    cdef public tuple targets
    cdef public bytes home
    cdef public list ranking            # its group's nodes, home first (JobGroups.ranking)
    cdef public bint seq_pending        # the home's GOTJOB with the job's place has not come
    cdef public long long reqid         # the rest is set once the producer waits
    cdef public long long deadline, last_add, started

cdef ReplWait copies_wanted(Job job, AddjobOptions *o, bint extrepl)
