from disque._fast.skiplist cimport JobQueue


cdef class Queue:
    cdef public bytes name
    cdef public JobQueue jobs
    cdef public long long ctime
    cdef public long long atime
    cdef public long long jobs_in
    cdef public long long jobs_out
    cdef public int paused
    cdef public object blocked       # None, or the deque of waiting consumers in blocking order
    cdef public unsigned long long scan_seq   # position in the shard's queue scan log
    cdef public object remote        # None, or {node id: [credit, expiry ms]}: nodes whose consumers wait (federation)
    cdef public object fed           # None, or the queue's federation state (disque.workers.federation)
    cdef public object cold          # None, or the ColdRing of its spilled jobs (disque/workers/spill.py)
    cpdef Py_ssize_t length(self)
    cpdef add_waiter(self, object consumer)
    cpdef drop_waiter(self, object consumer)
    cpdef Py_ssize_t waiting(self)
