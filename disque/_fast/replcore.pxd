from disque._fast.addjob cimport ReplWait
from disque._fast.job cimport Job
from disque._fast.servedcore cimport ServedCore
from disque._fast.shardcore cimport ShardCore

cdef enum:
    COUNTED_TYPES = 32                  # bus message types counted by type (they go to 22)


cdef class ReplicationCore:
    cdef public ShardCore shard
    cdef public tuple reachable         # other nodes that can get copies (bytes ids)
    cdef public tuple roomy             # those below 75% counting spilled jobs (MEMORY_HIGH)
    cdef public tuple crowded           # the others of `reachable`
    cdef public frozenset known         # every node of the cluster, self included
    cdef public tuple known_ids         # the same, as a tuple (known_nodes)
    # one object per node id of `known`: every tuple, set and dict of node ids this worker
    # builds holds these, so the job path compares ids by identity, not by their bytes
    cdef public dict node_ids
    cdef public dict repl_waits         # job id -> ReplWait
    cdef public dict repl_by_reqid      # reqid -> ReplWait
    cdef long long bus_in_counts[COUNTED_TYPES]     # messages received / sent, by type
    cdef long long bus_sent_counts[COUNTED_TYPES]   # (the bus_in and bus_sent dicts)
    cdef public ServedCore served       # the worker's, when it serves connections itself
    # Hooks: the Python handlers of the job messages not handled here, bound once by
    # disque.workers.replication.Replication (REPLICATION_HOOKS there); a C field holding
    # the bound method, None until bound (tested). Each takes (sender, mflags, payload).
    cdef public object enqueue_msg      # (sender, mflags, payload) ENQUEUE
    cdef public object queued_msg       # (sender, mflags, payload) QUEUED
    cdef public object working_msg      # (sender, mflags, payload) WORKING
    cdef public object willqueue_msg    # (sender, mflags, payload) WILLQUEUE
    cdef public object setack_msg       # (sender, mflags, payload) SETACK
    cdef public object gotack_msg       # (sender, mflags, payload) GOTACK
    cdef public object deljob_msg       # (sender, mflags, payload) DELJOB
    cdef public object wait_failed      # (wait, reply) a producer's wait ends in a refusal (ackpath.pyx)
    cdef public object pause_msg        # (sender, mflags, payload) PAUSE ... BCAST
    cdef public object needjobs_msg     # (sender, mflags, payload) NEEDJOBS (federation)
    cdef public object yourjobs_msg     # (sender, mflags, payload) YOURJOBS (federation)
    cdef public object interest_msg     # (sender, mflags, payload) INTEREST (federation)

    cpdef on_bus(self, list msgs)
    cdef int count_sent(self, list entries) except -1
    cpdef set_known(self, frozenset known)
    cpdef send_bus(self, dest, long mtype, payload, long mflags=*)
    cdef object message_hook(self, long mtype)
    cpdef replicate_new(self, long long reqid, ReplWait wait)
    cpdef activate(self, Job job)
    cpdef replicated(self, ReplWait wait)
    cpdef end_wait(self, ReplWait wait)
    cpdef on_gotjob(self, sender, mflags, payload)
    cpdef on_repljob(self, sender, mflags, data)
    cdef keep_copy(self, Job copy, sender)
    cpdef on_groupseq(self, sender, data)
    cdef object group_holders(self, ReplWait wait)
    cdef placed(self, ReplWait wait, unsigned long long seq)
    cpdef on_placed(self, payload)
    cpdef join_copy(self, Job job)
    cpdef send_to_home(self, Job job, bytes home)
    cpdef enqueue_copy(self, Job job, long long delay)
    cdef hold_unless_head(self, Job job)
    cpdef tuple known_nodes(self, tuple nodes)
    cpdef merge_nodes(self, Job job, tuple nodes)
    cpdef add_node(self, Job job, node)
