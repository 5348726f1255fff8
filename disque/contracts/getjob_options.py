"""GETJOB's options (SPEC 3.2), parsed the same way by the front-end (disque/frontend/getjob.py)
and by a worker serving a connection itself (disque/workers/served_clients.py)."""
from disque import replies as R
from disque._fast.jobid import queue_worker
from disque._fast.resp import parse_int

COUNT_ERROR = b"-ERR COUNT must be a number greater than zero\r\n"


class GetjobOptions:
    __slots__ = ("nohang", "withcounters", "timeout", "count", "queues", "prefix")

    def __init__(self):
        self.nohang = False
        self.withcounters = False
        self.timeout = 0
        self.count = 1
        self.queues = None          # FROM q1 q2 ...
        self.prefix = None          # FROM-PREFIX p (docs/job-features.md)


def queue_owners(queues, nworkers):
    """{worker: [its queues of `queues`, in order]}: the workers a GETJOB involves."""
    owners = {}
    for q in queues:
        owners.setdefault(queue_worker(q, nworkers), []).append(q)
    return owners


def parse_getjob(argv):
    """(error reply, None) or (None, GetjobOptions) for GETJOB argv."""
    o = GetjobOptions()
    i, argc = 1, len(argv)
    while i < argc:
        opt = argv[i].lower()
        has_value = i + 1 < argc
        if opt == b"nohang":
            o.nohang = True
        elif opt == b"withcounters":
            o.withcounters = True
        elif opt == b"timeout" and has_value:
            timeout = parse_int(argv[i + 1])
            if timeout is None:
                return R.TIMEOUT_NOT_INTEGER, None
            if timeout < 0:
                return R.TIMEOUT_NEGATIVE, None
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
            return R.SYNTAX_ERROR, None
        i += 1
    if not o.queues and o.prefix is None:
        return R.SYNTAX_ERROR, None
    return None, o
