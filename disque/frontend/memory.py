"""The node's memory level (SPEC 9; docs/memory.md): used_memory and the maxmemory levels.

Every ~100 ms the front-end tells every worker the last level and collects their memory
use (`Memory.set_memory` / `Memory.memory_report` on the worker side, a "memory" control).
used_memory is the workers' shares (their jobs, queues and AOF buffers) plus what the
front-end holds for its clients, not the interpreters' fixed footprint.

Two levels come out of each poll (docs/memory.md, "Spilling and the memory levels"):
`level`, of used_memory, is the original's (eviction and -OOM above 95%, no copies taken
above 75%); `held_level` counts the spilled jobs as if they were in RAM and decides
external replication, so a node that spills still hands new jobs to the cluster above
75% as the original does. Without spilled jobs the two are the same.
"""
import logging

from disque import memstat
from disque import nodeclock
from disque.heap_trim import HeapTrim
from disque.contracts import bus_messages as bus_msg

log = logging.getLogger("disque.frontend")
PRESSURE_FLAGS = (0, bus_msg.SPILLING, bus_msg.SPILL_FULL)


class Memory:
    """Needs from the node (`fe`): cfg, clients, control_all, `fe.scans.mark` and
    `fe.persistence.worker_reports` (the same poll carries their figures).
    Offers: cron, used_now, and the figures level / used / peak / excess."""

    def __init__(self, fe):
        self.fe = fe
        self.level = 0          # 0: <= 75% of maxmemory, 1: > 75%, 2: > 95%
        self.held_level = 0     # the same, of `held`
        self.used = 0           # bytes, last measured: every worker's data + our clients
        self.held = 0           # used + what the spilled jobs would add back in RAM
        self.peak = 0           # the largest `used` seen (INFO used_memory_peak)
        self.excess = None      # used - 95% of maxmemory; None: not measured yet / no limit
        self.polling = False
        self.again = False
        self.client_bytes = 0   # what the clients held at the last poll
        self.worker_used = []   # each worker's share of used_memory at the last poll
        self.pressure = 0       # spill: 0 none, 1 jobs on disk, 2 the disk refuses writes
        self.heap = HeapTrim()  # this process's freed heap back to the system

    def spill_limit(self):
        """[spill-threshold % of maxmemory less what the clients hold, every worker's
        last reported use]: each worker may use what the others leave of it, so the node
        spills when its total reaches the threshold, however its jobs are spread. None
        when the node does not spill."""
        cfg = self.fe.cfg
        if not cfg.spill or cfg.maxmemory <= 0:
            return None
        return [max(0, cfg.maxmemory // 100 * cfg.spill_threshold - self.client_bytes),
                self.worker_used]

    def tick(self):
        """Every ~100 ms (Node.cron): this process's freed heap back to the system, then
        the poll (which `measured` and `apply` also start again when the levels move)."""
        self.heap.cron()
        self.cron()

    def cron(self):
        """Push the last level to the workers and collect their memory use; `measured`
        computes the new level."""
        if self.polling:
            self.again = True   # the levels changed during a poll: one more right after it
            return
        self.again = False
        self.polling = True
        fe = self.fe
        noeviction = fe.cfg.maxmemory_policy == "noeviction"
        second = int(nodeclock.now())
        fe.control_all("memory", [self.level, self.excess, noeviction, self.spill_limit(),
                                  self.held_level],
                       lambda reports: self.measured(reports, second))

    def measured(self, reports, second):
        fe = self.fe
        self.polling = False
        fe.scans.mark(second, reports)
        fe.persistence.worker_reports(reports)   # AOF write errors (MISCONF), rewrites running
        # by worker index (spill_limit), 0 for a worker that did not answer (restarting)
        self.worker_used = [r[0] if type(r) is list else 0 for r in reports]
        used = self.used_now(self.worker_used)
        reports = [r for r in reports if type(r) is list]
        self.pressure = max([r[5] for r in reports] or [0])
        self.apply(used, used + sum(r[6] for r in reports))
        if self.again:
            self.cron()

    def apply(self, used, held):
        """The levels of `used` and `held` against maxmemory (read every time: CONFIG SET
        maxmemory); the workers hear of a change at once, not at the next tick."""
        maxmemory = self.fe.cfg.maxmemory
        if maxmemory <= 0:
            level, held_level, excess = 0, 0, None    # CONFIG SET maxmemory 0: no limit
        else:
            unit = maxmemory // 100           # upstream's integer math
            level = 2 if used > unit * 95 else 1 if used > unit * 75 else 0
            held_level = 2 if held > unit * 95 else 1 if held > unit * 75 else 0
            excess = used - unit * 95
        changed = (level, held_level) != (self.level, self.held_level)
        self.used, self.held, self.excess = used, held, excess
        self.level, self.held_level = level, held_level
        cluster = self.fe.relay.cluster
        if cluster is not None:
            cluster.set_pressure(PRESSURE_FLAGS[self.pressure]
                                 | (bus_msg.MEMORY_HIGH if held_level else 0))
        if changed:
            log.info("Memory level %d (%d counting spilled jobs): used %d bytes, %d with "
                     "spilled jobs, maxmemory %d", level, held_level, used, held, maxmemory)
            self.cron()

    def used_now(self, worker_shares):
        """used_memory (docs/memory.md): the workers' shares plus what this process holds
        for its clients."""
        self.client_bytes = memstat.client_bytes(self.fe.clients.values())
        used = self.client_bytes + sum(worker_shares)
        if used > self.peak:
            self.peak = used
        return used

    def maxmemory_changed(self):
        """CONFIG SET maxmemory: warn when already above it, and apply the levels now (from
        the last figures; the poll that follows measures again)."""
        cfg = self.fe.cfg
        if cfg.maxmemory and cfg.maxmemory < self.used:
            log.warning("WARNING: the new maxmemory value set via CONFIG SET is smaller than "
                        "the current memory usage. This will result in jobs eviction and/or "
                        "inability to accept new jobs depending on the maxmemory-policy.")
        self.apply(self.used, self.held)
        self.cron()
