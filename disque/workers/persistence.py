"""A worker's append-only file (SPEC 12): the hooks the shard calls.

The shard calls `aof_loadjob(job)` when a job is accepted (a local job once its copies are
confirmed, a replica on REPLJOB) and `aof_deljob(job)` when an active/queued job is acked or
deleted; both only while `self.aof_on` is set.
"""


class PersistenceMixin:
    def aof_loadjob(self, job):
        pass

    def aof_deljob(self, job):
        pass

    def aof_flush(self):
        """Write (and with appendfsync always, fsync) what this batch logged, before the
        batch's replies leave the worker. False when the write failed."""
        return True
