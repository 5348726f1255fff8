"""The node's counters as INFO shows them (SPEC 14), and the stats log.

* instantaneous_ops_per_sec and the network rates: sampled every 100 ms and averaged over
  the last 16 samples, as upstream;
* INFO commandstats `usec`: the workers' execution time (minus a baseline taken at CONFIG
  RESETSTAT) plus the front-end's own commands;
* CONFIG RESETSTAT;
* `stats-log-file` / `stats-log-interval`: one schema-v2 line per worker per interval
  (docs/stats-schema.md).
"""
import collections
import logging
import time

from disque import replies
from disque import statslog

log = logging.getLogger("disque.frontend")

METRIC_SAMPLES = 16
METRIC_PERIOD = 0.1            # seconds between instantaneous-metric samples (SPEC 14)


class Stats:
    """Needs from the node (`fe`): cfg, node_id, `fe.connections.counters`, calls,
    commands_processed, net_input_bytes, net_output_bytes, control_all and
    `fe.local_dispatch.local_commands` (reset with the rest). Offers: cron, instantaneous,
    command_usec, local_usec (counted by the dispatch of front-end commands), reset."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.local_usec = collections.Counter()    # front-end commands, INFO commandstats
        self.worker_usec_base = {}                 # workers' usec at the last CONFIG RESETSTAT
        self.metrics = {}
        self.log = None                 # statslog.StatsLog while stats-log-file is set
        self.log_last = 0.0
        self.log_pending = False
        self.reset_metrics()

    # ---- instantaneous metrics -------------------------------------------------------------

    def reset_metrics(self):
        now = time.monotonic()
        self.metrics = {}
        for key in ("ops", "in", "out"):
            self.metrics[key] = [now, self.metric_value(key), [0.0] * METRIC_SAMPLES, 0]

    def metric_value(self, key):
        fe = self.fe
        served = fe.handover
        if key == "ops":
            return fe.commands_processed + served.total("commands")
        if key == "in":
            return fe.net_input_bytes + served.total("net_in")
        return fe.net_output_bytes + served.total("net_out")

    def instantaneous(self, key):
        """Mean of the last 16 per-second rates, sampled every 100 ms (SPEC 14)."""
        return sum(self.metrics[key][2]) / METRIC_SAMPLES

    def cron(self, mono):
        for key, m in self.metrics.items():
            elapsed = mono - m[0]
            if elapsed >= METRIC_PERIOD:
                value = self.metric_value(key)
                m[2][m[3]] = (value - m[1]) / elapsed
                m[3] = (m[3] + 1) % METRIC_SAMPLES
                m[0], m[1] = mono, value
        self.log_cron()

    # ---- commandstats and CONFIG RESETSTAT --------------------------------------------------

    def reset(self, client):
        """CONFIG RESETSTAT: counters, per-command stats (the workers' command times are
        kept as a baseline that INFO subtracts), instantaneous metrics."""
        fe = self.fe
        counters = fe.connections.counters
        for k in counters:
            counters[k] = 0
        fe.commands_processed = fe.net_input_bytes = fe.net_output_bytes = 0
        fe.local_dispatch.local_commands = 0   # with commands_processed: the INFO snapshot mark
        fe.calls.clear()
        fe.handover.reset()
        self.local_usec.clear()
        self.reset_metrics()
        s = client.slot()

        def done(workers):
            base = {}
            for w in workers:
                if isinstance(w, dict):
                    for k, v in w.get("command_usec", {}).items():
                        base[k] = base.get(k, 0) + v
            self.worker_usec_base = base
            s.fill(replies.OK)

        fe.control_all("info", None, done)

    def command_usec(self, workers):
        """INFO commandstats usec per command: the workers' execution time since the last
        CONFIG RESETSTAT plus the front-end's own commands."""
        usec = collections.Counter()
        for w in workers:
            if isinstance(w, dict):
                for k, v in w.get("command_usec", {}).items():
                    usec[k] += v
        for k, v in self.worker_usec_base.items():
            usec[k] = max(0, usec[k] - v)
        for k, v in self.local_usec.items():
            usec[k.decode() if isinstance(k, bytes) else k] += v
        return usec

    # ---- the stats log ---------------------------------------------------------------------

    def log_cron(self):
        """Both directives are read on every tick, so CONFIG SET turns the log on, off or
        elsewhere."""
        cfg = self.cfg
        path = cfg.stats_log_file
        if not path:
            self.log = None
            return
        path = cfg.resolve_path(path)
        now = time.time()               # the records' time; the interval is monotonic
        mono = time.monotonic()
        if self.log is None or self.log.path != path:
            self.log = statslog.StatsLog(path)
            self.log_last = float("-inf")
        if mono - self.log_last < cfg.stats_log_interval or self.log_pending:
            return
        self.log_last = mono
        self.log_pending = True
        log_file = self.log
        addr = "%s:%d" % ((cfg.bind or ["127.0.0.1"])[0], cfg.node_port)

        def write(workers):
            self.log_pending = False
            node = self.fe.node_id.decode()
            if not log_file.write([statslog.line(now, node, addr, w) for w in workers]):
                log.warning("Cannot write the stats log %s", log_file.path)

        self.fe.control_all("info", None, write)
