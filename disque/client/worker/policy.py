"""What the worker does with a job, without I/O: how long a failed job waits before its next
delivery, when a running job needs WORKING, and the words of its log lines
(docs/client.md, "The worker runner").
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from disque.client.worker.settings import WorkerSettings


def retry_delay(deliveries, settings: WorkerSettings):
    """NACK DELAY for a job that failed on its `deliveries`-th delivery: retry_delay,
    doubling per delivery, up to max_retry_delay (whole seconds, the server's unit)."""
    if deliveries is None or deliveries < 1:
        deliveries = 1
    return min(settings.max_retry_delay, settings.retry_delay * 2 ** min(deliveries - 1, 32))


@dataclass(frozen=True)
class FailurePlan:
    """How to hand a failed job back: `delay` for NACK (None: a plain NACK, the job's own
    BACKOFF decides), whether the server will dead-letter it, and the log line's tail."""
    delay: int | None
    dead_letter: str | None
    retried: bool
    note: str


def plan_failure(job, info, settings: WorkerSettings) -> FailurePlan:
    """`info` is the job's SHOW (None when the node no longer knows it)."""
    deliveries = job.deliveries
    if info is not None:
        deliveries = 1 + info.nacks + info.additional_deliveries
        if info.retry == 0:
            return FailurePlan(None, None, False, "RETRY 0 job (at most once): not retried")
        if info.max_deliveries and deliveries >= info.max_deliveries:
            target = info.deadletter or (job.queue + ":dead")
            return FailurePlan(None, target, False, "delivery %d of %d: the server moves it "
                               "to %s" % (deliveries, info.max_deliveries, target))
        if info.backoff:
            return FailurePlan(None, None, True, "delivery %d: retried after the job's own "
                               "back-off (%d s now)" % (deliveries, info.retry_interval or 0))
    delay = retry_delay(deliveries, settings)
    return FailurePlan(delay, None, True, "delivery %s: retry in %d s" % (deliveries or "?", delay))


@dataclass
class Running:
    """A job in hand: when it came, when it needs its next WORKING, when it times out."""
    job: object
    started: float
    working_at: float
    deadline: float | None
    retry: int | None = None        # learnt from the first WORKING's reply
    timed_out: bool = False
    extend: bool = True             # False after TOOLATE / NOJOB / RETRY 0

    def working_done(self, retry, now):
        """WORKING answered the job's RETRY: the next one comes at half of it."""
        self.retry = retry
        if retry <= 0:
            self.extend = False
        else:
            self.working_at = now + retry / 2.0


class RunningJobs:
    """The jobs in hand, shared by the runners and the keeper that sends WORKING."""

    def __init__(self, settings: WorkerSettings, clock=time.monotonic):
        self.settings = settings
        self.clock = clock
        self.jobs: dict[int, Running] = {}
        self._keys = itertools.count(1)     # next() on a count is atomic under the GIL

    def start(self, job):
        now = self.clock()
        key = next(self._keys)
        timeout = self.settings.job_timeout
        self.jobs[key] = Running(job, now, now + self.settings.first_working_after,
                                 None if timeout is None else now + timeout)
        return key

    def finish(self, key):
        return self.jobs.pop(key, None)

    def due(self):
        """(needing WORKING, newly timed out) among the jobs in hand, at this moment."""
        now = self.clock()
        working, timed_out = [], []
        for running in list(self.jobs.values()):
            if running.timed_out:
                continue
            if running.deadline is not None and now >= running.deadline:
                running.timed_out = True
                timed_out.append(running)
            elif running.extend and now >= running.working_at:
                working.append(running)
        return working, timed_out

    def __len__(self):
        return len(self.jobs)


def describe(job):
    return "job %s (queue %s)" % (job.id, job.queue)
