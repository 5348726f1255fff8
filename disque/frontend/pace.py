"""The front-end's cron pace (docs/design.md, "The idle tick"): its timer ticks every
CRON_MS while anything may need it, and every QUIET_CRON_MS once the node has been quiet
for QUIET_AFTER_S: no client connected, no TLS port (its connections live in the workers,
out of the front-end's sight), no other node, no request waiting on a worker, no
cross-worker GETJOB deadline, no AOF being loaded, and `used_memory` unchanged. A new
connection brings the fast pace back at once (`wake`), and any change seen on a tick does.

The memory poll and the workers' watch ride on the same tick, so a quiet node wakes its
workers once a second too (disque/workers/idle.py lets them sleep as long)."""
import time

QUIET_CRON_MS = 1000
QUIET_AFTER_S = 1.0


class CronPace:
    """Needs the front-end (clients, pending, getjobs.deadlines, persistence.loading,
    memory.used, tls_port.enabled, relay.cluster) and the cron's PeriodicTimer.
    Offers: ticks (how many fast ticks the expiries just drained stand for), after_cron,
    wake."""

    def __init__(self, fe, timer, fast_ms):
        self.fe = fe
        self.timer = timer
        self.fast_ms = fast_ms
        self.busy_at = time.monotonic()
        self.used = None

    @property
    def quiet(self):
        return self.timer.interval_ms != self.fast_ms

    def ticks(self, expiries):
        return expiries * (self.timer.interval_ms // self.fast_ms)

    def wake(self):
        self.busy_at = time.monotonic()
        if self.quiet:
            self.timer.set_interval(self.fast_ms)

    def after_cron(self):
        if not self.may_rest():
            self.wake()
        elif not self.quiet and time.monotonic() - self.busy_at >= QUIET_AFTER_S:
            self.timer.set_interval(QUIET_CRON_MS)

    def may_rest(self):
        fe = self.fe
        used, self.used = self.used, fe.memory.used
        cluster = fe.relay.cluster
        return not (fe.clients or fe.pending or fe.getjobs.deadlines or fe.persistence.loading
                    or fe.tls_port.enabled or used != fe.memory.used
                    or (cluster is not None and len(cluster.nodes) > 1))
