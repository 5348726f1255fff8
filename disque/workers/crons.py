"""A worker's periodic work, counted in 10 ms ticks of its timer (docs/design.md, "The
worker's loop"): producers waiting for copies at every tick, the cluster's work every
100 ms, housekeeping every 500 ms. An idle worker's timer ticks every 100 ms, and each of
its expiries counts for the ten ticks it stands for."""
import logging
import os

from disque.heap_trim import HeapTrim

log = logging.getLogger("disque.worker")

TICK_MS = 10             # job timers fire within this of their due time (SPEC allows 100)
CLUSTER_CRON_TICKS = 10  # 100 ms
SLOW_CRON_TICKS = 50     # 500 ms


class Crons:
    """Needs the worker (shard, served, job_links, index) and its timer. Offers tick (the
    loop calls it when the timer fired): False when the worker must stop."""

    def __init__(self, worker, timer):
        self.worker = worker
        self.timer = timer
        self.ticks = 0
        self.cluster_ticks = 0
        self.parent = os.getppid()
        self.heap = HeapTrim()

    def tick(self):
        worker = self.worker
        shard = worker.shard
        per = self.timer.interval_ms // TICK_MS     # 10 ms ticks one expiry stands for
        self.ticks += self.timer.drain() * per
        if shard.replication.repl_waits:
            shard.replication.repl_cron()   # producers' timeouts, one more node each 50 ms
        self.cluster_ticks += per
        if self.cluster_ticks >= CLUSTER_CRON_TICKS:
            self.cluster_ticks = 0
            self.cluster_cron()
        if self.ticks >= SLOW_CRON_TICKS:
            self.ticks = 0
            return self.slow_cron()
        return True

    def cluster_cron(self):
        """Every 100 ms: federation interest and LEAVING consumers on a node of a cluster,
        idle connections and the served totals, the job links' reconnections, freed heap
        back to the system."""
        worker = self.worker
        shard = worker.shard
        if shard.cluster_size > 1:
            if shard.leaving:
                shard.leaving_cron()
            else:
                shard.federation.federation_cron()
        if worker.served is not None:
            worker.served.cron()
        if worker.job_links is not None:
            worker.job_links.cron()
        self.heap.cron()

    def slow_cron(self):
        """Twice a second: leave if the front-end is gone, evict idle queues, shrink the
        job and queue tables a drain left oversized, give back an idle spill buffer."""
        if os.getppid() != self.parent:
            log.warning("Front-end is gone: worker %d exits", self.worker.index)
            return False
        shard = self.worker.shard
        shard.queue_commands.evict_idle_queues()
        shard.memory.shrink_tables()
        shard.spill.idle()
        return True
