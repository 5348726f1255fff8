# cython: language_level=3
"""Which of a queue's newest jobs go to the spill log (disque/workers/spill.py, `pick`),
chosen in C: a spilling worker took a Python frame and a tuple per job to choose them."""
from disque._fast.job cimport Job, JOB_FLAG_GROUPED
from disque._fast.skiplist cimport JobQueue, SkipNode
from disque._fast.cachehint cimport prefetch

DEF AHEAD = 16      # jobs whose objects are prefetched before the first is looked at


cpdef list tail_to_spill(JobQueue jobs, Py_ssize_t count, long long horizon):
    """Of the newest `count` jobs of `jobs`, newest first (as peek_tail gives them), those
    that may spill: expiring after `horizon` (unix seconds), with a body, and not in a group
    (a group's held jobs spill as copies do, its head never). A job to spill was added long
    ago: AHEAD of them are reached and prefetched at a time, so that their misses overlap."""
    cdef list out = []
    cdef SkipNode *x = jobs.tail
    cdef void *ahead[AHEAD]
    cdef Job job
    cdef Py_ssize_t seen = 0, n, i
    while x != NULL and seen < count:
        n = 0
        while x != NULL and seen < count and n < AHEAD:
            ahead[n] = x.job
            prefetch(x.job)
            prefetch(<char *>x.job + 64)    # etime and flags are in the object's second line
            n += 1
            seen += 1
            x = x.backward
        for i in range(n):
            job = <Job>ahead[i]
            if job.etime > horizon and job.body is not None and not job.flags & JOB_FLAG_GROUPED:
                out.append(job)
    return out
