# cython: language_level=3
"""One GETJOB (SPEC 3.2), whichever path it takes: parsed the same way by the front-end
(disque/frontend/getjob.py) and by a worker serving a connection itself
(ServedCore.getjob_served), sent from the front-end to a worker as one message
(contracts/worker_link.py, GetJob), and taken by the worker's one entry point, Shard.getjob.
disque/contracts/getjob_options.py is its public name."""
from disque import replies
from disque._fast.resp cimport parse_int
from disque.contracts import worker_link as link_msg

COUNT_ERROR = b"-ERR COUNT must be a number greater than zero\r\n"


cdef class GetjobRequest:
    """The options (`nohang`, `withcounters`, `timeout` in ms, `count`, `queues` of FROM or
    `prefix` of FROM-PREFIX), and who waits for the reply in the worker: `reqid` (the
    front-end's request id, or a served connection's negative wait id), `client` (its
    connection id) and `proxy` (a share of a cross-worker GETJOB: its jobs go back encoded,
    the front-end merges them). `pieces`: the reply is written by a served connection's
    loop, which sends a big body from the job's own bytes (jobreply.encode_jobs_pieces)."""

    def __init__(self, long long count=1, bint nohang=False, bint withcounters=False,
                 long long timeout=0, queues=None, prefix=None, long long reqid=0, client=0,
                 bint proxy=False):
        self.nohang = nohang
        self.withcounters = withcounters
        self.timeout = timeout
        self.count = count
        self.queues = queues            # FROM q1 q2 ...
        self.prefix = prefix            # FROM-PREFIX p (docs/job-features.md)
        self.reqid = reqid
        self.client = client
        self.proxy = proxy
        self.pieces = False

    def share(self, reqid, client, queues, proxy=False, timeout=None):
        """The message asking one worker for its share: `queues` of them (None: the prefix)."""
        return link_msg.GetJob.encode(reqid, client, self.count, self.nohang, self.withcounters,
                               self.timeout if timeout is None else timeout, proxy,
                               queues, self.prefix if queues is None else None)

    @classmethod
    def from_message(cls, g):
        return cls(g.count, g.nohang, g.withcounters, g.timeout_ms, g.queues, g.prefix,
                   g.reqid, g.client, g.proxy)


cpdef tuple parse_getjob(argv, long long reqid=0, client=0):
    """(error reply, None) or (None, GetjobRequest) for GETJOB argv."""
    cdef GetjobRequest o = GetjobRequest(reqid=reqid, client=client)
    cdef Py_ssize_t i = 1, argc = len(argv)
    cdef bint has_value
    cdef bytes opt
    while i < argc:
        opt = (<bytes>argv[i]).lower()
        has_value = i + 1 < argc
        if opt == b"nohang":
            o.nohang = True
        elif opt == b"withcounters":
            o.withcounters = True
        elif opt == b"timeout" and has_value:
            timeout = parse_int(argv[i + 1])
            if timeout is None:
                return replies.TIMEOUT_NOT_INTEGER, None
            if timeout < 0:
                return replies.TIMEOUT_NEGATIVE, None
            o.timeout = timeout
            i += 1
        elif opt == b"count" and has_value:
            count = parse_int(argv[i + 1])
            if count is None or count <= 0:
                return COUNT_ERROR, None
            o.count = count
            i += 1
        elif opt == b"from" and has_value:
            o.queues = argv[i + 1:]
            break
        elif opt == b"from-prefix" and i + 2 == argc:
            o.prefix = argv[i + 1]
            break
        else:
            return replies.SYNTAX_ERROR, None
        i += 1
    if not o.queues and o.prefix is None:
        return replies.SYNTAX_ERROR, None
    return None, o
