"""A job's bytes (disque/_fast/codec.pyx), for the Cython paths that call it directly (the
replication of copies, the AOF load)."""
from disque._fast.job cimport Job

cpdef bytes serialize(Job job, bint storage, long long now_s)
cpdef tuple deserialize(data, Py_ssize_t offset, bint storage, long long now_s, long long now_ms,
                        long long jitter=*)
