"""One shard driven in-process with a clock the test moves (tests/test_lifecycle_clock.py,
tests/test_job_groups_units.py).

A `Shard` is the real worker state machine (Cython core plus its Python parts); the worker
process only adds the socket loop around it and calls `tick()` to read the wall clock.
Here the test sets `now_ms`/`now_s` itself and calls `run_timers()` as the worker's timer
would."""
import hiredis

from disque.workers.shard import Shard
from disque.contracts.getjob_options import GetjobRequest

NODE = b"a" * 40


def parse(raw):
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


class Node:
    """One shard driven like its worker would drive it, with a hand-moved clock."""

    def __init__(self, start_ms=1_800_000_000_000):
        self.shard = Shard(0, 1, NODE, {})
        self.reqid = 0
        self.set_time(start_ms)

    def set_time(self, ms):
        self.shard.now_ms = ms
        self.shard.now_s = ms // 1000

    def advance(self, ms):
        """Move the clock forward in 10 ms steps (the worker's timer resolution)."""
        end = self.shard.now_ms + ms
        while self.shard.now_ms < end:
            self.set_time(min(end, self.shard.now_ms + 10))
            self.shard.run_timers()

    def cmd(self, *args):
        self.reqid += 1
        return parse(self.shard.execute(self.reqid, [a if isinstance(a, bytes) else str(a).encode()
                                                     for a in args]))

    def addjob(self, *opts):
        return self.cmd("ADDJOB", "q", "body", 0, *opts)

    def getjob(self, queue="q"):
        self.reqid += 1
        reply, _ids = self.shard.getjob(GetjobRequest(1, nohang=True, queues=[queue.encode()],
                                                      reqid=self.reqid, client="client"))
        return parse(reply)

    def show(self, jid):
        reply = self.cmd("SHOW", jid)
        return None if reply is None else dict(zip(reply[::2], reply[1::2]))

    def qlen(self, queue="q"):
        return self.cmd("QLEN", queue)

    def first_time_queued(self, limit_ms, queue="q"):
        """Advance until the queue holds a job; return the ms that took."""
        start = self.shard.now_ms
        while self.qlen(queue) == 0:
            assert self.shard.now_ms - start <= limit_ms, "job not queued in time"
            self.advance(10)
        return self.shard.now_ms - start
