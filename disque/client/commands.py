"""Every job and queue command as a typed method, written once for `Disque` and
`AsyncDisque`: a method builds the command and hands it to the class's I/O (`_call`,
`_call_for_jobs`, `_fetch`), which returns the value (sync) or a coroutine (asyncio).

Names are the commands' in snake case; times are seconds. Options the server takes in
whole seconds (DELAY, RETRY, TTL, BACKOFF) refuse fractions rather than round them.
"""
from __future__ import annotations

import math

from disque.client.nodes import Hello
from disque.client.replies import (Job, JobInfo, QueueStat, info_reply, jobs_from_reply,
                                   scan_reply, text)

PAUSE_OPTIONS = frozenset(("in", "out", "all", "none", "state", "bcast"))
JOB_STATES = frozenset(("wait-repl", "active", "queued", "acked"))


def seconds(name, value):
    """A duration in seconds: a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be a number of seconds, not %r" % (name, value))
    if not value > 0 or math.isinf(value):
        raise ValueError("%s must be a finite number of seconds > 0, not %r" % (name, value))
    return float(value)


def milliseconds(name, value):
    """A timeout in seconds -> whole milliseconds for the server, at least 1."""
    try:
        return max(1, math.ceil(seconds(name, value) * 1000))
    except ValueError:
        raise ValueError("%s must be a finite number of seconds > 0 (None waits forever)"
                         % name) from None


def whole_seconds(name, seconds, minimum=0):
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("%s must be a whole number of seconds, not %r" % (name, seconds))
    if seconds != int(seconds):
        raise ValueError("%s must be a whole number of seconds (the server's unit), not %r"
                         % (name, seconds))
    if seconds < minimum:
        raise ValueError("%s must be >= %d" % (name, minimum))
    return int(seconds)


def count(name, value, minimum=1, maximum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an integer, not %r" % (name, value))
    if value < minimum:
        raise ValueError("%s must be >= %d" % (name, minimum))
    if maximum is not None and value > maximum:
        raise ValueError("%s must be <= %d" % (name, maximum))
    return value


def job_id(job):
    return job.id if isinstance(job, Job) else text(job)


def _to_int(reply):
    return int(reply)


def _to_text(reply):
    return text(reply)


def _pong(reply):
    return reply in (b"PONG", "PONG", True) or reply


class JobCommands:
    """The typed methods. Subclasses provide `_table`, `_call`, `_call_for_jobs`, `_fetch`."""

    # -- producing -------------------------------------------------------------
    def add_job(self, queue, body, timeout=None, *, replicate=None, delay=None, retry=None,
                ttl=None, maxlen=None, asynchronous=False, backoff=None,
                max_deliveries=None, deadletter=None, group=None):
        """ADDJOB: queue a job and return its ID.

        `timeout` bounds the wait for the copies (seconds; None waits as long as it takes).
        `replicate`, `delay`, `retry`, `ttl`, `maxlen` and `asynchronous` are the original's
        options; `backoff`, `max_deliveries` and `deadletter` ours (docs/job-features.md);
        `group` puts the job in a group of its queue: one job of a group is delivered at a
        time, in the order they were added (docs/job-groups.md)."""
        args = ["ADDJOB", queue, body, 0 if timeout is None else milliseconds("timeout", timeout)]
        if replicate is not None:
            args += ("REPLICATE", count("replicate", replicate))
        if delay is not None:
            args += ("DELAY", whole_seconds("delay", delay))
        if retry is not None:
            args += ("RETRY", whole_seconds("retry", retry))
        if ttl is not None:
            args += ("TTL", whole_seconds("ttl", ttl, 1))
        if maxlen is not None:
            args += ("MAXLEN", count("maxlen", maxlen))
        if backoff is not None:
            args += ("BACKOFF", whole_seconds("backoff", backoff, 1))
        if max_deliveries is not None:
            args += ("MAXDELIVERIES", count("max_deliveries", max_deliveries))
        if deadletter is not None:
            args += ("DEADLETTER", deadletter)
        if group is not None:
            args += ("GROUP", group)
        if asynchronous:
            args.append("ASYNC")
        return self._call(args, _to_text)

    # -- consuming -------------------------------------------------------------
    def get_jobs(self, *queues, count=1, timeout=None, nohang=False, withcounters=False,
                 from_prefix=None, failover_timeout=None):
        """GETJOB: up to `count` jobs from the queues (or from every queue named
        `from_prefix*`), as a list of `Job`; empty when none came.

        `timeout` is how long to block (seconds); None blocks until a job comes, 0 or
        `nohang=True` does not block. `failover_timeout`: how long this call tries other
        nodes when its node fails (None: the client's)."""
        if bool(queues) == (from_prefix is not None):
            raise ValueError("get_jobs needs queue names or from_prefix, not both")
        args = ["GETJOB"]
        if nohang or timeout == 0:
            args.append("NOHANG")
        elif timeout is not None:
            args += ("TIMEOUT", milliseconds("timeout", timeout))
        if count != 1:
            args += ("COUNT", _count(count))
        if withcounters:
            args.append("WITHCOUNTERS")
        if from_prefix is not None:
            args += ("FROM-PREFIX", from_prefix)
        else:
            args += ("FROM", *queues)
        block = None if (nohang or timeout == 0) else (timeout or 0)
        return self._fetch(args, block, failover_timeout)

    def get_job(self, *queues, timeout=None, withcounters=False, from_prefix=None):
        """One job or None: `get_jobs` with count 1."""
        return self._first(self.get_jobs(*queues, timeout=timeout, withcounters=withcounters,
                                         from_prefix=from_prefix))

    def ack_job(self, *jobs):
        """ACKJOB: acknowledge jobs (IDs or `Job`s); returns how many were known."""
        return self._call_for_jobs("ACKJOB", jobs)

    def fastack(self, *jobs):
        """FASTACK: best-effort delete everywhere; returns how many were known."""
        return self._call_for_jobs("FASTACK", jobs)

    def nack_job(self, *jobs, delay=None):
        """NACK: put the jobs back in their queue now, or after `delay` seconds (ours),
        counting a negative acknowledgement; returns how many were queued."""
        tail = () if delay is None else ("DELAY", whole_seconds("delay", delay))
        return self._call_for_jobs("NACK", jobs, tail)

    def working(self, job):
        """WORKING: postpone the job's next requeue; returns its RETRY in seconds."""
        return self._call_for_jobs("WORKING", (job,))

    def enqueue(self, *jobs):
        """ENQUEUE: queue active jobs again; returns how many were queued."""
        return self._call_for_jobs("ENQUEUE", jobs)

    def dequeue(self, *jobs):
        """DEQUEUE: take queued jobs out of their queue (they stay active)."""
        return self._call_for_jobs("DEQUEUE", jobs)

    def del_job(self, *jobs):
        """DELJOB: delete the jobs on the node that holds them, nowhere else."""
        return self._call_for_jobs("DELJOB", jobs)

    def show(self, job):
        """SHOW: the job's fields as a `JobInfo`, or None when the node does not know it."""
        return self._call_for_jobs("SHOW", (job,), parse=JobInfo.from_reply)

    # -- queues ----------------------------------------------------------------
    def qlen(self, queue):
        return self._call(("QLEN", queue), _to_int)

    def qpeek(self, queue, count):
        """QPEEK: up to `count` jobs from the head (a negative count: from the tail)."""
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError("count must be an integer")
        return self._call(("QPEEK", queue, count), self._peeked)

    def qstat(self, queue):
        """QSTAT: a `QueueStat`, or None for a queue the node does not have."""
        return self._call(("QSTAT", queue), QueueStat.from_reply)

    def pause(self, queue, *options):
        """PAUSE: options among in, out, all, none, state, bcast; returns the new state."""
        if not options:
            raise ValueError("pause needs at least one option: in, out, all, none, state, bcast")
        for option in options:
            if option.lower() not in PAUSE_OPTIONS:
                raise ValueError("unknown PAUSE option %r" % option)
        return self._call(("PAUSE", queue, *options), _to_text)

    def qscan(self, cursor=0, *, count=None, busyloop=False, minlen=None, maxlen=None,
              importrate=None):
        """QSCAN: one step, (next cursor, queue names); a cursor of 0 ends the scan."""
        args = ["QSCAN", cursor]
        for name, value in (("COUNT", count), ("MINLEN", minlen), ("MAXLEN", maxlen),
                            ("IMPORTRATE", importrate)):
            if value is not None:
                args += (name, value)
        if busyloop:
            args.append("BUSYLOOP")
        return self._call(args, scan_reply)

    def jscan(self, cursor=0, *, count=None, busyloop=False, queue=None, states=(),
              reply="id"):
        """JSCAN: one step, (next cursor, job IDs) or, with reply="all", `JobInfo`s."""
        args = ["JSCAN", cursor]
        if count is not None:
            args += ("COUNT", count)
        if queue is not None:
            args += ("QUEUE", queue)
        for state in states:
            if state not in JOB_STATES:
                raise ValueError("unknown job state %r" % state)
            args += ("STATE", state)
        if reply not in ("id", "all"):
            raise ValueError("reply is 'id' or 'all'")
        args += ("REPLY", reply)
        if busyloop:
            args.append("BUSYLOOP")
        decode = JobInfo.from_reply if reply == "all" else text
        return self._call(args, lambda r: scan_reply(r, decode))

    # -- the node --------------------------------------------------------------
    def info(self, section=None):
        """INFO as a dict of fields (numbers converted)."""
        args = ("INFO",) if section is None else ("INFO", section)
        return self._call(args, info_reply)

    def ping(self):
        return self._call(("PING",), _pong)

    def execute_command(self, *args):
        """Any command, on the node in use, with failover; the raw redis-py reply."""
        return self._call(args, None)

    # -- helpers for the I/O classes --------------------------------------------
    def _peeked(self, reply):
        return jobs_from_reply(reply, None, self)

    def _hello_reply(self, reply, address):
        return Hello.from_reply(reply, address)

    def _groups(self, jobs):
        """[(address or None for the node in use, [ids])]: each job goes to the node that
        delivered it or, for a bare ID, the node its ID prefix names, when usable."""
        if not jobs:
            raise ValueError("no job given")
        table = self._table
        groups = {}
        for job in jobs:
            node = None
            if isinstance(job, Job) and job.node is not None:
                candidate = table.by_id.get(job.node)
                node = candidate if table.usable(candidate) else None
            jid = job_id(job)
            if node is None:
                node = table.node_of_job(jid)
            groups.setdefault(node.address if node is not None else None, []).append(jid)
        return list(groups.items())


def _count(value):
    return count("count", value)
