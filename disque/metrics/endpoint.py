"""The metrics port (`metrics-port`, docs/metrics.md): `/metrics` for Prometheus, the
dashboard at `/` and its JSON under `/api/`.

Every answer is built from the workers' "info" control replies (the figures of
`INFO workerstats`) and, for the queue list, their "queues" replies; requests that arrive
while the workers are being asked share the answer, so scrapes and dashboards cost the
workers one round per moment however many there are.
"""
import base64
import binascii
import hmac
import json
import logging
import os
import time

import psutil

from disque import VERSION
from disque.listen import bind_tcp
from disque.metrics import prom
from disque.metrics.http import HttpServer

log = logging.getLogger("disque.metrics")
_PROC = psutil.Process()
DASHBOARD = os.path.join(os.path.dirname(__file__), "dashboard.html")
QUEUES_DEFAULT, QUEUES_MAX = 50, 1000
JSON_TYPE = "application/json"


def json_body(obj):
    return JSON_TYPE, json.dumps(obj, separators=(",", ":")).encode()


def listen_sockets(cfg):
    """Bind the metrics port on every `bind` address (startup fails fast when it is busy)."""
    return bind_tcp(cfg.bind or ["127.0.0.1"], cfg.metrics_port, 128, "the metrics listening socket")


class Coalesced:
    """One control round to all workers at a time per argument; callers asking for the same
    while it runs share its answer."""

    def __init__(self, fe, name):
        self.fe = fe
        self.name = name
        self.waiting = {}           # arg -> callbacks of the round in flight

    def get(self, arg, done):
        if arg in self.waiting:
            self.waiting[arg].append(done)
            return
        self.waiting[arg] = [done]

        def got(results):
            for cb in self.waiting.pop(arg):
                cb(results)

        self.fe.control_all(self.name, arg, got)


