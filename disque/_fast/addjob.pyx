# cython: language_level=3
"""ADDJOB's options, parsed in one place (SPEC 3.1), and the value ShardCore.cmd_addjob
hands to the replication (ReplWait) when the job needs copies on other nodes.

parse_addjob checks everything the arguments alone decide, in SPEC 3.1's order: each
option as it comes, then the timeout, then the rules between options. What depends on
the node's state (NOREPL, MAXLEN, PAUSED) is ShardCore.addjob_refusal's.
"""
from disque._fast.resp cimport parse_int

from disque import replies as _replies

cdef bytes SYNTAX_ERROR = _replies.SYNTAX_ERROR
cdef bytes DELAY_NEGATIVE = _replies.DELAY_NEGATIVE
cdef bytes TIMEOUT_NOT_INTEGER = _replies.TIMEOUT_NOT_INTEGER
cdef bytes TIMEOUT_NEGATIVE = _replies.TIMEOUT_NEGATIVE
DEF UINT32_MAX = 4294967295
DEF LLONG_MAX = 9223372036854775807
DEF DEFAULT_TTL = 86400         # seconds (SPEC 3.1)
DEF MAX_DEFAULT_RETRY = 300
DEF MAX_GROUP_KEY = 256         # bytes of a GROUP key (docs/job-groups.md)
cdef bytes GROUP_KEY_SIZE = b"-ERR GROUP needs a key of 1 to %d bytes\r\n" % MAX_GROUP_KEY


cdef inline long long option_value(object arg, long long lo, long long hi):
    """A numeric ADDJOB option in [lo, hi] (lo >= 0), or -1 when it is not one."""
    cdef object v = parse_int(arg)
    if v is None or v < lo or v > hi:
        return -1
    return v


cdef object parse_addjob(list argv, AddjobOptions *o, int cluster_size):
    """ADDJOB <queue> <body> <ms-timeout> [options] into `o`: None, or the error reply of
    the first thing wrong. REPLICATE defaults to the cluster size capped at 3."""
    cdef bytes qname = argv[1], opt
    cdef Py_ssize_t i = 4, argc = len(argv)
    cdef bint has_value
    o.replicate = -1
    o.delay = 0
    o.retry = -1
    o.ttl = DEFAULT_TTL
    o.maxlen = 0
    o.backoff = 0
    o.maxdeliveries = 0
    o.deadletter_at = 0
    o.group_at = 0
    o.is_async = False
    while i < argc:
        opt = (<bytes>argv[i]).lower()
        has_value = i + 1 < argc
        if opt == b"replicate" and has_value:
            o.replicate = option_value(argv[i + 1], 1, 65535)
            if o.replicate < 0:
                return b"-ERR REPLICATE must be between 1 and 65535\r\n"
            i += 1
        elif opt == b"delay" and has_value:
            o.delay = option_value(argv[i + 1], 0, UINT32_MAX)
            if o.delay < 0:
                return DELAY_NEGATIVE
            i += 1
        elif opt == b"retry" and has_value:
            o.retry = option_value(argv[i + 1], 0, UINT32_MAX)
            if o.retry < 0:
                return b"-ERR RETRY time must be a non negative number\r\n"
            i += 1
        elif opt == b"ttl" and has_value:
            o.ttl = option_value(argv[i + 1], 1, UINT32_MAX)
            if o.ttl < 0:
                return b"-ERR TTL must be a number > 0\r\n"
            i += 1
        elif opt == b"maxlen" and has_value:
            o.maxlen = option_value(argv[i + 1], 1, LLONG_MAX)
            if o.maxlen < 0:
                return b"-ERR MAXLEN must be a positive number\r\n"
            i += 1
        elif opt == b"async":
            o.is_async = True
        elif opt == b"backoff" and has_value:
            o.backoff = option_value(argv[i + 1], 1, UINT32_MAX)
            if o.backoff < 0:
                return b"-ERR BACKOFF time must be a number > 0\r\n"
            i += 1
        elif opt == b"maxdeliveries" and has_value:
            o.maxdeliveries = option_value(argv[i + 1], 1, 65535)
            if o.maxdeliveries < 0:
                return b"-ERR MAXDELIVERIES must be between 1 and 65535\r\n"
            i += 1
        elif opt == b"deadletter" and has_value:
            if argv[i + 1] == qname or not len(argv[i + 1]):
                return b"-ERR DEADLETTER queue must be a non empty name different from the job's queue\r\n"
            o.deadletter_at = i + 1
            i += 1
        elif opt == b"group" and has_value:
            if o.group_at:
                return b"-ERR GROUP given twice\r\n"
            if not 0 < len(argv[i + 1]) <= MAX_GROUP_KEY:
                return GROUP_KEY_SIZE
            o.group_at = i + 1
            i += 1
        else:
            return SYNTAX_ERROR
        i += 1
    v = parse_int(argv[3])
    if v is None:
        return TIMEOUT_NOT_INTEGER
    if v < 0:
        return TIMEOUT_NEGATIVE
    o.timeout = v
    if o.replicate < 0:
        o.replicate = 3 if cluster_size > 3 else cluster_size
    if o.replicate > 1 and o.retry == 0:
        return b"-ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)\r\n"
    if o.delay >= o.ttl:
        return b"-ERR The specified DELAY is greater than TTL. Job refused since would never be delivered\r\n"
    if o.retry < 0:
        o.retry = o.ttl // 10
        if o.retry > MAX_DEFAULT_RETRY:
            o.retry = MAX_DEFAULT_RETRY
        if o.retry == 0:
            o.retry = 1
    if o.group_at and o.is_async:
        return (b"-ERR GROUP cannot be used with ASYNC: a job's place in its group is "
                b"given before the reply\r\n")
    if o.backoff or o.maxdeliveries or o.deadletter_at:
        if o.deadletter_at and not o.maxdeliveries:
            return b"-ERR DEADLETTER needs MAXDELIVERIES\r\n"
        if o.retry == 0:
            return b"-ERR BACKOFF and MAXDELIVERIES need RETRY > 0 (a RETRY 0 job is never queued again)\r\n"
        if o.backoff and o.backoff < o.retry:
            return b"-ERR BACKOFF time must not be less than RETRY\r\n"
    return None


def parse_options(list argv, int cluster_size=1):
    """parse_addjob for Python (tests): the options as a dict, or the error reply."""
    cdef AddjobOptions o
    refusal = parse_addjob(argv, &o, cluster_size)
    if refusal is not None:
        return refusal
    return {"replicate": o.replicate, "delay": o.delay, "retry": o.retry, "ttl": o.ttl,
            "maxlen": o.maxlen, "timeout": o.timeout, "backoff": o.backoff,
            "maxdeliveries": o.maxdeliveries,
            "deadletter": argv[o.deadletter_at] if o.deadletter_at else None,
            "group": argv[o.group_at] if o.group_at else None,
            "async": bool(o.is_async)}


cdef class ReplWait:
    """An ADDJOB whose job needs copies on other nodes (REPLICATE > 1 or external
    replication), handed by ShardCore.cmd_addjob to Replication.replicate_new; kept by
    the replication while its producer waits for the copies (not with ASYNC)."""
    pass


cdef ReplWait copies_wanted(Job job, AddjobOptions *o, bint extrepl):
    cdef ReplWait wait = ReplWait.__new__(ReplWait)
    wait.job = job
    wait.timeout = o.timeout
    wait.is_async = o.is_async
    wait.extrepl = extrepl
    wait.targets = None
    wait.home = None
    wait.ranking = None
    wait.seq_pending = False
    return wait
