"""The operations console on the metrics port (docs/console.md): the page and its JSON,
for the whole cluster from any node.

  GET  /console                         the page (console.html, .css, and console.js with the
                                        modules it imports: console-lib, -views, -queue)
  GET  /api/console/session             {token, actions, node}; sets the session cookie
  GET  /api/console/cluster             every node: state and figures (each node answers)
  GET  /api/console/queues?match=&limit=      queues summed over the nodes
  GET  /api/console/queue?name=&start=&count=&newest=   a page of a queue's jobs
  GET  /api/console/job?id=             one job's SHOW, from the node that holds it
  GET  /api/console/search?queue=&text=&limit=    jobs whose body holds the text
  POST /api/console/action              {action, ids | queue [, mode] [, node]}

Every view is a cluster query (disque/frontend/cluster_queries.py): it answers with what
the nodes said within `cluster-query-timeout` and says how many were asked and answered.
Bodies travel as text (UTF-8, undecodable bytes as \\xNN), cut to a size with the size
given; the page puts them in the document as text, never as HTML.
"""
import json
import logging
import os

from disque.metrics import views
from disque.metrics.console_auth import ConsoleAuth
from disque.contracts.queue_rows import PAUSE_BITS, merge_row, merged_rows

log = logging.getLogger("disque.console")

HERE = os.path.dirname(__file__)
ASSETS = {"/console": ("console.html", "text/html; charset=utf-8"),
          "/console.js": ("console.js", "text/javascript; charset=utf-8"),
          "/console-lib.js": ("console-lib.js", "text/javascript; charset=utf-8"),
          "/console-views.js": ("console-views.js", "text/javascript; charset=utf-8"),
          "/console-queue.js": ("console-queue.js", "text/javascript; charset=utf-8"),
          "/console.css": ("console.css", "text/css; charset=utf-8")}
# the page runs only its own script file: an injected <script> or handler never runs
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
               "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
LIST_BODY = 200             # body bytes of a job in a list
SHOW_BODY = 65536           # body bytes of one job shown whole
PAGE_MAX = 500
QUEUES_MAX = 1000
SEARCH_MAX = 200
GROUPS_SHOWN = 200          # job groups of a queue listed at most
IDS_MAX = 100000
JOB_ACTIONS = ("enqueue", "nack", "delete", "retry")
QUEUE_ACTIONS = ("retry_all", "delete_all")
JSON_TYPE = "application/json"
# which copy of a job the job view shows: the queued one, else an active one
HOLDER_RANK = {b"queued": 0, b"active": 1, b"wait-repl": 2}


def text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value


