# The command dispatch of the connections a worker serves itself (servedcore.pyx).
from disque._fast.servedloop cimport ServedClient, ServedLoop

cdef class ServedCore(ServedLoop):
    cdef public dict table          # name as typed -> dispatch.Entry (disque/_fast/dispatch.pyx)
    cdef public dict handlers       # the shard's: changed in place, never replaced
    cdef public double timeout
    cdef public long long slowlog_us
    cdef public long long commands
    cdef public list names          # real names of the commands of the read being served
    cdef public dict repl_waits     # wait id -> (client, Forwarded) of commands waiting here
    cdef public long long next_wait_id
    # Hooks: what the dispatch calls on the Python half (disque/workers/served_clients.py,
    # SERVED_HOOKS there), bound once; None until bound (tests/test_core_hooks.py).
    cdef public object hand_back_client     # (client, reason, pending) give the connection back
    cdef public object getjob_of_peer       # (argv) GETJOB NOHANG another worker forwards
    cdef public object dead_letter_possible # (w, argv) NACK/ENQUEUE that may dead-letter a job
    cdef run_commands(self, ServedClient c, list cmds)
    cdef account(self, ServedClient c, list cmds, long long t0)
    cdef object execute(self, ServedClient c, list argv)
    cdef object getjob_served(self, ServedClient c, list argv)
    cdef object addjob_clustered(self, ServedClient c, list argv)
    cpdef object wait_here(self, ServedClient c, long long wid)
    cpdef long long new_wait_id(self)
    cpdef object forward(self, ServedClient c, int w, bytes name, list argv)
    cpdef repl_answered(self, long long wid, bytes reply)
    cpdef object cancel_wait(self, ServedClient c)
    cpdef peer_answered(self, tuple waiter, bytes reply)
    cpdef object peer_execute(self, list argv)
