# cython: language_level=3
"""Jobs as RESP reply elements (GETJOB, QPEEK), each written in place into one bytes
object: its size first, then the bytes (no formatting, no join).

A job is its head ([queue, id, and the body's length line), its body, and its tail (the
body's CRLF and WITHCOUNTERS' counters): `encode_jobs` writes all three into one reply,
`encode_jobs_pieces` leaves big bodies out of it, uncopied, for a writer that sends
pieces in turn."""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport memcpy

from disque._fast.job cimport Job
from disque._fast.resp cimport bulk_size, int_size, put_bulk, put_int

# a body this long is a piece of its own in encode_jobs_pieces: copying it would cost more
# than the two more sends (and, past glibc's mmap threshold, a page fault per 4 KB)
BIG_PIECE = 256 * 1024
cdef Py_ssize_t C_BIG_PIECE = BIG_PIECE


cdef inline Py_ssize_t head_size(Job job, bint withcounters):
    return 4 + bulk_size(len(<bytes>job.queue)) + bulk_size(len(<bytes>job.id)) \
        + 3 + int_size(len(<bytes>job.body))


cdef inline Py_ssize_t tail_size(Job job, bint withcounters):
    cdef Py_ssize_t n = 2
    if withcounters:
        n += bulk_size(5) + 3 + int_size(job.nacks) + bulk_size(21) + 3 \
            + int_size(job.additional_deliveries)
    return n


cdef Py_ssize_t job_size(Job job, bint withcounters):
    return head_size(job, withcounters) + len(<bytes>job.body) + tail_size(job, withcounters)


cdef inline char *put_head(char *p, Job job, bint withcounters):
    p = put_int(p, b'*', 7 if withcounters else 3)
    p = put_bulk(p, job.queue)
    p = put_bulk(p, job.id)
    return put_int(p, b'$', len(<bytes>job.body))


cdef inline char *put_tail(char *p, Job job, bint withcounters):
    p[0] = 13
    p[1] = 10
    p += 2
    if withcounters:
        p = put_bulk(p, b"nacks")
        p = put_int(p, b':', job.nacks)
        p = put_bulk(p, b"additional-deliveries")
        p = put_int(p, b':', job.additional_deliveries)
    return p


cdef char *put_job(char *p, Job job, bint withcounters):
    """One GETJOB element: [queue, id, body] (+ counters with WITHCOUNTERS)."""
    cdef bytes body = job.body
    p = put_head(p, job, withcounters)
    memcpy(p, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
    return put_tail(p + PyBytes_GET_SIZE(body), job, withcounters)


cpdef bytes encode_job(Job job, bint withcounters):
    """One GETJOB element: [queue, id, body] (+ counters with WITHCOUNTERS)."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, job_size(job, withcounters))
    put_job(PyBytes_AS_STRING(out), job, withcounters)
    return out


cpdef bytes encode_jobs(list jobs, bint withcounters):
    """GETJOB's whole reply for `jobs` (not empty), written into one bytes object: its size
    first, then each element in place (no formatting, no join)."""
    cdef Py_ssize_t size = 3 + int_size(len(jobs))
    cdef Job job
    for job in jobs:
        size += job_size(job, withcounters)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef char *p = put_int(PyBytes_AS_STRING(out), b'*', len(jobs))
    for job in jobs:
        p = put_job(p, job, withcounters)
    return out


cpdef object encode_jobs_pieces(list jobs, bint withcounters):
    """encode_jobs' reply, or, when one body has BIG_PIECE bytes or more, the same bytes as
    three pieces: everything before that body, the body (the job's own bytes object, not
    a copy), everything after it. With two such bodies or more the reply is one bytes
    object again: what follows the body the socket stops in must stay small, or the
    connection goes back as a slow reader (servedloop.pyx, MAX_BEHIND_UNSENT)."""
    cdef Job job, big = None
    cdef Py_ssize_t i, at = -1, before = 3 + int_size(len(jobs)), after = 0
    cdef bytes head, tail
    cdef char *p
    for i in range(len(jobs)):
        job = <Job>jobs[i]
        if len(<bytes>job.body) >= C_BIG_PIECE:
            if big is not None:
                return encode_jobs(jobs, withcounters)
            big, at = job, i
        elif big is None:
            before += job_size(job, withcounters)
        else:
            after += job_size(job, withcounters)
    if big is None:
        return encode_jobs(jobs, withcounters)
    head = PyBytes_FromStringAndSize(NULL, before + head_size(big, withcounters))
    p = put_int(PyBytes_AS_STRING(head), b'*', len(jobs))
    for i in range(at):
        p = put_job(p, <Job>jobs[i], withcounters)
    put_head(p, big, withcounters)
    tail = PyBytes_FromStringAndSize(NULL, tail_size(big, withcounters) + after)
    p = put_tail(PyBytes_AS_STRING(tail), big, withcounters)
    for i in range(at + 1, len(jobs)):
        p = put_job(p, <Job>jobs[i], withcounters)
    return (head, big.body, tail)
