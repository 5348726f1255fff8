"""The jobs a kombu channel has delivered and not yet acknowledged, by delivery tag, with
their leases (`Leases`: WORKING from a thread of their own while a job is held)."""
from __future__ import annotations

import threading

from disque.integrations.leases import Leases


class HeldJobs:
    """Thread-safe: deliveries happen on the consumer's thread, acks may come from any."""

    def __init__(self, client):
        self._lock = threading.Lock()
        self._jobs = {}                 # delivery tag -> Job
        self._leases = Leases(client)

    def hold(self, tag, job):
        """Hold a delivered job; False if this channel holds it already (the server queued
        it again and delivered it twice): the caller drops that second delivery."""
        with self._lock:
            if not self._leases.hold(job):
                return False
            self._jobs[tag] = job
            return True

    def release(self, tag):
        """The job of a delivery tag, no longer leased; None if it is not held (handed back
        already, or never held)."""
        with self._lock:
            job = self._jobs.pop(tag, None)
            if job is not None:
                self._leases.release(job.id)
            return job

    def release_all(self, tags=None):
        """Release these tags (every held one when None); returns their jobs."""
        with self._lock:
            tags = list(self._jobs) if tags is None else tags
            jobs = [self._jobs.pop(tag) for tag in tags if tag in self._jobs]
            for job in jobs:
                self._leases.release(job.id)
            return jobs

    def close(self):
        """Stop renewing; returns the jobs still held (for the caller to hand back)."""
        jobs = self.release_all()
        self._leases.close()
        return jobs

    def __len__(self):
        with self._lock:
            return len(self._jobs)
