"""Jobs a framework's worker holds (prefetched, or running with a late ACK) and has not
acknowledged yet: WORKING keeps each from being delivered again while it is held, with the
worker runner's schedule (the first at 0.4 s, then at half the job's RETRY; docs/client.md,
"The worker runner"). The framework's own loop calls `refresh()` between fetches, so a
worker that dies stops refreshing and its jobs come back after their RETRY."""
from __future__ import annotations

import time

from disque.client.worker.jobflow import keep_alive, run_sync
from disque.client.worker.policy import RunningJobs
from disque.client.worker.settings import WorkerSettings


class Leases:
    """Not thread-safe: one consumer thread holds, releases and refreshes."""

    def __init__(self, client, clock=time.monotonic):
        self.client = client
        self.clock = clock
        self.held = RunningJobs(WorkerSettings(), clock)
        self.keys = {}                  # job ID -> key in `held`

    def hold(self, job):
        self.keys[job.id] = self.held.start(job)

    def release(self, job_id):
        """The job was acknowledged, NACKed or handed back: no more WORKING for it."""
        key = self.keys.pop(job_id, None)
        if key is not None:
            self.held.finish(key)

    def refresh(self):
        """WORKING for the held jobs that are due (a round trip only for those)."""
        working, _ = self.held.due()
        for running in working:
            run_sync(self.client, keep_alive(running, self.clock))

    def __len__(self):
        return len(self.keys)
