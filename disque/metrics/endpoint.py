"""The metrics port (`metrics-port`, docs/metrics.md): `/metrics` for Prometheus, the
dashboard at `/` and its JSON under `/api/`.

Every answer is built from the workers' "info" control replies (the figures of
`INFO workerstats`) and, for the queue list, their "queues" replies; requests that arrive
while the workers are being asked share the answer, so scrapes and dashboards cost the
workers one round per moment however many there are.
"""
import json
import logging
import os

from disque.listen import bind_tcp
from disque.metrics import prom, views
from disque.metrics.console import Console
from disque.metrics.http import HttpServer

log = logging.getLogger("disque.metrics")
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
        self.console = Console(fe)
        with open(DASHBOARD, "rb") as f:
            self.dashboard = f.read()

    def start(self, socks, ssl=None):
        self.fe.loop.run_until_complete(self.http.listen(socks, ssl))

    def close(self):
        self.http.close()

    # ---- requests -------------------------------------------------------------------

    def handle(self, req, respond):
        if not self.console.auth.may_read(req):
            respond(401, "text/plain", b"authentication required\n",
                    (("WWW-Authenticate", 'Basic realm="disque", charset="UTF-8"'),))
            return
        path = req.path
        if self.console.handles(path):
            self.console.handle(req, respond)
        elif req.method == "POST":
            respond(405, "text/plain", b"GET only\n", (("Allow", "GET, HEAD"),))
        elif path == "/metrics":
            self.info.get(None, self.answer(respond, lambda workers: (
                prom.CONTENT_TYPE, prom.render(views.node_figures(self.fe), workers))))
        elif path in ("/", "/index.html"):
            respond(200, "text/html; charset=utf-8", self.dashboard)
        elif path == "/api/node":
            self.info.get(None, self.answer(respond, lambda workers: json_body(views.node_view(self.fe, workers))))
        elif path == "/api/cluster":
            self.answer(respond, lambda _: json_body(views.cluster_view(self.fe)))(None)
        elif path == "/api/workers":
            self.info.get(None, self.answer(respond, lambda workers: json_body(views.workers_view(workers))))
        elif path == "/api/queues":
            self.queue_list(req, self.answer(respond, json_body))
        elif path == "/api/overview":
            def with_queues(queues):
                self.info.get(None, self.answer(respond, lambda workers: json_body({
                    "node": views.node_view(self.fe, workers), "cluster": views.cluster_view(self.fe),
                    "workers": views.workers_view(workers), "queues": queues})))
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
