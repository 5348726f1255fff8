"""A node's figures as the metrics port and the console show them, built from the
front-end and the workers' "info" control replies: one place for the dashboard's JSON,
the Prometheus node collector's input and the console's cluster page (a node answers the
others' "node" query with `node_view`, disque/frontend/node_queries.py)."""
import os
import time

from disque import VERSION, memstat
from disque.metrics import figures


def addr(fe):
    cfg = fe.cfg
    return "%s:%d" % ((cfg.bind or ["127.0.0.1"])[0], cfg.node_port)


def node_figures(fe):
    """Front-end figures for prom.NodeCollector (disque/metrics/prom.py)."""
    cpu = os.times()            # this process: user and system seconds
    cluster = fe.relay.cluster
    return {
        "id": fe.node_id.decode(), "addr": addr(fe), "uptime_s": time.time() - fe.started,
        "clients": len(fe.clients), "commands": fe.commands_processed,
        "connections": fe.connections.counters["total_connections_received"],
        "net_in": fe.net_input_bytes, "net_out": fe.net_output_bytes, "fe_rss": memstat.rss(),
        "fe_cpu_user": cpu.user, "fe_cpu_sys": cpu.system,
        "cluster_known": len(cluster.nodes) if cluster is not None else 1,
        "cluster_reachable": len(cluster.reachable()) if cluster is not None else 0,
    }


def node_view(fe, workers):
    n = node_figures(fe)
    return {
        "id": n["id"], "addr": n["addr"], "version": VERSION, "ts": time.time(),
        "uptime_s": round(n["uptime_s"], 3), "workers": len(workers),
        "clients": n["clients"], "commands_processed": n["commands"],
        "loading": bool(fe.persistence.loading),
        "jobs": sum(w.get("jobs", 0) for w in workers),
        "queued": sum(w.get("queued", 0) for w in workers),
        "queues": sum(w.get("queues", 0) for w in workers),
        "blocked": sum(w.get("blocked", 0) for w in workers),
        "spilled": sum((w.get("spill") or {}).get("spilled_jobs", 0) for w in workers),
        "used_memory": sum(w.get("used_memory", 0) for w in workers),
        "rss": n["fe_rss"] + sum(w.get("rss", 0) for w in workers),
        "cpu_user": round(n["fe_cpu_user"] + sum(w.get("cpu_user", 0) for w in workers), 3),
        "cpu_sys": round(n["fe_cpu_sys"] + sum(w.get("cpu_sys", 0) for w in workers), 3),
        **{k: sum(figures.counter_value(w, k) for w in workers) for k, _, _ in figures.JOB_COUNTERS},
    }


def node_state(cluster, n):
    flags = n.flag_names()
    if n.failing:
        return "fail" if "fail" in flags.split(",") else "pfail"
    if "handshake" in flags or "leaving" in flags:
        return flags.split(",")[-1]
    return "ok" if (n is cluster.myself or n.linked) else "disconnected"


def cluster_view(fe):
    cluster = fe.relay.cluster
    if cluster is None:
        return {"size": 1, "nodes": []}
    me = cluster.myself
    nodes = [{"id": n.id, "addr": "%s:%d" % (n.ip, n.port), "flags": n.flag_names(),
              "state": node_state(cluster, n), "myself": n is me}
             for n in cluster.nodes.values()]
    nodes.sort(key=lambda n: (not n["myself"], n["addr"]))
    return {"size": cluster.size, "reachable": len(cluster.reachable()), "nodes": nodes}


def workers_view(workers):
    keys = ("pid", "ops", "jobs", "queued", "queues", "blocked", "rss", "data_bytes",
            "cpu_user", "cpu_sys", "uptime_s")
    return [dict({k: w.get(k, 0) for k in keys},
                 **{k: figures.counter_value(w, k) for k, _, _ in figures.JOB_COUNTERS},
                 worker=w["index"], active=figures.active(w))
            for w in workers]
