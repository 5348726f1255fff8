# cython: language_level=3
"""The dispatch kernel: what both command loops know about a command before it runs
(SPEC 1.3, 2), written once.

The front-end's loop (frontcore.pyx `Core.run` / `Core.route`) and a worker's served loop
(servedcore.pyx `ServedCore.execute`) look a command up in a table this module builds from
disque/commands.py (rename-command applied), check its arity, and ask `target_worker` which
worker runs it whole. Each loop then does what its process can: the front-end sends the
command over the worker link, a served loop runs it here or forwards it to its peer.
"""
from disque._fast.jobid cimport id_worker, queue_worker, valid_id
from disque._fast.resp cimport parse_int
from disque._fast.resp import bulk
from disque import replies
from disque.contracts import routes

cdef int R_QUEUE = routes.QUEUE
cdef int R_ID = routes.ID
cdef int R_IDS = routes.IDS

DEF UINT32_MAX = 4294967295

# target_worker's answers that are not a worker, by name (for the tests and the Python side)
TARGETS = {"none": T_NONE, "bad id": T_BADID, "bad delay": T_BADDELAY, "split": T_SPLIT}


cdef class Entry:
    """One name of the command table."""

    def __init__(self, typed, command):
        real = command.name.encode()
        self.name = real
        self.route = command.route
        self.arity = command.arity
        self.command = command
        self.renamed = typed != real
        cdef int flags = 0
        if "a" in command.flags:
            flags |= F_ADMIN | F_NOMONITOR
        if "m" in command.flags:
            flags |= F_DENYOOM
        if "w" in command.flags:
            flags |= F_WRITE
        if "l" in command.flags:
            flags |= F_LOADING
        if real == b"auth":
            flags |= F_NOAUTH | F_NOMONITOR
        elif real == b"hello":
            flags |= F_HELLO
        elif real == b"ping":
            flags |= F_PING
        elif real == b"addjob":
            flags |= F_COPIES
        elif real == b"nack" or real == b"enqueue":
            flags |= F_REQUEUES
        if command.route == R_QUEUE and command.front is not None:
            flags |= F_CLUSTER_FORM
        self.flags = flags

    def __repr__(self):
        return "Entry(%r, route=%d, arity=%d)" % (self.name, self.route, self.arity)


def build_table(commands):
    """{name as typed, lowercase bytes: Entry} from disque.commands.command_table(renames),
    with each name in capitals too: clients send capitals (redis-py, redis-cli), found
    with no lower()."""
    table = {}
    for typed, command in commands.items():
        entry = Entry(typed, command)
        table[typed] = entry
        table.setdefault(typed.upper(), entry)
    return table


cdef bytes PONG_REPLY = replies.PONG
cdef bytes PING_ARITY = replies.arity_error("ping")


cpdef bytes ping_reply(list argv):
    """PING [message]: the reply of either loop (a served loop answers it too)."""
    cdef Py_ssize_t argc = len(argv)
    if argc == 1:
        return PONG_REPLY
    return bulk(argv[1]) if argc == 2 else PING_ARITY


cpdef Entry lookup(dict table, bytes typed):
    """The entry of a command name as sent, or None: unknown (or renamed away)."""
    entry = table.get(typed)
    if entry is None:
        entry = table.get(typed.lower())
        if entry is None:
            return None
    return <Entry>entry


cpdef bint arity_ok(Entry e, Py_ssize_t argc):
    cdef int arity = e.arity
    return argc == arity if arity > 0 else argc >= -arity


cpdef Py_ssize_t ids_end(list argv):
    """Where the job IDs of a multi-ID command end: NACK <id> ... DELAY <seconds> ends
    before DELAY (docs/job-features.md), every other one at the end."""
    cdef Py_ssize_t argc = len(argv)
    cdef bytes word
    if argc > 3:
        word = argv[argc - 2]
        if len(word) == 5 and word.lower() == b"delay" and (<bytes>argv[0]).lower() == b"nack":
            return argc - 2
    return argc


cpdef long long nack_delay(list argv):
    """NACK's DELAY in seconds: -1 when it has none, -2 when it is not a number in
    [0, 2^32-1]."""
    if ids_end(argv) == len(argv):
        return -1
    v = parse_int(argv[len(argv) - 1])
    if v is None or v < 0 or v > UINT32_MAX:
        return -2
    return v


cpdef int target_worker(Entry e, list argv, int nworkers):
    """The worker that runs this command whole, or a T_* answer. The arity is checked."""
    cdef int route = e.route, w = -1, v
    cdef bint split = False
    cdef Py_ssize_t i, end
    cdef bytes jid
    if route == R_QUEUE:
        if e.flags & F_CLUSTER_FORM and len(argv) > -e.arity:
            return T_NONE       # QLEN q CLUSTER: the front-end asks the nodes
        return queue_worker(<bytes>argv[1], nworkers)
    if route == R_ID:
        jid = argv[1]
        if not valid_id(jid):
            return T_BADID
        return id_worker(jid, nworkers)
    if route != R_IDS:
        return T_NONE
    end = ids_end(argv)
    if end < len(argv) and nack_delay(argv) == -2:
        return T_BADDELAY
    for i in range(1, end):
        jid = argv[i]
        if not valid_id(jid):
            return T_BADID
        v = id_worker(jid, nworkers)
        if w < 0:
            w = v
        elif v != w:
            split = True        # every ID is still checked: one bad ID is -BADID
    if split:
        return T_SPLIT
    return w if w >= 0 else 0       # no ID at all: any worker answers 0
