"""`AsyncWorker`: the worker runner for `async def` functions, as asyncio tasks on an
`AsyncDisque`. The same settings, counters and guarantees as `Worker`."""
from __future__ import annotations

import asyncio
import signal

from disque.client.aio import AsyncDisque
from disque.client.errors import DisqueError
from disque.client.worker.common import KEEPER_TICK, RunnerBase, log
from disque.client.worker.jobflow import JobTimeout, failed, keep_alive, run_async, succeeded
from disque.client.worker.policy import describe


class AsyncWorker(RunnerBase):
    """`await AsyncWorker(handle, ["emails"], client=AsyncDisque(...)).run()`.

    A job timeout cancels the job's coroutine (asyncio can, threads cannot)."""

    def __init__(self, function, queues=(), **kw):
        super().__init__(function, queues, **kw)
        self._stopping = None

    def stop(self):
        if self._stopping is None:
            return
        if self._stopping.is_set():
            self.forced = True
        self._stopping.set()

    async def run(self, install_signals=True):
        self._stopping = asyncio.Event()
        if self.client is None:
            self.client = AsyncDisque()
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        log.info("worker started: %d task(s) on %s", self.settings.concurrency, self._what())
        fetchers = [asyncio.ensure_future(self._fetch_loop())
                    for _ in range(self.settings.concurrency)]
        keeper = asyncio.ensure_future(self._keeper())
        try:
            while not self._stopping.is_set():
                try:
                    await asyncio.wait_for(self._stopping.wait(), 0.2)
                except asyncio.TimeoutError:
                    self._report_stats()
            log.info("worker stopping: no more fetches, %d job(s) in hand, up to %.0f s to "
                     "finish them", len(self.running), self.settings.grace)
            deadline = self.clock() + self.settings.grace
            while not self.forced and any(not f.done() for f in fetchers):
                left = deadline - self.clock()
                if left <= 0:
                    break
                await asyncio.wait(fetchers, timeout=min(left, 0.2))
            self._abandon_left()
        finally:
            keeper.cancel()
            for task in fetchers:
                task.cancel()
            await asyncio.gather(keeper, *fetchers, return_exceptions=True)
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        return self._stopped_line(1 if self.forced else 0)

    async def _fetch_loop(self):
        queues, kw = self._fetch_args()
        failures = 0
        while not self._stopping.is_set():
            try:
                jobs = await self.client.get_jobs(*queues, **kw)
            except DisqueError as exc:
                failures += 1
                log.error("fetching from %s failed: %s", self._what(), exc)
                try:
                    await asyncio.wait_for(self._stopping.wait(), self._error_pause(failures))
                except asyncio.TimeoutError:
                    pass
                continue
            failures = 0
            for job in jobs:
                await self._process(job)

    async def _process(self, job):
        key = self.running.start(job)
        self.stats.add("running")
        task = asyncio.ensure_future(self.function(job))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.settings.job_timeout)
        finally:
            if not task.done():         # a timeout, or the worker stopping after its grace
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self.running.finish(key)
            self.stats.add("running", -1)
        if not done:
            self.stats.add("timed_out")
            error = JobTimeout("ran longer than %s s" % self.settings.job_timeout)
        elif task.cancelled():
            error = asyncio.CancelledError("the job cancelled itself")
        else:
            error = task.exception()
        try:
            await run_async(self.client, succeeded(job, self.settings, self.stats)
                            if error is None else failed(job, error, self.settings, self.stats))
        except Exception:
            log.exception("%s: handing its result to the server failed", describe(job))

    async def _keeper(self):
        while True:
            await asyncio.sleep(KEEPER_TICK)
            working, _ = self.running.due()     # a timeout is _process's own business
            try:
                for running in working:
                    await run_async(self.client, keep_alive(running, self.clock))
            except Exception:
                log.exception("worker keeper: unexpected error")
