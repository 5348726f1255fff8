# The dispatch kernel both command loops share (dispatch.pyx).

cdef class Entry:
    cdef readonly bytes name        # the command's own name: workers know it by that
    cdef readonly int route         # disque/contracts/routes.py
    cdef readonly int arity
    cdef readonly int flags         # F_* of dispatch.pyx
    cdef readonly bint renamed      # typed under another name (rename-command)
    cdef readonly object command    # its disque.commands.Command

# flag bits of Entry.flags
cdef enum:
    F_ADMIN = 1         # SPEC 2 flag `a`
    F_NOAUTH = 2        # AUTH: allowed before authentication
    F_HELLO = 4         # HELLO <protover> ...: authenticates itself (HELLO AUTH)
    F_NOMONITOR = 8     # not fed to MONITOR clients (admin commands, AUTH)
    F_DENYOOM = 16      # SPEC 2 flag `m`
    F_WRITE = 32        # SPEC 2 flag `w`
    F_LOADING = 64      # SPEC 2 flag `l`
    F_PING = 128        # PING: a served loop answers it too
    F_COPIES = 256      # ADDJOB: on a node of a cluster its reply may wait for copies
    F_REQUEUES = 512    # NACK, ENQUEUE: may move a job to a dead-letter queue
    F_CLUSTER_FORM = 1024   # QLEN / QSTAT / QPEEK: a word past the arity makes it the front-end's

# target_worker's answers that are not a worker
cdef enum:
    T_NONE = -1         # no one worker: LOCAL, GETJOB, ALL
    T_BADID = -2        # a malformed job ID: -BADID
    T_BADDELAY = -3     # NACK ... DELAY with a bad number of seconds
    T_SPLIT = -4        # job IDs of several workers: the front-end splits them

cpdef Entry lookup(dict table, bytes typed)
cpdef bint arity_ok(Entry e, Py_ssize_t argc)
cpdef int target_worker(Entry e, list argv, int nworkers)
cpdef bytes ping_reply(list argv)
cpdef Py_ssize_t ids_end(list argv)
cpdef long long nack_delay(list argv)
