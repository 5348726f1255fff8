"""The messages of one queue that a Dramatiq worker process holds without an ACK yet
(buffered by its consumer, waiting for their eta, or running): `Leases` (WORKING from a
thread of its own), plus a wake-up for a consumer waiting for room to prefetch.

The broker keeps one per queue, shared by every consumer of that queue in the process: a
consumer restarted after a connection error acknowledges messages its predecessor
delivered.
"""
from __future__ import annotations

import threading

from disque.integrations.leases import Leases


class QueueLeases(Leases):

    def __init__(self, client):
        super().__init__(client)
        self._released = threading.Event()

    def release(self, job_id):
        released = super().release(job_id)
        self._released.set()
        return released

    def wait_for_release(self, timeout):
        """Block until a held job is released or `timeout` seconds pass."""
        self._released.wait(timeout)
        self._released.clear()
