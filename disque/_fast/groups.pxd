from libc.stdint cimport uint64_t

from disque._fast.job cimport Job

cdef class JobGroup:
    # one group of one queue: its jobs in sequence order; order[first] is the head
    cdef public bytes queue, key
    # by sequence number from `first` on: each job, or its ID while spilled. The slots
    # before `first` are heads that left, cut off in one move once they are half the list
    # (a drain releases a head per ack: deleting slot 0 moved every waiting member)
    cdef public list order
    cdef public Py_ssize_t first
    cdef public unsigned long long last_seq   # the highest sequence number given or seen
    cdef public bytes home              # the group's home node as of `home_epoch`
    cdef public unsigned long long home_epoch


cdef inline Py_ssize_t group_size(JobGroup g):
    """The group's members: its list less the slots of heads that left."""
    return len(g.order) - g.first


cdef inline bytes member_id(object m):
    """A member of a group's order: its job, or the ID of a spilled one."""
    return (<Job>m).id if type(m) is Job else <bytes>m


cdef inline bytes group_head_id(JobGroup g):
    """The ID of the group's head, None when it has no job."""
    return member_id(g.order[g.first]) if group_size(g) else None


cdef class JobGroups:
    # every group of a worker's queues: queue name -> {group key -> JobGroup}
    cdef public dict by_queue
    cdef public long long count         # groups with jobs, over every queue
    cdef public long long members       # jobs in a group, over every group
    # the nodes a group's home is chosen among (this one included), sorted; a lone node
    # has only itself, and is every group's home
    cdef public tuple nodes
    # each node's half of its rendezvous weights, and room to rank the nodes (sized by
    # set_nodes)
    cdef uint64_t *c_hashes
    cdef uint64_t *c_weights
    cdef Py_ssize_t *c_order
    cdef public bytes me
    cdef public unsigned long long epoch    # one more each time `nodes` changes

    cpdef JobGroup group_of(self, Job job)
    cdef JobGroup make(self, Job job)
    cpdef bint join_new(self, Job job, long long now_ms) except -1
    cpdef bint rejoin(self, Job job, dict jobs) except -1
    cpdef bint move(self, Job job, unsigned long long seq, dict jobs) except -1
    cpdef bint is_head(self, Job job) except -1
    cpdef bint relink(self, Job job) except -1
    cpdef bytes head_id(self, Job job)
    cpdef object leave(self, Job job)
    cpdef spilled(self, Job job)
    cdef Job member_job(self, object m, dict jobs)
    cpdef bint set_nodes(self, tuple nodes, bytes me) except -1
    cpdef list ranking(self, bytes queue, bytes key)
    cpdef bytes home_of(self, bytes queue, bytes key)
    cpdef bint is_home(self, Job job) except -1
    cpdef bint home_here(self, JobGroup g) except -1
    cpdef clear(self)
