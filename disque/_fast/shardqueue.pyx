# cython: language_level=3
"""A worker's named queue (SPEC 3.10, 8.1): its jobs in order, the counters QSTAT shows, the
consumers blocked on it and what federation and spilling keep with it. The shard
(disque/_fast/shardcore.pyx) makes and owns them."""
from collections import deque

from disque._fast.skiplist cimport JobQueue


cdef class Queue:
    """A named queue: ordered jobs plus the counters QSTAT shows (SPEC 3.10, 8.1)."""
    def __init__(self, bytes name, long long now_s):
        self.name = name
        self.jobs = JobQueue()
        self.ctime = now_s
        self.atime = now_s
        self.jobs_in = 0
        self.jobs_out = 0
        self.paused = 0
        self.blocked = None        # a deque while consumers wait: most queues never have one
        self.scan_seq = 0
        self.remote = None
        self.fed = None
        self.cold = None

    cpdef Py_ssize_t length(self):
        """Jobs queued: in RAM and spilled (QLEN, QSTAT, MAXLEN)."""
        return len(self.jobs) + (len(self.cold) if self.cold is not None else 0)

    cpdef add_waiter(self, object consumer):
        if self.blocked is None:
            self.blocked = deque()
        self.blocked.append(consumer)

    cpdef drop_waiter(self, object consumer):
        if self.blocked is not None:
            try:
                self.blocked.remove(consumer)
            except ValueError:
                pass
            if not self.blocked:
                self.blocked = None

    cpdef Py_ssize_t waiting(self):
        """Consumers blocked on this queue."""
        return len(self.blocked) if self.blocked is not None else 0
