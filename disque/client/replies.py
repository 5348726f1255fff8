"""Replies as Python objects: `Job` (GETJOB, QPEEK), `JobInfo` (SHOW), `QueueStat` (QSTAT).

Queue names and IDs are `str` (a queue name that is not UTF-8 stays `bytes`, so it goes back
to the server unchanged); bodies stay `bytes` (the server never looks inside them).
Durations the server gives in milliseconds are seconds here, as floats.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def text(value):
    """A name or ID from a reply as `str`; bytes that are not UTF-8 stay bytes."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value
    return value if value is None else str(value)


class Job:
    """A job delivered by GETJOB (or seen by QPEEK).

    `node` is the ID of the node that delivered it: `ack()`, `nack()`, `working()` and
    `fastack()` go there first, since that node certainly holds the job. `nacks` and
    `additional_deliveries` are None unless the job was fetched `withcounters=True`."""

    __slots__ = ("queue", "id", "body", "nacks", "additional_deliveries", "node", "client")

    def __init__(self, queue, id, body, nacks=None, additional_deliveries=None, node=None,
                 client=None):
        self.queue = queue
        self.id = id
        self.body = body
        self.nacks = nacks
        self.additional_deliveries = additional_deliveries
        self.node = node
        self.client = client

    @property
    def deliveries(self):
        """How many times the job has been delivered, this time included (counters needed)."""
        if self.nacks is None:
            return None
        return 1 + self.nacks + self.additional_deliveries

    def ack(self):
        return self.client.ack_job(self)

    def fastack(self):
        return self.client.fastack(self)

    def nack(self, delay=None):
        return self.client.nack_job(self, delay=delay)

    def working(self):
        return self.client.working(self)

    def show(self):
        return self.client.show(self)

    def __eq__(self, other):
        return (isinstance(other, Job) and (self.queue, self.id, self.body) ==
                (other.queue, other.id, other.body))

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        counters = "" if self.nacks is None else ", nacks=%d, additional_deliveries=%d" % (
            self.nacks, self.additional_deliveries)
        return "Job(queue=%r, id=%r, body=%r%s)" % (self.queue, self.id, self.body, counters)


def jobs_from_reply(reply, node, client):
    """GETJOB's or QPEEK's array of [queue, id, body] or, with WITHCOUNTERS,
    [queue, id, body, "nacks", n, "additional-deliveries", m]."""
    if not reply:
        return []
    jobs = []
    for entry in reply:
        if len(entry) >= 7:
            jobs.append(Job(text(entry[0]), text(entry[1]), entry[2], entry[4], entry[6],
                            node, client))
        else:
            jobs.append(Job(text(entry[0]), text(entry[1]), entry[2], None, None, node, client))
    return jobs


def _pairs(reply):
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def _seconds(ms):
    return None if ms is None else ms / 1000.0


@dataclass(frozen=True)
class JobInfo:
    """SHOW's 15 fields (SPEC 3.9), the five of a job with BACKOFF or MAXDELIVERIES
    (docs/job-features.md) and the two of a job of a group (docs/job-groups.md); those are
    None for a plain job."""
    id: str
    queue: str | None
    state: str
    repl: int
    ttl: int
    ctime: int
    delay: int
    retry: int
    nacks: int
    additional_deliveries: int
    nodes_delivered: tuple
    nodes_confirmed: tuple
    next_requeue_within: float | None
    next_awake_within: float | None
    body: bytes | None
    retry_interval: int | None = None
    backoff: int | None = None
    max_deliveries: int | None = None
    deadletter: str | None = None
    dead_lettered_from: str | None = None
    group: str | None = None
    group_seq: int | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_reply(cls, reply):
        if reply is None:
            return None
        f = _pairs(reply)
        known = {
            "id": text(f.pop("id")), "queue": text(f.pop("queue")),
            "state": text(f.pop("state")), "repl": f.pop("repl"), "ttl": f.pop("ttl"),
            "ctime": f.pop("ctime"), "delay": f.pop("delay"), "retry": f.pop("retry"),
            "nacks": f.pop("nacks"), "additional_deliveries": f.pop("additional-deliveries"),
            "nodes_delivered": tuple(text(n) for n in f.pop("nodes-delivered") or ()),
            "nodes_confirmed": tuple(text(n) for n in f.pop("nodes-confirmed") or ()),
            "next_requeue_within": _seconds(f.pop("next-requeue-within")),
            "next_awake_within": _seconds(f.pop("next-awake-within")),
            "body": f.pop("body"),
        }
        for name in ("retry-interval", "backoff", "max-deliveries", "group-seq"):
            if name in f:
                known[name.replace("-", "_")] = f.pop(name)
        for name in ("deadletter", "dead-lettered-from", "group"):
            if name in f:
                known[name.replace("-", "_")] = text(f.pop(name))
        return cls(**known, extra=f)


@dataclass(frozen=True)
class QueueStat:
    """QSTAT's fields (SPEC 3.10)."""
    name: str
    len: int
    age: int
    idle: int
    blocked: int
    import_from: tuple
    import_rate: int
    jobs_in: int
    jobs_out: int
    pause: str
    groups: int = 0             # a queue's job groups (docs/job-groups.md)
    groups_blocked: int = 0
    held: int = 0
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_reply(cls, reply):
        if reply is None:
            return None
        f = _pairs(reply)
        return cls(name=text(f.pop("name")), len=f.pop("len"), age=f.pop("age"),
                   idle=f.pop("idle"), blocked=f.pop("blocked"),
                   import_from=tuple(text(n) for n in f.pop("import-from") or ()),
                   import_rate=f.pop("import-rate"), jobs_in=f.pop("jobs-in"),
                   jobs_out=f.pop("jobs-out"), pause=text(f.pop("pause")),
                   groups=f.pop("groups", 0), groups_blocked=f.pop("groups-blocked", 0),
                   held=f.pop("held", 0), extra=f)


def scan_reply(reply, decode=text):
    """QSCAN / JSCAN: [cursor, items] -> (int cursor, list)."""
    return int(reply[0]), [decode(item) for item in reply[1]]


def info_reply(reply):
    """INFO's text -> {field: value}; numbers as int or float, the rest as str."""
    fields = {}
    for line in text(reply).splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        name, _, value = line.partition(":")
        fields[name] = _number(value)
    return fields


def _number(value):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value
