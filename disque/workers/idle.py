"""The idle tick (docs/design.md, "The idle tick"): a worker with nothing to do ticks every
IDLE_TICK_MS instead of every 10 ms, or every SLEEP_TICK_MS when it also has no job timer,
no connection and no other node to look after, and is back on the 10 ms tick at its first
work or as soon as something comes due within its slow tick.

Two states, looked at after each turn of the loop: busy (the timer ticks every TICK_MS;
IDLE_AFTER_MS without work, looked at on ticks, and nothing that needs the fast tick:
idle) and idle (the timer ticks every IDLE_TICK_MS or SLEEP_TICK_MS, looked at again on
each tick; any work, or something due: busy)."""
from disque.workers.crons import TICK_MS

IDLE_TICK_MS = 100
SLEEP_TICK_MS = 1000
IDLE_AFTER_MS = 1000


class IdleTick:
    """Needs the worker (shard, served, job_links, its work counter) and its timer.
    Offers after_turn and `idle`."""

    def __init__(self, worker, timer):
        self.worker = worker
        self.timer = timer
        self.idle = False
        self.last_work = self.work_done()
        self.last_work_ms = worker.shard.now_ms

    def after_turn(self, ticked):
        if not (self.idle or ticked):
            return
        worker = self.worker
        work = self.work_done()
        served = worker.served
        if work != self.last_work or (self.idle and served is not None and served.woke):
            self.last_work = work
            self.last_work_ms = worker.shard.now_ms
            if self.idle:
                self.set_idle(0)
        elif self.idle:
            interval = self.idle_interval()
            if interval != self.timer.interval_ms:
                self.set_idle(interval)
        elif worker.shard.now_ms - self.last_work_ms >= IDLE_AFTER_MS:
            interval = self.idle_interval()
            if interval:
                self.set_idle(interval)

    def work_done(self):
        """A count that moves with every command and job message this worker gets: the
        commands it runs on any path (those forwarded by the other workers too), those its
        connections send elsewhere, the link's requests and job messages (control messages,
        such as the front-end's memory level every 100 ms, leave it)."""
        worker = self.worker
        n = worker.work + worker.shard.n_commands
        if worker.served is not None:
            n += worker.served.commands
        if worker.job_links is not None:
            n += worker.job_links.received_msgs
        return n

    def idle_interval(self):
        """The slow tick this worker may take now, 0 if it needs the 10 ms one: nothing
        it does may need the fast tick within the slow one (no job timer due within it, no
        consumer deadline, no producer waiting for copies, no AOF work, nothing queued for
        the loop, not leaving). SLEEP_TICK_MS, when besides no job is scheduled at all, no
        connection is served here and the node is alone (its cluster cron has nothing to
        do); else IDLE_TICK_MS."""
        worker = self.worker
        shard = worker.shard
        if (shard.consumers.deadlines or shard.replication.repl_waits or shard.ready
                or shard.interest_due or shard.bus_out or shard.out or shard.leaving
                or shard.persistence.aof_busy or shard.spill.pending()):
            return 0
        when = shard.timers.next_when()
        if (when == 0 and shard.cluster_size == 1
                and (worker.served is None or not worker.served.clients)
                and (worker.job_links is None or not worker.job_links.links)):
            return SLEEP_TICK_MS
        if when == 0 or when > shard.now_ms + IDLE_TICK_MS + TICK_MS:
            return IDLE_TICK_MS
        return 0

    def set_idle(self, interval):
        """A slow tick of `interval` ms, or back on the 10 ms tick (0)."""
        self.idle = interval != 0
        self.timer.set_interval(interval or TICK_MS)
        if self.worker.served is not None:
            self.worker.served.idle = self.idle     # every wake-up then comes back to the loop
