"""The workers' figures INFO renders, kept by the front-end (docs/info-latency.md).

INFO used to ask every worker for its counters on every call: one round trip through all
the workers per INFO, 10-25x slower than the original's INFO. The front-end now keeps
the last answer (`InfoSnapshot`) and renders INFO from it without a round trip while it
is still exact as far as the front-end can know:

* no command was sent to a worker since the snapshot was asked for (`mark`: the number of
  commands the front-end dispatched minus those it answered itself, see
  Dispatch.local_command in disque/frontend/dispatch.py), and no front-end command that changes the workers' state ran
  (DEBUG FLUSHALL, CONFIG SET, CLUSTER ..., BGREWRITEAOF: `invalidate`);
* it is at most MAX_AGE_S old: what the workers change on their own (timers: requeue,
  expiry, delays; copies and acks from other nodes) shows within that bound.

Otherwise one request goes to the workers, and every INFO that arrives meanwhile with the
same mark waits for that answer instead of sending its own (concurrent INFOs coalesce).
"""
import time

MAX_AGE_S = 0.1
# front-end commands that change nothing the workers report
NEUTRAL_LOCAL = frozenset((b"ping", b"echo", b"info", b"time", b"hello", b"auth", b"client",
                           b"monitor", b"slowlog", b"latency", b"command", b"loadjob"))


class InfoSnapshot:
    __slots__ = ("workers", "mark", "taken", "valid", "pending_mark", "waiters")

    def __init__(self):
        self.workers = None         # the workers' last "info" answers
        self.mark = -1              # worker-bound command count when they were asked
        self.taken = 0.0            # monotonic time when they were asked
        self.valid = False
        self.pending_mark = None    # the request in flight that a new INFO may join
        self.waiters = None

    def invalidate(self):
        self.valid = False
        self.pending_mark = None

    def fresh(self, mark):
        """The workers' figures if the snapshot is still exact for `mark`, else None."""
        if self.valid and self.mark == mark and time.monotonic() - self.taken <= MAX_AGE_S:
            return self.workers
        return None

    def wait(self, fe, mark, done):
        """done(workers) when the request in flight for `mark` answers (one is sent if
        there is none)."""
        now = time.monotonic()
        if self.pending_mark == mark:
            self.waiters.append(done)
            return
        waiters = [done]
        self.pending_mark = mark
        self.waiters = waiters

        def answered(workers):
            if self.pending_mark == mark and self.waiters is waiters:
                self.pending_mark = None
                self.workers, self.mark, self.taken, self.valid = workers, mark, now, True
            for w in waiters:
                w(workers)

        fe.control_all("info", None, answered)
