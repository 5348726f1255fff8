"""What the threaded and the asyncio runner share: their construction, the stats line and
the log lines of a stop."""
from __future__ import annotations

import logging
import time

from disque.client.worker.policy import RunningJobs, describe
from disque.client.worker.settings import WorkerSettings
from disque.client.worker.stats import WorkerStats

log = logging.getLogger("disque.worker")

ERROR_PAUSE_MAX = 5.0       # seconds between two fetches while the cluster fails
KEEPER_TICK = 0.1           # seconds between two looks at the jobs in hand


class RunnerBase:
    def __init__(self, function, queues=(), *, client=None, from_prefix=None, settings=None,
                 on_stats=None, clock=time.monotonic, **options):
        """`function(job)` runs each job: it returns (ACK) or raises (NACK, retried with a
        growing delay). `queues` or `from_prefix` name what to fetch; `client` is a
        `Disque` (threads) or `AsyncDisque` (asyncio); `options` are `WorkerSettings`'
        fields; `on_stats(snapshot)` is called every `stats_interval`."""
        if bool(queues) == (from_prefix is not None):
            raise ValueError("a worker needs queue names or from_prefix, not both")
        self.function = function
        self.queues = tuple(queues)
        self.from_prefix = from_prefix
        self.settings = settings or WorkerSettings(**options)
        self.client = client
        self.on_stats = on_stats
        self.clock = clock
        self.stats = WorkerStats()
        self.running = RunningJobs(self.settings, clock)
        self._next_stats = clock() + (self.settings.stats_interval or float("inf"))
        self.forced = False

    def _fetch_args(self):
        kw = dict(count=1, timeout=self.settings.poll, withcounters=True)
        if self.from_prefix is not None:
            kw["from_prefix"] = self.from_prefix
        return self.queues, kw

    def _what(self):
        return ("queues " + ", ".join(self.queues) if self.queues
                else "queues named %s*" % self.from_prefix)

    def _report_stats(self, force=False):
        now = self.clock()
        if not force and now < self._next_stats:
            return
        self._next_stats = now + (self.settings.stats_interval or float("inf"))
        snapshot = self.stats.snapshot()
        log.info("worker stats: %s", snapshot.line())
        if self.on_stats is not None:
            try:
                self.on_stats(snapshot)
            except Exception:
                log.exception("on_stats callback failed")

    @staticmethod
    def _error_pause(failures):
        return min(ERROR_PAUSE_MAX, 0.1 * 2 ** min(failures, 10))

    def _abandon_left(self):
        """After the grace period: the jobs still running are left to the server, which
        delivers them again after their RETRY."""
        for running in list(self.running.jobs.values()):
            self.stats.add("abandoned")
            log.warning("%s still running at the end of the grace period: left to the "
                        "server's retry", describe(running.job))

    def _stopped_line(self, code):
        self._report_stats(force=True)
        log.info("worker stopped (exit %d)", code)
        return code
