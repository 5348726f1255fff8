"""INFO (SPEC 14): node totals from the front-end and every worker, plus a per-worker section.

Instantaneous metrics (ops/sec, input/output kbps) are sampled by the front-end cron every
100 ms and averaged over the last 16 samples, as upstream (`disque.frontend.stats`).

used_memory counts what the node holds for its data and clients (docs/memory.md); the
whole-process figure is used_memory_rss.
"""
import json
import os
import time


from disque import VERSION, memstat, statslog

DEFAULT_SECTIONS = ("server", "clients", "memory", "jobs", "queues", "persistence", "stats",
                    "cpu", "workers")
_RUN_ID = os.urandom(20).hex()
_UNAME = os.uname()     # not platform.uname(): platform is not a start's import


def human(n):
    if n < 1024:
        return "%dB" % n
    for unit in "KMGTP":
        n /= 1024.0
        if n < 1024 or unit == "P":
            return "%.2f%s" % (n, unit)


def _server(fe, workers):
    up = int(time.time() - fe.started)
    uname = _UNAME
    cfg = fe.cfg
    return [
        ("disque_version", VERSION), ("disque_git_sha1", "00000000"), ("disque_git_dirty", 0),
        ("disque_build_id", "python"), ("os", "%s %s %s" % (uname.sysname, uname.release, uname.machine)),
        ("arch_bits", 64), ("multiplexing_api", fe.loop_name), ("gcc_version", "0.0.0"),
        ("process_id", os.getpid()), ("run_id", _RUN_ID), ("tcp_port", cfg.port),
        ("uptime_in_seconds", up), ("uptime_in_days", up // 86400), ("hz", getattr(cfg, "hz", 10)),
        ("executable", fe.executable), ("config_file", getattr(cfg, "config_file", None) or ""),
        ("workers", fe.nworkers),
    ] + fe.handover.info_fields() + (fe.restarts.info_fields() if fe.restarts is not None else []) \
        + fe.tls_port.info_fields()


CLIENTS_FIELDS = ("connected_clients", "client_longest_output_list", "client_biggest_input_buf",
                  "blocked_clients")


def _clients_values(fe, workers):
    biggest_in = longest_out = 0
    for c in fe.clients.values():
        pending = c.parser.pending
        if pending > biggest_in:
            biggest_in = pending
        slots = c.slots
        if slots and len(slots) > longest_out:
            longest_out = len(slots)
    blocked = fe.getjobs.blocked_count
    for w in workers:
        blocked += w.get("blocked", 0)
    return (len(fe.clients), longest_out, biggest_in, blocked)


def _memory(fe, workers):
    rss_total = _self_rss() + sum(w.get("rss", 0) for w in workers)
    used = fe.memory.used_now(w.get("used_memory", 0) for w in workers)
    return [
        ("used_memory", used), ("used_memory_human", human(used)),
        ("used_memory_rss", rss_total), ("used_memory_peak", fe.memory.peak),
        ("used_memory_peak_human", human(fe.memory.peak)),
        # upstream's definition, rss / used: here mostly the interpreters' fixed footprint
        ("mem_fragmentation_ratio", "%.2f" % (rss_total / used if used else 0)),
        ("mem_allocator", "libc"),
    ] + _spill(fe, workers, used)


SPILL_SUMS = ("spilled_jobs", "spill_index_bytes", "spilled_job_bytes", "spill_segments",
              "spill_disk_bytes",
              "spill_jobs_written", "spill_jobs_read", "spill_bytes_written", "spill_bytes_read",
              "spill_writes_per_sec", "spill_reads_per_sec", "spill_faults", "spill_compactions",
              "spill_compacted_bytes", "spill_errors")


def _spill(fe, workers, used):
    """Jobs spilled to disk (docs/memory.md, "Spilling"), summed over the workers, and the
    memory levels the node acts on (as of the last memory poll): of used_memory, and of
    used_memory_with_spilled, which counts the spilled jobs as if they were in RAM
    ("Spilling and the memory levels")."""
    parts = [w["spill"] for w in workers if "spill" in w]
    cfg = fe.cfg
    failing = "; ".join(sorted({p["spill_failing"] for p in parts if p["spill_failing"]}))
    limit = cfg.maxmemory // 100 * cfg.spill_threshold if cfg.spill and cfg.maxmemory > 0 else 0
    sums = [(name, sum(p.get(name, 0) for p in parts)) for name in SPILL_SUMS]
    held = used + max(0, dict(sums)["spilled_job_bytes"] - dict(sums)["spill_index_bytes"])
    return ([("spill_enabled", int(bool(cfg.spill))), ("spill_threshold_bytes", limit)]
            + sums
            + [("spill_disk_ok", 0 if failing else 1), ("spill_disk_error", failing),
               ("used_memory_with_spilled", held), ("memory_level", fe.memory.level),
               ("memory_level_with_spilled", fe.memory.held_level)])


def _deadletter(fe, workers):
    """Jobs moved to a dead-letter queue, by the queue they came from (docs/job-features.md);
    only INFO deadletter shows it: the upstream sections keep their exact fields."""
    dead = {}
    for w in workers:
        for q, n in w.get("dead_lettered", {}).items():
            dead[q] = dead.get(q, 0) + n
    return [("dead_lettered_jobs", sum(dead.values()))] + [
        ("dead_lettered_%d" % i, "queue=%s,jobs=%d" % (q, dead[q])) for i, q in enumerate(sorted(dead))]


def _groups(fe, workers):
    """Job groups (docs/job-groups.md), by name only like deadletter: groups with jobs,
    the jobs in them, jobs held behind their head (counters: INFO stays O(1) with 100,000
    groups; QSTAT counts a queue's groups waiting on a delivered head)."""
    total = lambda key: sum(w.get(key, 0) for w in workers)     # noqa: E731
    return [("groups", total("groups")), ("group_jobs", total("group_jobs")),
            ("group_held_jobs", total("group_held"))]


def _cluster(fe, workers):
    """By name only (SPEC 14: no Cluster section in the default INFO): whether the bus is
    secured (docs/security.md), the job links, and the questions asked of and answered to
    other nodes (docs/commands.md, "Cluster-wide queue figures")."""
    cluster = fe.relay.cluster
    if cluster is None:
        return [("cluster_bus_secured", 0)]
    return cluster.bus_info_fields() + _job_links(cluster, workers) + [
        ("cluster_queries_" + k, v) for k, v in fe.cluster_queries.stats.items()]


def _job_links(cluster, workers):
    """Direct job links (docs/design.md): this node's ports, links up from its workers,
    job messages sent and received on them, those that went by the bus instead, connections
    refused (bad input, failed TLS handshakes), and messages that reached a worker that does
    not own them (dropped)."""
    links = [w["job_links"] for w in workers if "job_links" in w]
    total = lambda key: sum(link[key] for link in links)     # noqa: E731
    return [("cluster_job_links", "direct" if cluster.job_ports else "bus"),
            ("cluster_job_link_ports", ",".join(map(str, cluster.job_ports or ()))),
            # TLS with certificates derived from the cluster secret (a secured bus)
            ("cluster_job_links_tls",
             int(bool(cluster.job_ports) and cluster.transport.keys is not None)),
            ("cluster_job_links_up", total("out_up")),
            ("cluster_job_links_in", total("in")),
            ("cluster_job_messages_direct_sent", total("sent_msgs")),
            ("cluster_job_messages_direct_received", total("received_msgs")),
            ("cluster_job_frames_direct_sent", total("sent_frames")),
            ("cluster_job_frames_direct_received", total("received_frames")),
            ("cluster_job_messages_by_bus", total("relayed_msgs")),
            ("cluster_job_links_refused", total("refused")),
            ("cluster_job_messages_misrouted", total("misrouted"))]


def _jobs(fe, workers):
    return [("registered_jobs", sum(w.get("jobs", 0) for w in workers))]


def _queues(fe, workers):
    return [("registered_queues", sum(w.get("queues", 0) for w in workers))]


def _persistence(fe, workers):
    return fe.persistence.info_fields(workers)


STATS_FIELDS = ("total_connections_received", "total_commands_processed",
                "instantaneous_ops_per_sec", "total_net_input_bytes", "total_net_output_bytes",
                "instantaneous_input_kbps", "instantaneous_output_kbps", "rejected_connections",
                "latest_fork_usec")


def _stats_values(fe, workers):
    st = fe.connections.counters
    served = fe.handover
    return (st["total_connections_received"], fe.commands_processed + served.total("commands"),
            int(fe.stats.instantaneous("ops")), fe.net_input_bytes + served.total("net_in"),
            fe.net_output_bytes + served.total("net_out"),
            "%.2f" % (fe.stats.instantaneous("in") / 1024), "%.2f" % (fe.stats.instantaneous("out") / 1024),
            st["rejected_connections"], 0)


CPU_FIELDS = ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children")


def _cpu_values(fe, workers):
    cpu = os.times()            # this process (psutil's cpu_times reads /proc: slower)
    hit = _cpu_sums
    if hit[0] is not workers:
        hit[:] = [workers, sum(w.get("cpu_sys", 0) for w in workers),
                  sum(w.get("cpu_user", 0) for w in workers)]
    return ("%.2f" % (cpu.system + hit[1]), "%.2f" % (cpu.user + hit[2]), "0.00", "0.00")


_cpu_sums = [None, 0, 0]      # the workers' CPU times, summed once per snapshot


def _workers(fe, workers):
    lines = []
    for w in workers:
        lines.append(("worker%d" % w.get("index", 0),
                      "pid=%d,jobs=%d,queues=%d,queued=%d,blocked=%d,ops=%d,added=%d,delivered=%d,"
                      "acked=%d,nacked=%d,requeued=%d,expired=%d,rss=%d,used_memory=%d,cpu_user=%.2f,"
                      "cpu_sys=%.2f,tick_ms=%d,loop_turns=%d" % (
                          w["pid"], w["jobs"], w["queues"], w["queued"], w["blocked"], w["ops"],
                          w["added"], w["delivered"], w["acked"], w["nacked"], w["requeued"],
                          w["expired"], w["rss"], w["used_memory"], w["cpu_user"], w["cpu_sys"],
                          w.get("tick_ms", 10), w.get("loop_turns", 0))))
    return lines


def _commandstats(fe, workers):
    usec = fe.stats.command_usec(workers)
    stats = []
    calls = {name.decode(): n for name, n in fe.calls.items()}
    for name, n in fe.handover.calls().items():      # served by workers themselves
        calls[name] = calls.get(name, 0) + n
    for name, calls in sorted(calls.items()):
        total = usec.get(name, 0)
        stats.append(("cmdstat_" + name, "calls=%d,usec=%d,usec_per_call=%.2f" % (calls, total, total / calls)))
    return stats


def _workerstats(fe, workers):
    # schema-v2 stats records (disque/statslog.py), by name only: `disque-stats-collect` polls it
    cfg = fe.cfg
    now = time.time()
    addr = "%s:%d" % ((cfg.bind or ["127.0.0.1"])[0], cfg.node_port)
    return [("worker%d" % w.get("index", 0),
             json.dumps(statslog.line(now, fe.node_id.decode(), addr, w),
                        separators=(",", ":"), sort_keys=True))
            for w in workers]


def _fields(names, values_fn):
    """A section given by its field names and a function of its values: the builder of
    (field, value) pairs, and the same text rendered with one format operation."""
    template = "".join(["%s:%%s\r\n" % name for name in names])
    return (lambda fe, workers: list(zip(names, values_fn(fe, workers))),
            lambda fe, workers: template % values_fn(fe, workers))


_clients, _clients_text = _fields(CLIENTS_FIELDS, _clients_values)
_stats, _stats_text = _fields(STATS_FIELDS, _stats_values)
_cpu, _cpu_text = _fields(CPU_FIELDS, _cpu_values)
# sections that change with every call, rendered by one format operation each
FAST_TEXT = {"clients": _clients_text, "stats": _stats_text, "cpu": _cpu_text}

BUILDERS = {"server": _server, "clients": _clients, "memory": _memory, "jobs": _jobs,
            "queues": _queues, "persistence": _persistence, "stats": _stats, "cpu": _cpu,
            "workers": _workers, "commandstats": _commandstats, "workerstats": _workerstats,
            "deadletter": _deadletter, "groups": _groups, "cluster": _cluster}
# asked for by name, these are rendered from a live round trip to the workers
LIVE_SECTIONS = frozenset(("workers", "workerstats"))
TITLES = {name: "CPU" if name == "cpu" else name.capitalize() for name in BUILDERS}


def sections(fe, workers, names=None):
    """{section: [(field, value), ...]} for `names` (default: every section)."""
    return {name: BUILDERS[name](fe, workers) for name in (names or BUILDERS)}


def _self_rss():
    """This process' RSS, read at most every RSS_MAX_AGE_S (a read of /proc each time)."""
    now = time.monotonic()
    if now - _rss_cache[0] > RSS_MAX_AGE_S:
        _rss_cache[0] = now
        _rss_cache[1] = memstat.rss()
    return _rss_cache[1]


RSS_MAX_AGE_S = 0.1
_rss_cache = [-1e9, 0]


def _cache_key(name, fe, workers):
    """What a section's text depends on beyond `workers` (the snapshot list, compared by
    identity), or None when it must be rendered every time. CONFIG SET and the other
    commands that change the workers' figures replace the snapshot (info_snapshot.py)."""
    if name in _BY_SNAPSHOT:
        return 0
    if name == "server":
        # uptime and the connections' moves between front-end and workers
        return (int(time.time() - fe.started), fe.handover.moves)
    if name == "memory":
        # client buffers move without a snapshot change: at most 100 ms stale, as the poll
        return (_self_rss(), int(time.monotonic() * 10))
    if name == "persistence" and not fe.persistence.loading:     # loading_* fields move with time
        return fe.persistence.aof_enabled
    return None


_BY_SNAPSHOT = frozenset(("jobs", "queues", "workers", "workerstats"))


_section_cache = {}     # name -> (workers list, key, text)


def render(fe, workers, section="default"):
    """The INFO text as bytes (only the sections asked for are computed). A section that
    depends on nothing but the workers' snapshot (and a key, see _cache_key) is rendered
    once per snapshot: INFO is cheap enough to be called on every new connection."""
    if section == "default":
        names = DEFAULT_SECTIONS
    elif section in ("all", "everything"):
        names = DEFAULT_SECTIONS + ("commandstats",)
    elif section in BUILDERS:
        names = (section,)          # includes "workerstats", never part of default/all
    else:
        return b""
    chunks = []
    cache = _section_cache
    for name in names:
        key = _cache_key(name, fe, workers)
        if key is not None:
            hit = cache.get(name)
            if hit is not None and hit[0] is workers and hit[1] == key:
                chunks.append(hit[2])
                continue
        fast = FAST_TEXT.get(name)
        if fast is not None:
            body = fast(fe, workers)
        else:
            body = "".join(["%s:%s\r\n" % kv for kv in BUILDERS[name](fe, workers)])
        text = "# %s\r\n%s" % (TITLES[name], body)
        if key is not None:
            cache[name] = (workers, key, text)
        chunks.append(text)
    return "\r\n".join(chunks).encode()
