"""Jobs a framework's worker holds (prefetched, or running with a late ACK) and has not
acknowledged yet: WORKING keeps each from being delivered again while it is held, with the
worker runner's schedule (the first at 0.4 s, then at half the job's RETRY; docs/client.md,
"The worker runner").

A thread of its own sends them, not the framework's fetch loop: Celery and Dramatiq stop
fetching as soon as a graceful shutdown begins, while their pools may run the jobs in hand
for minutes more, and Celery's `--pool solo` does not fetch at all during a task. A lease
lasts as long as the process that holds the job: a job is delivered again only when that
process died or lost the cluster for its RETRY.
"""
from __future__ import annotations

import logging
import threading
import time

from disque.client.worker.jobflow import keep_alive, run_sync
from disque.client.worker.policy import RunningJobs
from disque.client.worker.settings import WorkerSettings

log = logging.getLogger(__name__)

KEEPER_PERIOD = 0.05        # s between two looks at the held jobs while there are some


class Leases:
    """Thread-safe: jobs are held on the fetching thread and released from any (a
    framework acknowledges from its pool's threads). The keeper thread starts with the
    first job held and sleeps while none is."""

    def __init__(self, client, clock=time.monotonic, period=KEEPER_PERIOD):
        self.client = client
        self.clock = clock
        self.period = period
        self._held = RunningJobs(WorkerSettings(), clock)
        self._keys = {}                 # job ID -> key in `_held`
        # held across a refresh's WORKINGs, so no WORKING follows the job's ACK
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._keeper = None

    def hold(self, job):
        """Lease a delivered job; False when it is held already (the server delivered it a
        second time: the caller drops that delivery, the first one is acked or handed back)."""
        with self._lock:
            if self._stopped.is_set():
                raise RuntimeError("leases closed: job %s cannot be held" % job.id)
            if job.id in self._keys:
                return False
            self._keys[job.id] = self._held.start(job)
            self._wake.set()
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, daemon=True,
                                                name="disque-leases")
                self._keeper.start()
            return True

    def release(self, job_id):
        """The job was acknowledged, NACKed or handed back: no more WORKING for it. False
        when it was not held."""
        with self._lock:
            key = self._keys.pop(job_id, None)
            if key is None:
                return False
            self._held.finish(key)
            return True

    def refresh(self):
        """WORKING for the held jobs that are due (a round trip only for those)."""
        with self._lock:
            working, _ = self._held.due()
            for running in working:
                run_sync(self.client, keep_alive(running, self.clock))

    def close(self):
        """Stop the keeper; returns the jobs still held, released (for the caller to hand
        back)."""
        self._stopped.set()
        self._wake.set()
        keeper = self._keeper
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(5.0)
        with self._lock:
            jobs = [running.job for running in self._held.jobs.values()]
            self._held.jobs.clear()
            self._keys.clear()
        return jobs

    def _keep(self):
        while not self._stopped.is_set():
            with self._lock:
                holding = bool(self._keys)
                if not holding:
                    self._wake.clear()
            if not holding:
                self._wake.wait()
                continue
            try:
                self.refresh()
            except Exception:   # the thread lives on: a lease it stops renewing is lost
                log.exception("renewing the leases of held jobs failed; trying again")
            self._stopped.wait(self.period)

    def __len__(self):
        with self._lock:
            return len(self._keys)
