"""`/metrics`: the Prometheus text exposition of the per-worker figures behind
`INFO workerstats` (disque/statslog.py), rendered by prometheus_client.

A scrape builds one `NodeCollector` (prometheus_client metric families) over the figures the
workers just sent: nothing is registered globally and nothing is updated on the command path.
docs/metrics.md has the table of names.

The text is written by `write_text`, a plain loop over the families' samples that gives the
same bytes as prometheus_client's `generate_latest` (a test holds them equal) in a third of
the time: the scrape runs in the front-end's event loop, where `generate_latest`'s per-sample
label validation cost 1.5-2 ms per scrape of a 2-worker node (docs/metrics.md has the
figures). DISQUE_METRICS_EXPOSITION=prometheus_client selects `generate_latest` instead.
"""
import os

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from disque import VERSION
from disque.metrics.figures import JOB_COUNTERS, active, counter_value  # noqa: F401
from disque.statslog import LATENCY_BOUNDS_US

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

JOB_GAUGES = (
    ("jobs", "disque_jobs", "Jobs the worker holds (any state)."),
    ("queued", "disque_jobs_queued", "Jobs waiting in a queue."),
    ("active", "disque_jobs_active", "Jobs delivered and not yet acked, or waiting for replication."),
    ("queues", "disque_queues", "Queues the worker holds."),
    ("blocked", "disque_blocked_clients", "Consumers blocked in GETJOB and producers waiting for copies."),
    ("groups", "disque_job_groups", "Job groups with jobs (docs/job-groups.md)."),
    ("group_held", "disque_jobs_held", "Jobs of a group held behind their group's head."),
)
WL = ("node", "worker")
HISTOGRAM_LE = [floatToGoString(b / 1e6) for b in LATENCY_BOUNDS_US] + ["+Inf"]


class NodeCollector:
    """Metric families of one node from `node` (front-end figures, see `node_figures`) and
    `workers` (the workers' "info" control replies)."""

    def __init__(self, node, workers):
        self.node = node
        self.workers = workers

    def collect(self):
        n = self.node
        nid = n["id"]
        info = GaugeMetricFamily("disque_node_info", "Constant 1, labelled with what the node is.",
                                 labels=("node", "addr", "version"))
        info.add_metric((nid, n["addr"], VERSION), 1)
        yield info
        for key, name, doc, kind in (
                ("uptime_s", "disque_uptime_seconds", "Seconds since the node started.", "g"),
                ("clients", "disque_connected_clients", "Client connections.", "g"),
                ("commands", "disque_commands_processed", "Commands the front-end processed.", "c"),
                ("connections", "disque_connections_received", "Connections accepted.", "c"),
                ("net_in", "disque_net_input_bytes", "Bytes read from clients.", "c"),
                ("net_out", "disque_net_output_bytes", "Bytes written to clients.", "c"),
                ("fe_rss", "disque_frontend_memory_rss_bytes", "Resident memory of the front-end.", "g"),
                ("cluster_known", "disque_cluster_known_nodes", "Nodes this node knows.", "g"),
                ("cluster_reachable", "disque_cluster_reachable_nodes",
                 "Other nodes this node reaches.", "g")):
            fam = family(kind, name, doc, ("node",))
            fam.add_metric((nid,), n[key])
            yield fam
        cpu = CounterMetricFamily("disque_frontend_cpu_seconds", "CPU time of the front-end.",
                                  labels=("node", "mode"))
        cpu.add_metric((nid, "user"), n["fe_cpu_user"])
        cpu.add_metric((nid, "system"), n["fe_cpu_sys"])
        yield cpu
        yield from self.worker_families(nid)

    def worker_families(self, nid):
        workers = self.workers
        for key, name, doc in JOB_COUNTERS:
            if key == "dead_lettered" and not any(key in w for w in workers):
                continue
            fam = CounterMetricFamily(name, doc, labels=WL)
            for w in workers:
                fam.add_metric((nid, str(w["index"])), counter_value(w, key))
            yield fam
        if any(isinstance(w.get("dead_lettered"), dict) and w["dead_lettered"] for w in workers):
            fam = CounterMetricFamily("disque_queue_dead_lettered",
                                      "Jobs moved to a dead-letter queue, by origin queue.",
                                      labels=WL + ("queue",))
            for w in workers:
                by_queue = w.get("dead_lettered")
                for queue, n in sorted(by_queue.items() if isinstance(by_queue, dict) else ()):
                    fam.add_metric((nid, str(w["index"]), queue), n)
            yield fam
        for key, name, doc in JOB_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=WL)
            for w in workers:
                fam.add_metric((nid, str(w["index"])), active(w) if key == "active" else w.get(key, 0))
            yield fam
        ops = CounterMetricFamily("disque_worker_operations", "Requests the worker served.", labels=WL)
        rss = GaugeMetricFamily("disque_memory_rss_bytes", "Resident memory of the worker.", labels=WL)
        data = GaugeMetricFamily("disque_memory_data_bytes", "Bytes of job data the worker holds.",
                                 labels=WL)
        cpu = CounterMetricFamily("disque_cpu_seconds", "CPU time of the worker.",
                                  labels=WL + ("mode",))
        up = GaugeMetricFamily("disque_worker_uptime_seconds", "Seconds since the worker started.",
                               labels=WL)
        hist = HistogramMetricFamily("disque_command_duration_seconds",
                                     "Service time of the commands a worker executed.", labels=WL)
        cmds = CounterMetricFamily("disque_commands", "Commands a worker executed, by name.",
                                   labels=WL + ("command",))
        bus = CounterMetricFamily("disque_bus_messages", "Cluster bus messages, by type.",
                                  labels=WL + ("type", "direction"))
        qlen = GaugeMetricFamily("disque_queue_length", "Jobs queued (the longest queues per worker).",
                                 labels=WL + ("queue",))
        qin = CounterMetricFamily("disque_queue_jobs_in", "Jobs queued into the queue.",
                                  labels=WL + ("queue",))
        qout = CounterMetricFamily("disque_queue_jobs_out", "Jobs delivered from the queue.",
                                   labels=WL + ("queue",))
        links_up = GaugeMetricFamily("disque_job_links_up",
                                     "Direct job links up from the worker to other nodes' workers.",
                                     labels=WL)
        link_msgs = CounterMetricFamily(
            "disque_job_link_messages", "Job messages to and from other nodes, by path: on the "
            "worker's direct job links, or by the bus for want of a link.",
            labels=WL + ("direction", "path"))
        for w in workers:
            lab = (nid, str(w["index"]))
            ops.add_metric(lab, w.get("ops", 0))
            rss.add_metric(lab, w.get("rss", 0))
            data.add_metric(lab, w.get("data_bytes", 0))
            cpu.add_metric(lab + ("user",), w.get("cpu_user", 0.0))
            cpu.add_metric(lab + ("system",), w.get("cpu_sys", 0.0))
            up.add_metric(lab, w.get("uptime_s", 0.0))
            counts = w.get("latency_counts") or [0] * len(HISTOGRAM_LE)
            running, buckets = 0, []
            for le, c in zip(HISTOGRAM_LE, counts):
                running += c
                buckets.append((le, running))
            total_us = sum(w.get("command_usec", {}).values())
            hist.add_metric(lab, buckets, total_us / 1e6)
            for cmd, calls in sorted(w.get("commands", {}).items()):
                cmds.add_metric(lab + (cmd,), calls)
            for direction in ("in", "out"):
                for mtype, count in sorted(w.get("bus_" + direction, {}).items()):
                    bus.add_metric(lab + (mtype, direction), count)
            links = w.get("job_links")
            if links is not None:
                links_up.add_metric(lab, links["out_up"])
                link_msgs.add_metric(lab + ("out", "direct"), links["sent_msgs"])
                link_msgs.add_metric(lab + ("in", "direct"), links["received_msgs"])
                link_msgs.add_metric(lab + ("out", "bus"), links["relayed_msgs"])
            for q in w.get("top_queues", []):
                ql = lab + (q["queue"],)
                qlen.add_metric(ql, q["len"])
                qin.add_metric(ql, q["jobs_in"])
                qout.add_metric(ql, q["jobs_out"])
        yield from (ops, rss, data, cpu, up, hist, cmds, bus, qlen, qin, qout, links_up, link_msgs)
        yield from spill_families(workers, nid)


