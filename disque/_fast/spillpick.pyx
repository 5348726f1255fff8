# cython: language_level=3
"""Which of a queue's newest jobs go to the spill log (disque/workers/spill.py, `pick`),
chosen in C: a spilling worker took a Python frame and a tuple per job to choose them."""
from disque._fast.job cimport Job, JOB_FLAG_GROUPED
from disque._fast.skiplist cimport JobQueue, SkipNode


cpdef list tail_to_spill(JobQueue jobs, Py_ssize_t count, long long horizon):
    """Of the newest `count` jobs of `jobs`, newest first (as peek_tail gives them), those
    that may spill: expiring after `horizon` (unix seconds), with a body, and not in a group
    (a group's held jobs spill as copies do, its head never)."""
    cdef list out = []
    cdef SkipNode *x = jobs.tail
    cdef Job job
    cdef Py_ssize_t seen = 0
    while x != NULL and seen < count:
        job = <Job>x.job
        if job.etime > horizon and job.body is not None and not job.flags & JOB_FLAG_GROUPED:
            out.append(job)
        seen += 1
        x = x.backward
    return out