def jsonable(obj):
    if isinstance(obj, dict):
        return {text(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return text(obj)


def json_body(obj):
    return JSON_TYPE, json.dumps(jsonable(obj), separators=(",", ":")).encode()


def queue_name(req):
    """The queue a view asks about (`name=`, required)."""
    name = req.query.get("name", "").encode()
    if not name:
        raise BadInput("name= is required")
    return name


def int_arg(query, name, default, low, high):
    try:
        return max(low, min(high, int(query.get(name, default))))
    except ValueError:
        return default


class BadInput(Exception):
    pass


class Console:
    def __init__(self, fe):
        self.fe = fe
        self.auth = ConsoleAuth(fe.cfg, fe.node_id.decode())
        self.assets = {}
        for path, (name, ctype) in ASSETS.items():
            with open(os.path.join(HERE, name), "rb") as f:
                self.assets[path] = (ctype, f.read())
        self.gets = {"/api/console/session": self.session, "/api/console/cluster": self.cluster,
                     "/api/console/queues": self.queues, "/api/console/queue": self.queue,
                     "/api/console/job": self.job, "/api/console/search": self.search,
                     "/api/console/groups": self.groups}

    @property
    def queries(self):
        return self.fe.cluster_queries

    def handles(self, path):
        return path in self.assets or path in self.gets or path == "/api/console/action"

    def handle(self, req, respond):
        """A request for one of our paths, already allowed to read."""
        path = req.path
        if path == "/api/console/action":
            if req.method != "POST":
                respond(405, "text/plain", b"actions take POST\n", (("Allow", "POST"),))
            else:
                self.action(req, respond)
            return
        if req.method == "POST":
            respond(405, "text/plain", b"GET only\n", (("Allow", "GET, HEAD"),))
            return
        if path in self.assets:
            ctype, body = self.assets[path]
            respond(200, ctype, body, (("Content-Security-Policy", PAGE_POLICY),))
            return
        try:
            self.gets[path](req, lambda obj, headers=(): respond(200, *json_body(obj), headers))
        except BadInput as e:
            respond(400, "text/plain", (str(e) + "\n").encode())

    # ---- views --------------------------------------------------------------------------

    def session(self, req, reply):
        session, token = self.auth.new_session()
        reply({"token": token, "actions": self.auth.actions_possible(),
               "node": self.fe.node_id.decode()}, (self.auth.cookie_header(session, req.secure),))

    @staticmethod
    def asked(answers, asked):
        return {"nodes_asked": len(asked), "nodes_answered": len(answers)}

    def cluster(self, req, reply):
        def done(answers, asked):
            known = {n["id"]: n for n in views.cluster_view(self.fe)["nodes"]}
            if not known:           # a node without a bus
                known = {self.fe.node_id.decode(): {"id": self.fe.node_id.decode(),
                                                    "addr": views.addr(self.fe), "state": "ok",
                                                    "flags": "myself", "myself": True}}
            nodes = []
            for node_id, node in known.items():
                ok, res = answers.get(node_id, (False, None))
                nodes.append(dict(node, answered=node_id in answers,
                                  figures=res if ok else None))
            reply(dict(self.asked(answers, asked), nodes=nodes))
        self.queries.ask_all("node", [], done)

    def queues(self, req, reply):
        """Two rounds: every node's longest queues name the candidates; then every node
        gives its rows of those (and of their dead-letter queues), so each figure is the sum
        over all the nodes that answered, not only over those where the queue was long."""
        limit = int_arg(req.query, "limit", 200, 1, QUEUES_MAX)
        match = req.query.get("match", "").encode()

        def candidates(answers, asked):
            tops, names, counts = [], set(), []
            for ok, res in answers.values():
                if ok:
                    tops.append(res["rows"])
                    counts.append(res["count"])
                    if names is not None and res["names"] is not None:
                        names.update(res["names"])
                    else:
                        names = None
            chosen = [q["queue"] for q in merged_rows(tops)[:limit]]
            total = len(names) if names is not None else max(counts, default=0)
            wanted = chosen + [n + ":dead" for n in chosen if not n.endswith(":dead")]
            self.queries.ask_all("queue_rows", [[n.encode() for n in wanted]],
                                 lambda a, k: rows(a, k, chosen, total, names is not None))

        def rows(answers, asked, chosen, total, exact):
            by_name = {}
            for node_id, (ok, res) in answers.items():
                for q in res if ok else ():
                    row = by_name.get(q["queue"])
                    if row is None:
                        row = by_name[q["queue"]] = dict(q, nodes=0, paused_on=[])
                    else:
                        merge_row(row, q)
                    row["nodes"] += 1
                    if q["paused"] != "none":
                        row["paused_on"].append([node_id, q["paused"]])
            out = []
            for name in chosen:
                row = by_name.get(name)
                if row is None:
                    continue        # emptied and dropped between the two rounds
                dead = by_name.get(name + ":dead")
                row["dead_letters"] = dead["len"] if dead is not None else 0
                row["paused"] = row["paused_on"][0][1] if row["paused_on"] else "none"
                out.append(row)
            out.sort(key=lambda q: (-q["len"], q["queue"]))
            reply(dict(self.asked(answers, asked), queues=out, total=total, total_exact=exact))
        self.queries.ask_all("queues", [limit, match], candidates)

    def queue(self, req, reply):
        name = queue_name(req)
        start = int_arg(req.query, "start", 0, 0, 10000)
        count = int_arg(req.query, "count", 50, 1, PAGE_MAX)
        newest = req.query.get("newest", "0") == "1"

        def done(answers, asked):
            jobs, total = [], 0
            for node_id, (ok, res) in answers.items():
                if ok:
                    total += res["len"]
                    jobs.extend(dict(j, node=node_id) for j in res["jobs"])
            jobs.sort(key=lambda j: (j["ctime"], j["id"]), reverse=newest)
            reply(dict(self.asked(answers, asked), queue=name, len=total, start=start,
                       jobs=jobs[start:start + count]))
        self.queries.ask_all("jobs", [name, 0, start + count, newest, LIST_BODY], done)

    def groups(self, req, reply):
        """A queue's job groups over the nodes, each counted by its home (docs/job-groups.md):
        key, jobs, the job it waits on and that job's state, the largest groups first."""
        name = queue_name(req)
        limit = int_arg(req.query, "limit", 50, 1, GROUPS_SHOWN)

        def done(answers, asked):
            rows, count = [], 0
            for node_id, (ok, res) in answers.items():
                if ok:
                    count += res["count"]
                    rows.extend(dict(g, node=node_id) for g in res["groups"])
            rows.sort(key=lambda g: (-g["jobs"], g["key"]))
            reply(dict(self.asked(answers, asked), queue=name, count=count, groups=rows[:limit]))
        self.queries.ask_all("groups", [name, limit], done)

    def job(self, req, reply):
        # an ID pasted into a URL by hand has its + read as a space; IDs hold no spaces
        job_id = req.query.get("id", "").strip().replace(" ", "+").encode()
        if not job_id:
            raise BadInput("id= is required")
        prefix = job_id[2:10].decode(errors="replace") if job_id[:2] == b"D-" else ""
        owner = next((n["id"] for n in views.cluster_view(self.fe)["nodes"]
                      if prefix and n["id"].startswith(prefix)), None)

        def found(node_id, show):
            body = show.get("body") or b""
            reply({"found": True, "node": node_id, "routed_to": owner,
                   "job": dict(show, body=body[:SHOW_BODY], body_size=len(body))})

        def everywhere(answers, asked):
            held = [(HOLDER_RANK.get(show.get("state"), 9), node_id != owner, node_id, show)
                    for node_id, (ok, show) in answers.items() if ok and show is not None]
            if held:
                found(*min(held, key=lambda h: h[:3])[2:])
            else:
                reply(dict(self.asked(answers, asked), found=False, routed_to=owner))

        def from_owner(ok, show):
            if ok and show is not None and show.get("state") == b"queued":
                found(owner, show)
            else:   # the creator lost it, is down, or holds a copy not queued: ask everyone
                self.queries.ask_all("show", [job_id], everywhere)

        if owner is not None:
            self.queries.ask_node(owner, "show", [job_id], from_owner)
        else:
            self.queries.ask_all("show", [job_id], everywhere)

    def search(self, req, reply):
        queue = req.query.get("queue", "").encode()
        needle = req.query.get("text", "").encode()
        if not queue or not needle:
            raise BadInput("queue= and text= are required")
        limit = int_arg(req.query, "limit", 50, 1, SEARCH_MAX)

        def done(answers, asked):
            jobs, scanned, complete = [], 0, True
            for node_id, (ok, res) in answers.items():
                if ok:
                    scanned += res["scanned"]
                    complete = complete and res["complete"]
                    jobs.extend(dict(j, node=node_id) for j in res["jobs"])
            jobs.sort(key=lambda j: (j["ctime"], j["id"]))
            reply(dict(self.asked(answers, asked), scanned=scanned, complete=complete,
                       jobs=jobs[:limit]))
        self.queries.ask_all("search", [queue, needle, limit, LIST_BODY], done)

    # ---- actions ------------------------------------------------------------------------

    def action(self, req, respond):
        refused = self.auth.refuse_action(req)
        who = "%s (console of node %s)" % (req.remote, self.fe.node_id.decode()[:8])
        if refused is not None:
            status, why = refused
            log.warning("Console action refused for %s: %s", who, why)
            respond(status, "text/plain", (why + "\n").encode())
            return
        try:
            act, target, node = self.parse_action(req.body)
        except BadInput as e:
            respond(400, "text/plain", (str(e) + "\n").encode())
            return

        def single(ok, res):
            if ok:
                respond(200, *json_body({"results": [res]}))
            else:
                respond(502, *json_body({"error": res}))

        def every(answers, asked):
            results = [res for ok, res in answers.values() if ok]
            errors = [res for ok, res in answers.values() if not ok]
            respond(200 if results else 502, *json_body(dict(
                self.asked(answers, asked), results=results, errors=errors)))

        args = ["act", [act, target, who]]
        if act == "pause" or node == self.fe.node_id.decode():
            self.queries.ask_node(self.fe.node_id.decode(), *args, single)
        elif node:
            self.queries.ask_node(node, *args, single)
        else:
            self.queries.ask_all(*args, every)

    @staticmethod
    def parse_action(body):
        """(action, its arguments, node or None) from the JSON body."""
        try:
            msg = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise BadInput("the body is not JSON")
        if not isinstance(msg, dict):
            raise BadInput("the body must be a JSON object")
        act = msg.get("action")
        node = msg.get("node")
        if node is not None and not (isinstance(node, str) and len(node) == 40):
            raise BadInput("node must be a node ID")
        if act in JOB_ACTIONS:
            ids = msg.get("ids")
            if (not isinstance(ids, list) or not ids or len(ids) > IDS_MAX
                    or not all(isinstance(i, str) and 0 < len(i) <= 64 for i in ids)):
                raise BadInput("ids must be a list of job IDs")
            if node is None and act in ("enqueue", "nack"):
                # every node holding a copy would queue it: one node must be named
                raise BadInput("enqueue and nack need the node that holds the jobs (node)")
            return act, [[i.encode() for i in ids]], node
        queue = msg.get("queue")
        if not isinstance(queue, str) or not queue:
            raise BadInput("queue is required")
        if act in QUEUE_ACTIONS:
            return act, [queue.encode()], None
        if act == "pause":
            mode = msg.get("mode")
            if not isinstance(mode, str) or mode.encode() not in PAUSE_BITS:
                raise BadInput("mode must be none, in, out or all")
            return act, [queue.encode(), mode.encode()], None
        raise BadInput("unknown action")
