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
from disque.workers.queue_report import merge_row

log = logging.getLogger("disque.console")

PEEK_CLUSTER_MAX = 10000    # QPEEK ... CLUSTER: jobs per node at most


NAMES_MAX = 100000          # queue names a node sends for the cluster's count of queues
ROWS_MAX = 5000             # queue rows one query asks for


def merged_rows(per_part):
    """Queue rows of several workers (or nodes) summed by name, the longest first."""
    rows = {}
    for part in per_part:
        for q in part:
            row = rows.get(q["queue"])
            if row is None:
                rows[q["queue"]] = dict(q)
            else:
                merge_row(row, q)
    return sorted(rows.values(), key=lambda q: (-q["len"], q["queue"]))


class NodeQueries:
    """Needs from the node (`fe`): nworkers, new_reqid, pending, send_control, control_all,
    `fe.routing.queues_elsewhere`, the config (metrics-actions). Offers: answer(kind, args,
    done) for every kind of KINDS, and `run` (a command through the node's dispatch)."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.kinds = {"qlen": self.qlen, "qstat": self.qstat, "qpeek": self.qpeek,
                      "node": self.node, "queues": self.queues, "jobs": self.jobs,
                      "show": self.show, "search": self.search, "act": self.act,
                      "queue_rows": self.queue_rows}

    def answer(self, kind, args, done):
        """done(ok, result): result is the answer, or the error text when not ok."""
        handler = self.kinds.get(kind)
        if handler is None:
            done(False, "unknown query %r" % kind)
            return
        try:
            handler(done, *args)
        except (QueryError, TypeError, ValueError) as e:
            done(False, str(e))

    def run(self, argvs, done, who="internal"):
        """Commands in order through the node's own dispatch; done(replies)."""
        InternalClient(self.fe, who).run_all(argvs, done)

    def ask_workers(self, workers, name, arg, done):
        """A control to some workers; done(list of their answers)."""
        fe = self.fe
        results = []
        left = [len(workers)]

        def got(rep):
            results.append(rep[1])
            left[0] -= 1
            if left[0] == 0:
                done(results)

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
        self.page(done, queue, 0, abs(count), count < 0, 1 << 30, full=True)

    def jobs(self, done, queue, start, count, newest_first, body_max):
        self.page(done, queue, start, count, newest_first, body_max)

    def page(self, done, queue, start, count, newest_first, body_max, full=False):
        workers = self.queue_workers(queue)
        if len(workers) == 1:
            arg = [queue, start, count, bool(newest_first), body_max]
        else:
            arg = [queue, 0, start + count, bool(newest_first), body_max]

        def got(parts):
            total = sum(p["len"] for p in parts)
            if len(parts) == 1:
                jobs = parts[0]["jobs"]
            else:
                key = (lambda j: (-j["ctime"], j["id"])) if newest_first else \
                    (lambda j: (j["ctime"], j["id"]))
                jobs = list(heapq.merge(*[p["jobs"] for p in parts], key=key))[start:start + count]
            done(True, jobs if full else {"len": total, "jobs": jobs})
        self.ask_workers(workers, "jobs", arg, got)

    def search(self, done, queue, needle, limit, body_max):
        def got(parts):
            jobs = sorted((j for p in parts for j in p["jobs"]), key=lambda j: j["ctime"])
            done(True, {"scanned": sum(p["scanned"] for p in parts),
                        "complete": all(p["complete"] for p in parts), "jobs": jobs[:limit]})
        self.ask_workers(self.queue_workers(queue), "search", [queue, needle, limit, body_max], got)

    def queues(self, done, limit, match):
        """The node's longest queues (name holding `match`), merged over its workers, and
        the names of all those queues (None past NAMES_MAX): {rows, count, names}."""
        def got_names(per_worker):
            names = set()
            for count, part in per_worker:
                if part is None or names is None:
                    names = None
                else:
                    names.update(part)
            count = len(names) if names is not None else max(c for c, _ in per_worker)
            self.fe.control_all("queues", [limit, match or None], lambda per: done(True, {
                "rows": merged_rows(per)[:limit], "count": count,
                "names": sorted(names) if names is not None and len(names) <= NAMES_MAX else None}))
        self.fe.control_all("queue_names", [match or None, NAMES_MAX], got_names)

    def queue_rows(self, done, names):
        """The rows of these queues on this node (those it has)."""
        self.fe.control_all("queue_rows", names[:ROWS_MAX],
                            lambda per: done(True, merged_rows(per)))

    def node(self, done):
        self.fe.control_all("info", None, lambda workers: done(True, dict(
            views.node_view(self.fe, workers), spilling=any(
                (w.get("spill") or {}).get("spilled_jobs", 0) for w in workers))))

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
