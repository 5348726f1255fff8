from disque._fast.job cimport Job
from disque._fast.replcore cimport ReplicationCore
from disque._fast.shardcore cimport ShardCore

cdef class AckMessages



cdef class ShardAcks(ShardCore):
    cdef public AckMessages replication  # the worker's Replication
    cpdef object find_job(self, jid)
    cpdef forget_job(self, Job job)
    cpdef ack(self, Job job)
    cpdef set_acked(self, Job job)
    cpdef gc(self, Job job)
    cpdef schedule_gc(self, Job job)
    cpdef Job make_dummy_ack(self, bytes jid)
    cpdef bytes cmd_ackjob(self, list argv)


cdef class AckMessages(ReplicationCore):
    cpdef on_setack(self, sender, mflags, payload)
    cpdef on_gotack(self, sender, mflags, payload)
    cpdef on_deljob_msg(self, sender, mflags, payload)
    cpdef gc_send_setacks(self, Job job)
