from disque._fast.getjobopts cimport GetjobRequest
from disque._fast.shardcore cimport ShardCore
from disque._fast.shardqueue cimport Queue


cdef class Blocked:
    cdef public object client       # its connection id
    cdef public long long reqid     # the front-end's request id, or a served connection's negative wait id
    cdef public list queues         # the Queues it waits on (FROM-PREFIX: queues made later join)
    cdef public bint withcounters
    cdef public bint proxy
    cdef public long long deadline  # ms, 0: none
    cdef public bint done
    cdef public object prefix       # GETJOB FROM-PREFIX, or None


cdef class ConsumersCore:
    cdef public object shard
    cdef ShardCore core
    cdef public dict by_client      # client id -> its Blocked
    cdef public object deadlines    # disque.deadlines.Deadlines of the Blocked, in ms
    cpdef tuple fetch_or_block(self, GetjobRequest request)
    cdef list take(self, list queues, Py_ssize_t count)
    cdef list fetch_rounds(self, list queues, Py_ssize_t count)
    cdef refill(self, list queues, Py_ssize_t want)
    cdef tuple nothing_fetched(self, GetjobRequest request, list queues, bint clustered)
    cpdef unblock(self, Blocked b)
    cpdef answer(self, Blocked b, reply, ids)
    cpdef release(self, Blocked b, reply)
    cpdef serve_ready(self)
    cpdef expire(self, long long now)
