from libc.stdint cimport uint64_t

cpdef unsigned int crc16(bytes data)
cpdef unsigned int queue_slot(bytes queue)
cpdef bint valid_id(bytes jid)
cdef bint valid_id_at(const unsigned char *p) noexcept nogil
cpdef int id_slot(bytes jid)
cdef int id_slot_at(const unsigned char *p) noexcept nogil
cpdef int queue_worker(bytes queue, int nworkers)
cpdef int id_worker(bytes jid, int nworkers)
cdef int id_worker_at(const unsigned char *p, int nworkers) noexcept nogil
cpdef unsigned int id_ttl_minutes(bytes jid)

cdef class IdMaker:
    cdef bytes prefix          # b"D-" + node8 + b"-"
    cdef uint64_t seed_a, seed_b, counter
    cdef public unsigned long long last_ctime
    cpdef bytes make(self, unsigned int slot, long long ttl_seconds, long long retry)
    cpdef unsigned long long next_ctime(self, long long now_ms)
