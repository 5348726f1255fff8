# cython: language_level=3
"""A queue of jobs ordered by (ctime, id): a skiplist in C (SPEC 6.3).

Pushing a fresh job, which carries the newest ctime, is O(1): the last node of every
level is kept, so an append touches no other job (a search from the head read about
4 log4(n) jobs, each a likely cache miss in a long queue). Re-queued jobs keep their
old ctime and so land near the head, as upstream does, through the O(log n) search.
The queue owns one reference to every linked job; `job.in_queue` mirrors membership.
"""
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdlib cimport malloc, free
from disque._fast.job cimport Job, job_cmp


cdef SkipNode *node_new(int height, void *job) noexcept nogil:
    cdef SkipNode *n = <SkipNode*>malloc(sizeof(SkipNode) + height * sizeof(SkipNode*))
    if n == NULL:
        return NULL
    n.job = job
    n.backward = NULL
    n.height = height
    n.forward = <SkipNode**>(<char*>n + sizeof(SkipNode))
    cdef int i
    for i in range(height):
        n.forward[i] = NULL
    return n


cdef void release_from(SkipNode *x) noexcept:
    """Free `x` and every node after it on level 0, letting their jobs go."""
    cdef SkipNode *nxt
    while x != NULL:
        nxt = x.forward[0]
        (<Job>x.job).in_queue = 0
        Py_DECREF(<Job>x.job)
        free(x)
        x = nxt


cdef class JobQueue:
    def __cinit__(self):
        # the header lives in the object: one allocation per queue, not two
        self.header = &self.head
        self.head.job = NULL
        self.head.backward = NULL
        self.head.height = MAX_LEVEL
        self.head.forward = self.head_forward
        self.tail = NULL
        cdef int i
        for i in range(MAX_LEVEL):
            self.head_forward[i] = NULL
            self.last[i] = self.header
        self.level = 1
        self.length = 0
        self.rng = 0x9E3779B97F4A7C15 ^ <unsigned long long><size_t><void*>self

    def __dealloc__(self):
        self.clear()

    def __len__(self):
        return self.length

    cdef int random_level(self):
        # xorshift64: a level rises with probability 1/4, as in Redis' zskiplist
        cdef int lvl = 1
        cdef unsigned long long x
        while True:
            x = self.rng
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            self.rng = x
            if (x & 3) != 0 or lvl >= MAX_LEVEL:
                return lvl
            lvl += 1

    cdef SkipNode *find_predecessors(self, Job job, SkipNode **update):
        """The last node before `job`'s position on each level goes to update[level];
        returns the level-0 predecessor (what push links after and remove looks past)."""
        cdef SkipNode *x = self.header
        cdef int i
        for i in range(self.level - 1, -1, -1):
            while x.forward[i] != NULL and job_cmp(<Job>x.forward[i].job, job) < 0:
                x = x.forward[i]
            update[i] = x
        return x

    cpdef bint push(self, Job job):
        """Link `job` at its ordered position; False if it is already linked."""
        if job.in_queue:
            return False
        cdef SkipNode *update[MAX_LEVEL]
        cdef int i
        if self.tail == NULL or job_cmp(<Job>self.tail.job, job) < 0:
            for i in range(self.level):     # it goes last: after the last node of each level
                update[i] = self.last[i]
        else:
            self.find_predecessors(job, update)
        cdef int lvl = self.random_level()
        if lvl > self.level:
            for i in range(self.level, lvl):
                update[i] = self.header
            self.level = lvl
        cdef SkipNode *n = node_new(lvl, <void*>job)
        if n == NULL:
            raise MemoryError()
        Py_INCREF(job)
        for i in range(lvl):
            n.forward[i] = update[i].forward[i]
            update[i].forward[i] = n
            if n.forward[i] == NULL:
                self.last[i] = n
        n.backward = NULL if update[0] == self.header else update[0]
        if n.forward[0] != NULL:
            n.forward[0].backward = n
        else:
            self.tail = n
        self.length += 1
        job.in_queue = 1
        return True

    cdef void unlink(self, SkipNode *x, SkipNode **update):
        cdef int i
        for i in range(self.level):
            if update[i].forward[i] == x:
                update[i].forward[i] = x.forward[i]
                if self.last[i] == x:
                    self.last[i] = update[i]
        if x.forward[0] != NULL:
            x.forward[0].backward = x.backward
        else:
            self.tail = x.backward
        while self.level > 1 and self.header.forward[self.level - 1] == NULL:
            self.level -= 1
        self.length -= 1

    cpdef Job first(self):
        cdef SkipNode *x = self.header.forward[0]
        if x == NULL:
            return None
        return <Job>x.job

    cpdef Job pop(self):
        """Unlink and return the head (oldest) job, or None."""
        cdef SkipNode *x = self.header.forward[0]
        if x == NULL:
            return None
        cdef SkipNode *update[MAX_LEVEL]
        cdef int i
        for i in range(self.level):
            update[i] = self.header
        self.unlink(x, update)
        cdef Job job = <Job>x.job
        free(x)
        job.in_queue = 0
        Py_DECREF(job)   # `job` still holds its own reference
        return job

    cpdef bint remove(self, Job job):
        """Unlink `job`; False if it was not linked here."""
        if not job.in_queue:
            return False
        cdef SkipNode *update[MAX_LEVEL]
        cdef SkipNode *x = self.find_predecessors(job, update)
        cdef int i
        x = x.forward[0]
        if x == NULL or <void*>x.job != <void*>job:
            return False
        self.unlink(x, update)
        free(x)
        job.in_queue = 0
        Py_DECREF(job)
        return True

    cpdef Py_ssize_t cut_tail(self, Py_ssize_t count):
        """Unlink the newest `count` jobs at once (a tail going to the spill log): one search
        for the first of them, not one per job. Returns how many were unlinked."""
        if count <= 0 or self.tail == NULL:
            return 0
        if count >= self.length:
            count = self.length
            self.clear()
            return count
        cdef SkipNode *x = self.tail
        cdef SkipNode *update[MAX_LEVEL]
        cdef Py_ssize_t i
        for i in range(count - 1):
            x = x.backward
        self.find_predecessors(<Job>x.job, update)
        for i in range(self.level):     # every node after update[i] on a level is cut
            update[i].forward[i] = NULL
            self.last[i] = update[i]
        self.tail = x.backward
        release_from(x)
        while self.level > 1 and self.header.forward[self.level - 1] == NULL:
            self.level -= 1
        self.length -= count
        return count

    cpdef list peek(self, Py_ssize_t count):
        """Up to `count` jobs from the head (oldest first)."""
        cdef list out = []
        cdef SkipNode *x = self.header.forward[0]
        while x != NULL and len(out) < count:
            out.append(<Job>x.job)
            x = x.forward[0]
        return out

    cpdef list peek_tail(self, Py_ssize_t count):
        """Up to `count` jobs from the tail (newest first)."""
        cdef list out = []
        cdef SkipNode *x = self.tail
        while x != NULL and len(out) < count:
            out.append(<Job>x.job)
            x = x.backward
        return out

    cpdef void clear(self):
        cdef int i
        release_from(self.header.forward[0])
        for i in range(MAX_LEVEL):
            self.header.forward[i] = NULL
            self.last[i] = self.header
        self.tail = NULL
        self.level = 1
        self.length = 0

    def __iter__(self):
        return iter(self.peek(self.length))