SPILL_METRICS = (
    ("spilled_jobs", "disque_spilled_jobs", "Jobs held on the spill disk, not in RAM.", "g"),
    ("spill_index_bytes", "disque_spill_index_bytes", "RAM of the index of spilled jobs.", "g"),
    ("spilled_job_bytes", "disque_spilled_job_bytes",
     "RAM the spilled jobs would take if loaded back.", "g"),
    ("spill_disk_bytes", "disque_spill_disk_bytes", "Bytes of the worker's spill segments.", "g"),
    ("spill_jobs_written", "disque_spill_jobs_written", "Jobs written to the spill disk.", "c"),
    ("spill_jobs_read", "disque_spill_jobs_read", "Jobs read back from the spill disk.", "c"),
    ("spill_bytes_written", "disque_spill_written_bytes", "Bytes written to the spill disk.", "c"),
    ("spill_bytes_read", "disque_spill_read_bytes", "Bytes read from the spill disk.", "c"),
    ("spill_compactions", "disque_spill_compactions", "Spill segments compacted.", "c"),
    ("spill_errors", "disque_spill_errors", "Spill disk write or read errors.", "c"),
)


def family(kind, name, doc, labels):
    """A gauge ("g") or counter ("c") family, as the tables of this module name them."""
    return (GaugeMetricFamily if kind == "g" else CounterMetricFamily)(name, doc, labels=labels)


def spill_families(workers, nid):
    """Spilling (docs/memory.md): rates are the counters' rate() in Prometheus."""
    for key, name, doc, kind in SPILL_METRICS:
        fam = family(kind, name, doc, WL)
        for w in workers:
            fam.add_metric((nid, str(w["index"])), w.get("spill", {}).get(key, 0))
        yield fam
    ok = GaugeMetricFamily("disque_spill_disk_ok", "1 while the spill disk takes writes.", labels=WL)
    for w in workers:
        ok.add_metric((nid, str(w["index"])), 0 if w.get("spill", {}).get("spill_failing") else 1)
    yield ok


def _escape_label(value):
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def write_text(collector):
    """The text exposition format 0.0.4 of the collector's families, as generate_latest
    writes it for counters, gauges and histograms without _created samples."""
    out = []
    for fam in collector.collect():
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out.append("# HELP %s %s\n# TYPE %s %s\n" % (
            name, fam.documentation.replace("\\", r"\\").replace("\n", r"\n"), name, fam.type))
        for s in fam.samples:
            if s.labels:
                labels = ",".join('%s="%s"' % (k, _escape_label(v)) for k, v in sorted(s.labels.items()))
                out.append("%s{%s} %s\n" % (s.name, labels, floatToGoString(s.value)))
            else:
                out.append("%s %s\n" % (s.name, floatToGoString(s.value)))
    return "".join(out).encode()


def render_with_prometheus_client(collector):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


_RENDER = (render_with_prometheus_client
           if os.environ.get("DISQUE_METRICS_EXPOSITION") == "prometheus_client" else write_text)


def render(node, workers):
    return _RENDER(NodeCollector(node, workers))
