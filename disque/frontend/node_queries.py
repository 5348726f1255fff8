"""This node's answers to the queries of the cluster-wide figures and the operations console
(docs/console.md): the same answer whether the question came from a local command, the
console, or another node over the bus (disque/frontend/cluster_queries.py).

A query is a kind and a list of msgpack-able arguments; its answer is msgpack-able too.
Commands run through an InternalClient (the node's own dispatch, so QLEN here is QLEN);
listings the commands do not give (a page of a queue with each job's age, a body search)
come from worker controls (disque/workers/queue_report.py). Actions change jobs and
queues; they are refused here unless `metrics-actions yes`, whoever asks (the console
checks the password, the token and the origin before it asks, docs/console.md).
"""
import heapq
import logging

from disque._fast.jobid import queue_worker
from disque.frontend.console_actions import ACTIONS, ConsoleAction
from disque.frontend.internal_client import CommandError, InternalClient, QueryError, pairs
from disque.metrics import views
from disque.contracts.queue_rows import merged_rows

log = logging.getLogger("disque.console")

PEEK_CLUSTER_MAX = 10000    # QPEEK ... CLUSTER: jobs per node at most


NAMES_MAX = 100000          # queue names a node sends for the cluster's count of queues
ROWS_MAX = 5000             # queue rows one query asks for
SEARCH_MAX = 1000           # jobs one search answers with


BYTES_LIST = "list of bytes"


def well_typed(args, types):
    if type(args) is not list or len(args) != len(types):
        return False
    for a, t in zip(args, types):
        if t is BYTES_LIST:
            if type(a) is not list or not all(type(x) is bytes for x in a):
                return False
        elif type(a) is not t and not (t is int and type(a) is bool):
            return False
    return True


def union_names(per_worker):
    """[names or None past NAMES_MAX, count] of the workers' queue_names answers."""
    names = set()
    for _, part in per_worker:
        if part is None or names is None:
            names = None
        else:
            names.update(part)
    if names is not None and len(names) <= NAMES_MAX:
        return [sorted(names), len(names)]
    return [None, len(names) if names is not None else max(c for c, _ in per_worker)]


