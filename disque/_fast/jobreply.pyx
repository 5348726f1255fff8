# cython: language_level=3
"""Jobs as RESP reply elements (GETJOB, QPEEK), each written in place into one bytes
object: its size first, then the bytes (no formatting, no join)."""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

from disque._fast.job cimport Job
from disque._fast.resp cimport bulk_size, int_size, put_bulk, put_int


cdef Py_ssize_t job_size(Job job, bint withcounters):
    cdef Py_ssize_t n = 4 + bulk_size(len(<bytes>job.queue)) + bulk_size(len(<bytes>job.id)) \
        + bulk_size(len(<bytes>job.body))
    if withcounters:
        n += bulk_size(5) + 3 + int_size(job.nacks) + bulk_size(21) + 3 \
            + int_size(job.additional_deliveries)
    return n


cdef char *put_job(char *p, Job job, bint withcounters):
    """One GETJOB element: [queue, id, body] (+ counters with WITHCOUNTERS)."""
    p = put_int(p, b'*', 7 if withcounters else 3)
    p = put_bulk(p, job.queue)
    p = put_bulk(p, job.id)
    p = put_bulk(p, job.body)
    if withcounters:
        p = put_bulk(p, b"nacks")
        p = put_int(p, b':', job.nacks)
        p = put_bulk(p, b"additional-deliveries")
        p = put_int(p, b':', job.additional_deliveries)
    return p


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
