from disque._fast.job cimport Job

# levels of a queue's skiplist: 4**16 jobs before the top level grows long, far more than RAM holds
cdef enum:
    MAX_LEVEL = 16

cdef struct SkipNode:
    void *job              # owned reference to a Job
    SkipNode *backward
    int height
    SkipNode **forward     # allocated together with the node

cdef class JobQueue:
    cdef SkipNode *header      # &head
    cdef SkipNode head
    cdef SkipNode *head_forward[MAX_LEVEL]
    cdef SkipNode *tail
    cdef SkipNode *last[MAX_LEVEL]    # last node on each level (header if none): the append path
    cdef int level
    cdef Py_ssize_t length
    cdef unsigned long long rng

    cdef int random_level(self)
    cdef SkipNode *find_predecessors(self, Job job, SkipNode **update)
    cdef void unlink(self, SkipNode *x, SkipNode **update)
    cpdef bint push(self, Job job)
    cpdef Job pop(self)
    cpdef Job first(self)
    cpdef bint remove(self, Job job)
    cpdef Py_ssize_t cut_tail(self, Py_ssize_t count)
    cpdef list peek(self, Py_ssize_t count)
    cpdef list peek_tail(self, Py_ssize_t count)
    cpdef void clear(self)