class NodeQueries:
    """Needs from the node (`fe`): nworkers, new_reqid, pending, send_control, control_all,
    `fe.routing.queues_elsewhere`, the config (metrics-actions). Offers: answer(kind, args,
    done) for every kind of KINDS, and `run` (a command through the node's dispatch)."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        # kind -> (handler, the types of its arguments): a question from another node is
        # checked here before any of it reaches a worker
        self.kinds = {
            "qlen": (self.qlen, (bytes,)), "qstat": (self.qstat, (bytes,)),
            "qpeek": (self.qpeek, (bytes, int)), "node": (self.node, ()),
            "queues": (self.queues, (int, bytes)), "queue_rows": (self.queue_rows, (BYTES_LIST,)),
            "jobs": (self.jobs, (bytes, int, int, bool, int)), "show": (self.show, (bytes,)),
            "search": (self.search, (bytes, bytes, int, int)), "act": (self.act, (str, list, str)),
            "groups": (self.groups, (bytes, int)),
        }

    def answer(self, kind, args, done):
        """done(ok, result): result is the answer, or the error text when not ok."""
        entry = self.kinds.get(kind)
        if entry is None:
            done(False, "unknown query %r" % kind)
            return
        handler, types = entry
        if not well_typed(args, types):
            done(False, "bad arguments for query %r" % kind)
            return
        try:
            handler(done, *args)
        except (QueryError, TypeError, ValueError) as e:   # e.g. an action's arguments
            done(False, str(e))

    def run(self, argvs, done, who="internal"):
        """Commands in order through the node's own dispatch; done(replies)."""
        InternalClient(self.fe, who).run_all(argvs, done)

    def ask_workers(self, workers, name, arg, done, build):
        """A control to some workers; done(True, build(their answers)), or done(False, why)
        when a worker failed it (build never sees a worker's error)."""
        fe = self.fe
        results = []
        left = [len(workers)]

        def got(rep):
            results.append(rep[1])
            left[0] -= 1
            if left[0] == 0:
                failed = [r["error"] for r in results if type(r) is dict and "error" in r]
                if failed:
                    done(False, "a worker failed: %s" % failed[0])
                    return
                try:
                    value = build(results)
                except Exception as e:      # noqa: BLE001 - answered, never raised into the loop
                    log.exception("query %s: bad worker answers", name)
                    done(False, "internal error: %s" % e)
                    return
                done(True, value)

        for w in workers:
            reqid = fe.new_reqid(w)
            fe.pending[reqid] = got
            fe.send_control(w, reqid, name, arg)

    def queue_workers(self, queue):
        """The workers that may hold the queue: its slot's, and those holding its dead
        letters off their slot (disque/frontend/routing.py)."""
        w = queue_worker(queue, self.fe.nworkers)
        return [w] + [x for x in self.fe.routing.queues_elsewhere.get(queue, ()) if x != w]

    # ---- queue figures ----------------------------------------------------------------

    def qlen(self, done, queue):
        self.run([[b"qlen", queue]], lambda r: done(True, r[0]) if type(r[0]) is int
                 else done(False, str(r[0])))

    def qstat(self, done, queue):
        def got(r):
            reply = r[0]
            if isinstance(reply, CommandError):
                done(False, str(reply))
                return
            if reply is None:
                done(True, None)
                return
            stat = pairs(reply)
            # a dead-letter queue may live on several workers: QLEN sums them, QSTAT does not
            self.qlen(lambda ok, n: done(True, dict(stat, len=n) if ok else stat), queue)
        self.run([[b"qstat", queue]], got)

    def qpeek(self, done, queue, count):
        """The first (count > 0) or last jobs of the queue with their creation times."""
        if not -PEEK_CLUSTER_MAX <= count <= PEEK_CLUSTER_MAX:
            raise QueryError("QPEEK CLUSTER takes a count between -%d and %d"
                             % (PEEK_CLUSTER_MAX, PEEK_CLUSTER_MAX))
        self.page(done, queue, 0, abs(count), count < 0, -1, full=True)     # whole bodies

    def jobs(self, done, queue, start, count, newest_first, body_max):
        self.page(done, queue, start, count, newest_first, body_max)

    def page(self, done, queue, start, count, newest_first, body_max, full=False):
        workers = self.queue_workers(queue)
        if len(workers) == 1:
            arg = [queue, start, count, newest_first, body_max]
        else:
            arg = [queue, 0, start + count, newest_first, body_max]

        def build(parts):
            total = sum(p["len"] for p in parts)
            if len(parts) == 1:
                jobs = parts[0]["jobs"]
            else:
                key = (lambda j: (-j["ctime"], j["id"])) if newest_first else \
                    (lambda j: (j["ctime"], j["id"]))
                jobs = list(heapq.merge(*[p["jobs"] for p in parts], key=key))[start:start + count]
            return jobs if full else {"len": total, "jobs": jobs}
        self.ask_workers(workers, "jobs", arg, done, build)

    def search(self, done, queue, needle, limit, body_max):
        limit = max(0, min(limit, SEARCH_MAX))
        def build(parts):
            jobs = sorted((j for p in parts for j in p["jobs"]), key=lambda j: j["ctime"])
            return {"scanned": sum(p["scanned"] for p in parts),
                    "complete": all(p["complete"] for p in parts), "jobs": jobs[:limit]}
        self.ask_workers(self.queue_workers(queue), "search", [queue, needle, limit, body_max],
                         done, build)

    def groups(self, done, queue, limit):
        """The job groups of the queue this node is the home of, the largest first."""
        def build(parts):
            rows = sorted((g for p in parts for g in p["groups"]),
                          key=lambda g: (-g["jobs"], g["key"]))
            return {"count": sum(p["count"] for p in parts), "groups": rows[:max(0, limit)]}
        self.ask_workers(self.queue_workers(queue), "groups", [queue, limit], done, build)

    def all_workers(self):
        return list(range(self.fe.nworkers))

    def queues(self, done, limit, match):
        """The node's longest queues (name holding `match`), merged over its workers, and
        the names of all those queues (None past NAMES_MAX): {rows, count, names}."""
        limit = max(1, min(limit, ROWS_MAX))
        def names_then_rows(ok, names_count):
            if not ok:
                done(False, names_count)
                return
            names, count = names_count
            self.ask_workers(self.all_workers(), "queues", [limit, match or None], done,
                             lambda per: {"rows": merged_rows(per)[:limit], "count": count,
                                          "names": names})
        self.ask_workers(self.all_workers(), "queue_names", [match or None, NAMES_MAX],
                         names_then_rows, union_names)

    def queue_rows(self, done, names):
        """The rows of these queues on this node (those it has)."""
        self.ask_workers(self.all_workers(), "queue_rows", names[:ROWS_MAX], done, merged_rows)

    def node(self, done):
        self.ask_workers(self.all_workers(), "info", None, done, lambda workers: dict(
            views.node_view(self.fe, workers), spilling=any(
                (w.get("spill") or {}).get("spilled_jobs", 0) for w in workers)))

    def show(self, done, job_id):
        def got(r):
            reply = r[0]
            if isinstance(reply, CommandError):
                done(False, str(reply))
            else:
                done(True, pairs(reply) if reply is not None else None)
        self.run([[b"show", job_id]], got)

    # ---- actions ------------------------------------------------------------------------

    def act(self, done, action, args, who):
        if not self.cfg.metrics_actions:
            raise QueryError("actions are off on node %s (metrics-actions no)"
                             % self.fe.node_id.decode()[:8])
        if action not in ACTIONS:
            raise QueryError("unknown action %r" % action)
        ConsoleAction(self, action, args, who, done).start()
