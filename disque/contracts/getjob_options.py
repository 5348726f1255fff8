"""One GETJOB (SPEC 3.2), whichever path it takes: parsed the same way by the front-end
(disque/frontend/getjob.py) and by a worker serving a connection itself (ServedCore,
disque/_fast/servedcore.pyx), sent from the front-end to a worker as one message
(contracts/worker_link.py, GetJob), and taken by the worker's one entry point, Shard.getjob.
The request and its parser are C (disque/_fast/getjobopts.pyx); this is their public name."""
from disque._fast.getjobopts import COUNT_ERROR, GetjobRequest, parse_getjob
from disque._fast.jobid import queue_worker

__all__ = ["COUNT_ERROR", "GetjobRequest", "parse_getjob", "queue_owners"]


def queue_owners(queues, nworkers):
    """{worker: [its queues of `queues`, in order]}: the workers a GETJOB involves."""
    owners = {}
    for q in queues:
        owners.setdefault(queue_worker(q, nworkers), []).append(q)
    return owners
