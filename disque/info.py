"""INFO (SPEC 14): node totals from the front-end and every worker, plus a per-worker section.

Instantaneous metrics (ops/sec, input/output kbps) are sampled by the front-end cron every
100 ms and averaged over the last 16 samples, as upstream (`disque.admin`).

used_memory is what the node holds for its data and clients (the figure maxmemory is held
against, disque.memstat and docs/memory.md); used_memory_rss is the RSS of the front-end
and every worker.
"""
import json
import os
import platform
import time

import psutil

from disque import VERSION, memstat, statslog

DEFAULT_SECTIONS = ("server", "clients", "memory", "jobs", "queues", "persistence", "stats",
                    "cpu", "workers")
_PROC = psutil.Process()
_RUN_ID = os.urandom(20).hex()


def human(n):
    if n < 1024:
        return "%dB" % n
    for unit in "KMGTP":
        n /= 1024.0
        if n < 1024 or unit == "P":
            return "%.2f%s" % (n, unit)


def sections(fe, workers):
    now = time.time()
    up = int(now - fe.started)
    uname = platform.uname()
    rss_total = memstat.rss() + sum(w.get("rss", 0) for w in workers)
    used = fe.memory_used(w.get("used_memory", 0) for w in workers)
    cpu = _PROC.cpu_times()
    cfg = fe.cfg
    biggest_in = max((c.parser.pending for c in fe.clients.values()), default=0)
    longest_out = max((len(c.slots) for c in fe.clients.values() if c.slots), default=0)
    blocked = sum(w.get("blocked", 0) for w in workers) + fe.multigets_blocked
    out = {}
    out["server"] = [
        ("disque_version", VERSION), ("disque_git_sha1", "00000000"), ("disque_git_dirty", 0),
        ("disque_build_id", "python"), ("os", "%s %s %s" % (uname.system, uname.release, uname.machine)),
        ("arch_bits", 64), ("multiplexing_api", fe.loop_name), ("gcc_version", "0.0.0"),
        ("process_id", os.getpid()), ("run_id", _RUN_ID), ("tcp_port", cfg.port),
        ("uptime_in_seconds", up), ("uptime_in_days", up // 86400), ("hz", getattr(cfg, "hz", 10)),
        ("executable", fe.executable), ("config_file", getattr(cfg, "config_file", None) or ""),
        ("workers", fe.nworkers),
    ] + (fe.restarts.info_fields() if fe.restarts is not None else [])
    out["clients"] = [
        ("connected_clients", len(fe.clients)), ("client_longest_output_list", longest_out),
        ("client_biggest_input_buf", biggest_in), ("blocked_clients", blocked),
    ]
    out["memory"] = [
        ("used_memory", used), ("used_memory_human", human(used)),
        ("used_memory_rss", rss_total), ("used_memory_peak", fe.mem_peak),
        ("used_memory_peak_human", human(fe.mem_peak)),
        # upstream's definition, rss / used: here mostly the interpreters' fixed footprint
        ("mem_fragmentation_ratio", "%.2f" % (rss_total / used if used else 0)),
        ("mem_allocator", "libc"),
    ]
    dead = {}
    for w in workers:
        for q, n in w.get("dead_lettered", {}).items():
            dead[q] = dead.get(q, 0) + n
    out["jobs"] = [("registered_jobs", sum(w.get("jobs", 0) for w in workers))]
    # jobs moved to a dead-letter queue, by the queue they came from (docs/job-features.md);
    # only INFO deadletter shows it: the upstream sections keep their exact fields
    out["deadletter"] = [("dead_lettered_jobs", sum(dead.values()))] + [
        ("dead_lettered_%d" % i, "queue=%s,jobs=%d" % (q, dead[q]))
        for i, q in enumerate(sorted(dead))]
    out["queues"] = [("registered_queues", sum(w.get("queues", 0) for w in workers))]
    out["persistence"] = fe.aof_info_fields(workers)     # disque.aof_front
    st = fe.stats
    out["stats"] = [
        ("total_connections_received", st["total_connections_received"]),
        ("total_commands_processed", fe.commands_processed),
        ("instantaneous_ops_per_sec", int(fe.instantaneous("ops"))),
        ("total_net_input_bytes", fe.net_input_bytes),
        ("total_net_output_bytes", fe.net_output_bytes),
        ("instantaneous_input_kbps", "%.2f" % (fe.instantaneous("in") / 1024)),
        ("instantaneous_output_kbps", "%.2f" % (fe.instantaneous("out") / 1024)),
        ("rejected_connections", st["rejected_connections"]), ("latest_fork_usec", 0),
    ]
    out["cpu"] = [
        ("used_cpu_sys", "%.2f" % (cpu.system + sum(w.get("cpu_sys", 0) for w in workers))),
        ("used_cpu_user", "%.2f" % (cpu.user + sum(w.get("cpu_user", 0) for w in workers))),
        ("used_cpu_sys_children", "0.00"), ("used_cpu_user_children", "0.00"),
    ]
    lines = []
    for w in workers:
        lines.append(("worker%d" % w.get("index", 0),
                      "pid=%d,jobs=%d,queues=%d,queued=%d,blocked=%d,ops=%d,added=%d,delivered=%d,"
                      "acked=%d,nacked=%d,requeued=%d,expired=%d,rss=%d,used_memory=%d,cpu_user=%.2f,"
                      "cpu_sys=%.2f" % (
                          w["pid"], w["jobs"], w["queues"], w["queued"], w["blocked"], w["ops"],
                          w["added"], w["delivered"], w["acked"], w["nacked"], w["requeued"],
                          w["expired"], w["rss"], w["used_memory"], w["cpu_user"], w["cpu_sys"])))
    out["workers"] = lines
    usec = fe.command_usec(workers)
    stats = []
    for name, calls in sorted(fe.calls.items()):
        name = name.decode()
        total = usec.get(name, 0)
        stats.append(("cmdstat_" + name, "calls=%d,usec=%d,usec_per_call=%.2f" % (calls, total, total / calls)))
    out["commandstats"] = stats
    # by name only (SPEC: no Cluster section in the default INFO): whether the bus is secured
    cluster = getattr(fe, "cluster", None)
    out["cluster"] = (cluster.bus_info_fields() if cluster is not None
                      else [("cluster_bus_secured", 0)])
    # schema-v2 stats records (disque/statslog.py), by name only: `disque-stats-collect` polls it
    addr = "%s:%d" % ((cfg.bind or ["127.0.0.1"])[0], cfg.port)
    out["workerstats"] = [("worker%d" % w.get("index", 0),
                           json.dumps(statslog.line(now, fe.node_id.decode(), addr, w),
                                      separators=(",", ":"), sort_keys=True))
                          for w in workers]
    return out


def render(fe, workers, section="default"):
    data = sections(fe, workers)
    if section == "default":
        names = DEFAULT_SECTIONS
    elif section in ("all", "everything"):
        names = DEFAULT_SECTIONS + ("commandstats",)
    elif section in data:
        names = (section,)          # includes "workerstats", never part of default/all
    else:
        return ""
    chunks = []
    for name in names:
        body = "".join("%s:%s\r\n" % (k, v) for k, v in data[name])
        title = "CPU" if name == "cpu" else name.capitalize()
        chunks.append("# %s\r\n%s" % (title, body))
    return "\r\n".join(chunks)
