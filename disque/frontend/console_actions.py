"""The operations console's actions, run on the node that holds the jobs (docs/console.md):
each is made of the node's own commands (through an InternalClient, so they behave as
from redis-cli), and each is logged with who asked, what, which jobs and the result.

  enqueue  [ids]           ENQUEUE: queue the jobs again now
  nack     [ids]           NACK: give the jobs back (their nack counter grows)
  delete   [ids]           ACKJOB: the job is removed on every node holding a copy (DELJOB
                           would remove this node's copy only; another copy would queue
                           the job again after its RETRY)
  retry    [ids]           a dead-lettered job goes back to the queue it came from: ADDJOB
                           of its body and options there (a new ID, counters from zero),
                           then ACKJOB of the dead one; nothing is acknowledged unless the
                           ADDJOB succeeded. Only a node where the job is queued in its
                           dead-letter queue acts: asked of every node, the job is retried
                           once, not once per copy.
  pause    [queue, mode]   PAUSE <queue> <none|in|out|all> BCAST (every node)
  retry_all / delete_all [queue]   retry / delete every job queued in the queue here
"""
import logging

from disque.contracts.queue_rows import PAUSE_BITS
from disque.frontend.internal_client import CommandError, QueryError, pairs

log = logging.getLogger("disque.console")

ACTIONS = ("enqueue", "nack", "delete", "retry", "pause", "retry_all", "delete_all")
BULK_MAX = 100000           # jobs one action handles on one node
ID_CHUNK = 500              # IDs per ENQUEUE / NACK / ACKJOB command
ADDJOB_TIMEOUT_MS = b"5000"  # a retried job waits this long for its copies
LOGGED_IDS = 20
COMMAND_OF = {"enqueue": b"enqueue", "nack": b"nack", "delete": b"ackjob"}


def ids_text(ids):
    shown = b" ".join(ids[:LOGGED_IDS]).decode(errors="replace")
    return shown + (" (+%d more)" % (len(ids) - LOGGED_IDS) if len(ids) > LOGGED_IDS else "")


def readd_command(origin, show):
    """ADDJOB of a dead-lettered job (its SHOW) to the queue it came from."""
    argv = [b"addjob", origin, show["body"], ADDJOB_TIMEOUT_MS,
            b"REPLICATE", b"%d" % show["repl"], b"RETRY", b"%d" % show["retry"],
            b"TTL", b"%d" % max(1, show["ttl"])]
    if show.get("backoff"):
        argv += [b"BACKOFF", b"%d" % show["backoff"]]
    if show.get("max-deliveries"):
        argv += [b"MAXDELIVERIES", b"%d" % show["max-deliveries"]]
        if show.get("deadletter") and show["deadletter"] != origin + b":dead":
            argv += [b"DEADLETTER", show["deadletter"]]
    return argv


class ConsoleAction:
    """One action on this node; `done(ok, result)` once, with a result dict."""

    def __init__(self, queries, action, args, who, done):
        self.queries = queries
        self.action = action
        self.args = args
        self.who = who
        self.done = done
        self.node = queries.fe.node_id.decode()[:8]
        self.errors = []
        self.target = ""

    def start(self):
        a = self.action
        if a in ("retry_all", "delete_all"):
            (queue,) = self.args
            self.target = "queue %s" % queue.decode(errors="replace")
            q = self.queries
            q.ask_workers(q.queue_workers(queue), "queued_ids", [queue, BULK_MAX],
                          self.got_ids, lambda parts: [i for p in parts for i in p])
        elif a == "pause":
            queue, mode = self.args
            if mode.lower() not in PAUSE_BITS:
                raise QueryError("pause takes none, in, out or all")
            self.target = "queue %s" % queue.decode(errors="replace")
            self.run([[b"pause", queue, mode, b"bcast"]], self.paused)
        else:
            (ids,) = self.args
            if not isinstance(ids, list) or not all(type(i) is bytes for i in ids):
                raise QueryError("job IDs expected")
            self.on_ids(ids[:BULK_MAX])

    def got_ids(self, ok, ids):
        if ok:
            self.on_ids(ids)
        else:
            self.done(False, ids)

    def run(self, argvs, done):
        self.queries.run(argvs, done, who=self.who)

    def on_ids(self, ids):
        self.ids = ids
        if not self.target:
            self.target = ids_text(ids)
        elif ids:
            self.target += ": " + ids_text(ids)
        if self.action in ("retry", "retry_all"):
            self.retry(ids)
        else:
            cmd = COMMAND_OF["delete" if self.action == "delete_all" else self.action]
            chunks = [[cmd] + ids[i:i + ID_CHUNK] for i in range(0, len(ids), ID_CHUNK)]
            self.run(chunks, lambda replies: self.finish(
                {"jobs": len(ids), "done": sum(self.count(r) for r in replies)}))

    def count(self, reply):
        if isinstance(reply, CommandError):
            self.errors.append(str(reply))
            return 0
        return reply if type(reply) is int else 0

    def paused(self, replies):
        reply = replies[0]
        if isinstance(reply, CommandError):
            self.errors.append(str(reply))
            self.finish({"state": None})
        else:
            self.finish({"state": reply.decode()})

    # ---- retry: back to the queue a dead-lettered job came from -----------------------

    def retry(self, ids):
        self.moved = {}
        self.run([[b"show", i] for i in ids], lambda shows: self.readd(ids, shows))

    def readd(self, ids, shows):
        adds, old = [], []
        for jid, show in zip(ids, shows):
            if show is None or isinstance(show, CommandError):
                continue
            s = pairs(show)
            origin = s.get("dead-lettered-from")
            if s.get("state") != b"queued":
                continue        # a copy: the node where the job is queued retries it
            if origin:
                adds.append(readd_command(origin, s))
                old.append(jid)
            else:
                self.errors.append("%s: not dead-lettered (requeue it instead)"
                                   % jid.decode(errors="replace"))
        self.run(adds, lambda replies: self.readded(old, replies))

    def readded(self, old, replies):
        acks = []
        for jid, reply in zip(old, replies):
            if isinstance(reply, CommandError):
                self.errors.append("%s: %s" % (jid.decode(errors="replace"), reply))
            else:
                self.moved[jid.decode()] = reply.decode()
                acks.append(jid)
        chunks = [[b"ackjob"] + acks[i:i + ID_CHUNK] for i in range(0, len(acks), ID_CHUNK)]
        self.run(chunks, lambda _: self.finish({
            "jobs": len(self.ids), "done": len(self.moved),
            "requeued_as": {k: v for k, v in list(self.moved.items())[:LOGGED_IDS]}}))

    def finish(self, result):
        result = dict(result, node=self.node, action=self.action, errors=self.errors[:10])
        log.info("Console action by %s on node %s: %s %s -> %s%s", self.who, self.node,
                 self.action, self.target,
                 ", ".join("%s=%s" % (k, result[k]) for k in ("jobs", "done", "state")
                           if k in result),
                 ("; errors: " + "; ".join(self.errors[:3])) if self.errors else "")
        self.done(True, result)
