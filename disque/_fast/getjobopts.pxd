cdef class GetjobRequest:
    cdef public bint nohang, withcounters, proxy, pieces
    cdef public long long timeout       # ms
    cdef public long long count
    cdef public object queues           # FROM q1 q2 ...: a list of names, or None
    cdef public object prefix           # FROM-PREFIX p, or None
    cdef public long long reqid
    cdef public object client

cpdef tuple parse_getjob(argv, long long reqid=*, client=*)
