"""A worker's AOF rewrite without fork (SPEC 12, docs/persistence.md): its jobs serialized in
slices between batches, written and fsynced by a thread to a temporary file that replaces
the worker's file once complete. Driven by `Persistence` (disque/workers/persistence.py).
"""
import os
import queue
import threading
import time

from disque.contracts.aof_format import LOADJOB, loadjob_record, record
from disque._fast.job import ACTIVE, QUEUED

REWRITE_BACKLOG = 32            # chunks the writer thread may lag behind
CHUNK_JOBS = 512


class Rewrite:
    """One background rewrite of a worker's file (see the module doc)."""

    def __init__(self, jobs, path, tmp, incremental_fsync, spill=None):
        self.jobs = list(jobs)
        self.pos = 0
        self.spill = spill          # spilled jobs are written from their records on disk
        self.cold_pos = 0 if spill is not None and spill.index.count else -1
        self.path = path
        self.tmp = tmp
        self.incremental = incremental_fsync
        self.diff = []              # records logged meanwhile when there is no open file
        self.diff_bytes = 0
        self.reqids = []            # front-end requests answered when it ends
        self.started = time.monotonic()
        self.chunks = queue.SimpleQueue()
        self.fed_all = False
        self.aborted = False
        self.error = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.write_loop, name="aof-rewrite", daemon=True)
        self.thread.start()

    def write_loop(self):
        fd = None
        try:
            fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            unsynced = 0
            while True:
                chunk = self.chunks.get()
                if chunk is None or self.aborted:
                    break
                view = memoryview(chunk)
                n = 0
                while n < len(chunk):
                    n += os.write(fd, view[n:])
                unsynced += n
                if self.incremental and unsynced >= 32 * 1024 * 1024:
                    os.fsync(fd)            # aof-rewrite-incremental-fsync
                    unsynced = 0
            if not self.aborted:
                os.fsync(fd)
        except OSError as e:
            self.error = "%s: %s" % (self.tmp, e.strerror or e)
        finally:
            if fd is not None:
                os.close(fd)
            if self.aborted or self.error:
                try:
                    os.unlink(self.tmp)
                except OSError:
                    pass
            self.done.set()

    def step(self, shard, budget_s):
        """Serialize the next jobs for about `budget_s` seconds."""
        if self.fed_all or self.chunks.qsize() > REWRITE_BACKLOG:
            return
        deadline = time.perf_counter() + budget_s
        jobs = self.jobs
        live = shard.jobs
        n = len(jobs)
        pos = self.pos
        while pos < n:
            out = []
            for job in jobs[pos:pos + CHUNK_JOBS]:
                if (job.state == ACTIVE or job.state == QUEUED) and live.get(job.id) is job:
                    out.append(loadjob_record(job))
                elif self.spill is not None and job.id not in live:
                    payload = self.spill.payload_of(job.id)     # spilled since the start
                    if payload is not None:
                        out.append(record(LOADJOB, payload))
            pos = min(n, pos + CHUNK_JOBS)
            if out:
                self.chunks.put(b"".join(out))
            if time.perf_counter() > deadline:
                break
        self.pos = pos
        while (pos >= n and self.cold_pos >= 0 and time.perf_counter() <= deadline
               and self.chunks.qsize() <= REWRITE_BACKLOG):
            payloads, self.cold_pos = self.spill.cold_records(self.cold_pos, CHUNK_JOBS)
            if payloads:
                self.chunks.put(b"".join([record(LOADJOB, p) for p in payloads]))
        if pos >= n and self.cold_pos < 0:
            self.jobs = None
            self.fed_all = True
            self.chunks.put(None)

    def abort(self):
        self.aborted = True
        self.fed_all = True
        self.chunks.put(None)