class MetricsEndpoint:
    def __init__(self, fe):
        self.fe = fe
        self.http = HttpServer(fe.loop, self.handle)
        self.info = Coalesced(fe, "info")
        self.queues = Coalesced(fe, "queues")
        with open(DASHBOARD, "rb") as f:
            self.dashboard = f.read()

    def start(self, socks):
        self.fe.loop.run_until_complete(self.http.listen(socks))

    def close(self):
        self.http.close()

    # ---- requests -------------------------------------------------------------------

    def authorized(self, req):
        cfg = self.fe.cfg
        if not cfg.requirepass or not cfg.metrics_auth:
            return True
        scheme, _, cred = req.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user_pass = base64.b64decode(cred.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        password = user_pass.partition(b":")[2]
        return hmac.compare_digest(password, cfg.requirepass.encode("utf-8", "surrogateescape"))

    def handle(self, req, respond):
        if not self.authorized(req):
            respond(401, "text/plain", b"authentication required\n",
                    (("WWW-Authenticate", 'Basic realm="disque", charset="UTF-8"'),))
            return
        path = req.path
        if path == "/metrics":
            self.info.get(None, self.answer(respond, lambda workers: (
                prom.CONTENT_TYPE, prom.render(self.node_figures(), workers))))
        elif path in ("/", "/index.html"):
            respond(200, "text/html; charset=utf-8", self.dashboard)
        elif path == "/api/node":
            self.info.get(None, self.answer(respond, lambda workers: json_body(self.node_view(workers))))
        elif path == "/api/cluster":
            self.answer(respond, lambda _: json_body(self.cluster_view()))(None)
        elif path == "/api/workers":
            self.info.get(None, self.answer(respond, lambda workers: json_body(self.workers_view(workers))))
        elif path == "/api/queues":
            self.queue_list(req, self.answer(respond, json_body))
        elif path == "/api/overview":
            def with_queues(queues):
                self.info.get(None, self.answer(respond, lambda workers: json_body({
                    "node": self.node_view(workers), "cluster": self.cluster_view(),
                    "workers": self.workers_view(workers), "queues": queues})))
            self.queue_list(req, with_queues)
        else:
            respond(404, "text/plain", b"not found\n")

    @staticmethod
    def answer(respond, build):
        """A callback for the workers' figures: respond 200 with build(figures) -> (content
        type, body), or 500; an error never reaches the front-end's reply path."""
        def done(figures):
            try:
                ctype, body = build(figures)
            except Exception:
                log.exception("metrics endpoint: error building an answer")
                respond(500, "text/plain", b"internal error\n")
                return
            respond(200, ctype, body)
        return done

    def queue_list(self, req, done):
        try:
            limit = max(1, min(QUEUES_MAX, int(req.query.get("limit", QUEUES_DEFAULT))))
        except ValueError:
            limit = QUEUES_DEFAULT

        def got(per_worker):
            rows = [dict(q, worker=w) for w, qs in enumerate(per_worker) for q in qs]
            rows.sort(key=lambda q: (-q["len"], q["queue"]))
            done(rows[:limit])

        self.queues.get(limit, got)

    # ---- views --------------------------------------------------------------------------

    def addr(self):
        cfg = self.fe.cfg
        return "%s:%d" % ((cfg.bind or ["127.0.0.1"])[0], cfg.port)

    def node_figures(self):
        """Front-end figures for prom.NodeCollector."""
        fe = self.fe
        mem = _PROC.memory_info()
        cpu = _PROC.cpu_times()
        cluster = fe.relay.cluster
        return {
            "id": fe.node_id.decode(), "addr": self.addr(), "uptime_s": time.time() - fe.started,
            "clients": len(fe.clients), "commands": fe.commands_processed,
            "connections": fe.connections.counters["total_connections_received"],
            "net_in": fe.net_input_bytes, "net_out": fe.net_output_bytes, "fe_rss": mem.rss,
            "fe_cpu_user": cpu.user, "fe_cpu_sys": cpu.system,
            "cluster_known": len(cluster.nodes) if cluster is not None else 1,
            "cluster_reachable": len(cluster.reachable()) if cluster is not None else 0,
        }

    def node_view(self, workers):
        n = self.node_figures()
        return {
            "id": n["id"], "addr": n["addr"], "version": VERSION, "ts": time.time(),
            "uptime_s": round(n["uptime_s"], 3), "workers": len(workers),
            "clients": n["clients"], "commands_processed": n["commands"],
            "loading": bool(self.fe.persistence.loading),
            "jobs": sum(w.get("jobs", 0) for w in workers),
            "queued": sum(w.get("queued", 0) for w in workers),
            "queues": sum(w.get("queues", 0) for w in workers),
            "blocked": sum(w.get("blocked", 0) for w in workers),
            "rss": n["fe_rss"] + sum(w.get("rss", 0) for w in workers),
            "cpu_user": round(n["fe_cpu_user"] + sum(w.get("cpu_user", 0) for w in workers), 3),
            "cpu_sys": round(n["fe_cpu_sys"] + sum(w.get("cpu_sys", 0) for w in workers), 3),
            **{k: sum(prom.counter_value(w, k) for w in workers) for k, _, _ in prom.JOB_COUNTERS},
        }

    def cluster_view(self):
        cluster = self.fe.relay.cluster
        if cluster is None:
            return {"size": 1, "nodes": []}
        me = cluster.myself
        nodes = []
        for n in cluster.nodes.values():
            flags = n.flag_names()
            if n.failing:
                state = "fail" if "fail" in flags.split(",") else "pfail"
            elif "handshake" in flags or "leaving" in flags:
                state = flags.split(",")[-1]
            else:
                state = "ok" if (n is me or n.linked) else "disconnected"
            nodes.append({"id": n.id, "addr": "%s:%d" % (n.ip, n.port), "flags": flags,
                          "state": state, "myself": n is me})
        nodes.sort(key=lambda n: (not n["myself"], n["addr"]))
        return {"size": cluster.size, "reachable": len(cluster.reachable()), "nodes": nodes}

    @staticmethod
    def workers_view(workers):
        keys = ("pid", "ops", "jobs", "queued", "queues", "blocked", "rss", "data_bytes",
                "cpu_user", "cpu_sys", "uptime_s")
        return [dict({k: w.get(k, 0) for k in keys},
                     **{k: prom.counter_value(w, k) for k, _, _ in prom.JOB_COUNTERS},
                     worker=w["index"], active=prom.active(w))
                for w in workers]
