# cython: language_level=3
"""The job record and its ordering (SPEC 6.1 and 6.3)."""
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


@cython.no_gc   # a job only references bytes/tuples/sets of bytes: it can never be part of a cycle
@cython.freelist(64)
cdef class Job:
    def __init__(self, bytes id, queue=None, body=None):
        self.id = id
        self.queue = queue
        self.body = body
        self.nodes_delivered = ()
        self.nodes_confirmed = None

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


def compare(Job a, Job b):
    return job_cmp(a, b)
