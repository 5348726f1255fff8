"""`Worker`: runs a function on the jobs of some queues, on threads (or, for an `async def`
function, as asyncio tasks through `AsyncWorker`). docs/client.md, "The worker runner"."""
from __future__ import annotations

import asyncio
import inspect
import signal
import threading

from disque.client.errors import DisqueError
from disque.client.sync import Disque
from disque.client.worker.common import KEEPER_TICK, RunnerBase, log
from disque.client.worker.jobflow import JobTimeout, failed, keep_alive, run_sync, succeeded
from disque.client.worker.policy import describe
from disque.client.worker.tasks import AsyncWorker



class Worker(RunnerBase):
    """`Worker(handle, ["emails"], client=Disque(...), concurrency=8).run()`: blocks until
    SIGTERM / SIGINT (or `stop()`), then finishes the jobs in hand within `grace` seconds
    and returns 0 (1 after a second signal, which stops at once)."""

    def __init__(self, function, queues=(), **kw):
        super().__init__(function, queues, **kw)
        self._stopping = threading.Event()
        self._halt = threading.Event()          # the keeper's end, after the grace period
        self._threads = []

    @staticmethod
    def is_async(function):
        return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            getattr(function, "__call__", None))

    def stop(self):
        """Stop fetching; the jobs in hand finish within the grace period."""
        if self._stopping.is_set():
            self.forced = True
            self._halt.set()
        self._stopping.set()

    def run(self, install_signals=True):
        if self.is_async(self.function):
            runner = AsyncWorker(self.function, self.queues, from_prefix=self.from_prefix,
                                 settings=self.settings, on_stats=self.on_stats)
            return asyncio.run(runner.run(install_signals=install_signals))
        if self.client is None:
            self.client = Disque()
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        log.info("worker started: %d thread(s) on %s", self.settings.concurrency, self._what())
        self._threads = [threading.Thread(target=self._fetch_loop, name="disque-worker-%d" % i,
                                          daemon=True)
                         for i in range(self.settings.concurrency)]
        keeper = threading.Thread(target=self._keeper, name="disque-worker-keeper", daemon=True)
        for thread in self._threads + [keeper]:
            thread.start()
        while not self._stopping.wait(0.2):
            self._report_stats()
        log.info("worker stopping: no more fetches, %d job(s) in hand, up to %.0f s to "
                 "finish them", len(self.running), self.settings.grace)
        deadline = self.clock() + self.settings.grace
        for thread in self._threads:
            while thread.is_alive() and not self._halt.is_set():
                left = deadline - self.clock()
                if left <= 0:
                    break
                thread.join(min(left, 0.2))
        self._abandon_left()
        self._halt.set()
        keeper.join(1.0)
        return self._stopped_line(1 if self.forced else 0)

    # -- the threads --------------------------------------------------------------
    def _fetch_loop(self):
        queues, kw = self._fetch_args()
        failures = 0
        while not self._stopping.is_set():
            try:
                jobs = self.client.get_jobs(*queues, **kw)
            except DisqueError as exc:
                failures += 1
                log.error("fetching from %s failed: %s", self._what(), exc)
                self._stopping.wait(self._error_pause(failures))
                continue
            failures = 0
            for job in jobs:
                if self._halt.is_set():
                    return
                self._process(job)

    def _process(self, job):
        key = self.running.start(job)
        self.stats.add("running")
        try:
            self.function(job)
        except Exception as exc:
            error = exc
        else:
            error = None
        finally:
            running = self.running.finish(key)
            self.stats.add("running", -1)
        if self._halt.is_set():
            return
        if running is None or running.timed_out:
            log.warning("%s returned after its timeout; the result is ignored", describe(job))
            return
        try:
            run_sync(self.client, succeeded(job, self.settings, self.stats) if error is None
                     else failed(job, error, self.settings, self.stats))
        except Exception:
            log.exception("%s: handing its result to the server failed", describe(job))

    def _keeper(self):
        while not self._halt.wait(KEEPER_TICK):
            working, timed_out = self.running.due()
            try:
                for running in working:
                    run_sync(self.client, keep_alive(running, self.clock))
                for running in timed_out:
                    self.stats.add("timed_out")
                    error = JobTimeout("ran longer than %s s" % self.settings.job_timeout)
                    run_sync(self.client, failed(running.job, error, self.settings, self.stats))
            except Exception:
                log.exception("worker keeper: unexpected error")
