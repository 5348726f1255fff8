"""Questions to every node of the cluster, answered within a deadline: `QLEN <queue>
CLUSTER`, `QSTAT <queue> CLUSTER`, `QPEEK <queue> <count> CLUSTER` (docs/commands.md), and
the operations console's cluster-wide views and actions (docs/console.md).

The node asks itself and every other node it can reach (not failing, not in handshake;
leaving nodes still hold jobs, so they are asked) with a QUERY bus message, and combines
what came back when all have answered or `cluster-query-timeout` ms have passed: a node
that is cut off costs the deadline, not the answer. Each node answers from its
NodeQueries part (disque/frontend/node_queries.py); a QUERY only comes from a node this
node knows, and on a secured cluster only from one that has the secret (docs/security.md).
"""
import logging

from disque._fast import resp
from disque.contracts import bus_messages as bus_msg
from disque.contracts.queue_rows import PAUSE_BITS, PAUSE_NAMES
from disque.replies import NOT_INTEGER, arity_error

log = logging.getLogger("disque.cluster")

NOT_ASKED = bus_msg.HANDSHAKE | bus_msg.PFAIL | bus_msg.FAIL_FLAG


class Fanout:
    """One question to several nodes: answers by node ID, and who was asked."""
    __slots__ = ("asked", "answers", "done", "timer", "qids")

    def __init__(self, asked, done):
        self.asked = asked
        self.qids = []
        self.answers = {}
        self.done = done
        self.timer = None


class ClusterQueries:
    """Needs from the node (`fe`): loop, node_id, `fe.relay.cluster` (the bus, None when
    the node has none), `fe.queries` (this node's answers), the configuration
    (cluster-query-timeout). Offers: ask_all, ask_node, on_bus (the bus's QUERY / ANSWER
    hook) and the CLUSTER forms of QLEN, QSTAT and QPEEK (front-end handlers)."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.next_qid = 0
        self.waiting = {}           # qid -> (node id asked, Fanout)
        # INFO cluster: questions sent to other nodes, their answers in time, answers that
        # came too late (or from another node than asked), and questions of others answered
        self.stats = {"asked": 0, "answered": 0, "late": 0, "served": 0}

    # ---- asking -------------------------------------------------------------------------

    def me(self):
        return self.fe.node_id.decode()

    def targets(self):
        cluster = self.fe.relay.cluster
        if cluster is None:
            return []
        return [n for n in cluster.others() if not n.flags & NOT_ASKED]

    def ask_all(self, kind, args, done):
        """done(answers, asked): answers {node id: (ok, result)} of the nodes that answered
        in time, asked the IDs of every node asked (this one first)."""
        others = self.targets()
        f = Fanout([self.me()] + [n.id for n in others], done)
        self.fe.queries.answer(kind, args, lambda ok, res: self.got(f, self.me(), ok, res))
        for n in others:
            self.send_query(n, kind, args, f)
        if len(f.answers) < len(f.asked):
            f.timer = self.fe.loop.call_later(self.cfg.cluster_query_timeout / 1000.0,
                                              self.expire, f)

    def ask_node(self, node_id, kind, args, done):
        """One node (this one or another): done(ok, result); not ok with a reason when it
        is unknown, unreachable or does not answer in time."""
        def one(answers, asked):
            if node_id in answers:
                done(*answers[node_id])
            else:
                done(False, "node %s did not answer within %d ms"
                     % (node_id[:8], self.cfg.cluster_query_timeout))
        if node_id == self.me():
            self.fe.queries.answer(kind, args, done)
            return
        cluster = self.fe.relay.cluster
        node = cluster.nodes.get(node_id) if cluster is not None else None
        if node is None or node.flags & NOT_ASKED:
            done(False, "node %s is unknown or unreachable" % node_id[:8])
            return
        f = Fanout([node_id], one)
        self.send_query(node, kind, args, f)
        f.timer = self.fe.loop.call_later(self.cfg.cluster_query_timeout / 1000.0, self.expire, f)

    def send_query(self, node, kind, args, f):
        self.next_qid += 1
        qid = self.next_qid
        self.waiting[qid] = (node.id, f)
        f.qids.append(qid)
        self.stats["asked"] += 1
        self.fe.relay.cluster.send(node, bus_msg.QUERY, bus_msg.Query.encode(qid, kind, args))

    def got(self, f, node_id, ok, result):
        if f.done is None or node_id in f.answers:
            return
        f.answers[node_id] = (ok, result)
        if len(f.answers) == len(f.asked):
            self.finish(f)

    def expire(self, f):
        f.timer = None
        self.finish(f)

    def finish(self, f):
        if f.done is None:
            return
        if f.timer is not None:
            f.timer.cancel()
            f.timer = None
        done, f.done = f.done, None
        for qid in f.qids:
            self.waiting.pop(qid, None)     # the late answers are dropped
        done(f.answers, f.asked)

    # ---- the bus ------------------------------------------------------------------------

    def on_bus(self, sender, msg):
        cluster = self.fe.relay.cluster
        if msg.type == bus_msg.QUERY:
            q = bus_msg.Query.decode(msg.payload)
            self.stats["served"] += 1

            def answer(ok, result):
                if cluster is self.fe.relay.cluster and sender.id in cluster.nodes:
                    cluster.send(sender, bus_msg.ANSWER, bus_msg.Answer.encode(q.qid, ok, result))
            self.fe.queries.answer(q.kind, q.args, answer)
        else:
            a = bus_msg.Answer.decode(msg.payload)
            entry = self.waiting.pop(a.qid, None)
            if entry is None or entry[0] != sender.id:
                self.stats["late"] += 1
                return
            self.stats["answered"] += 1
            self.got(entry[1], sender.id, a.ok, a.result)

    # ---- QLEN / QSTAT / QPEEK ... CLUSTER -------------------------------------------------

    @staticmethod
    def cluster_form(client, argv, words, name):
        """The CLUSTER form has exactly `words` words, the last CLUSTER; anything else with
        more words than the command takes gets the original's arity error."""
        if len(argv) == words and argv[-1].lower() == b"cluster":
            return True
        client.reply(arity_error(name))
        return False

    def gather(self, client, kind, args, combine):
        """Ask every node; reply combine(results of the nodes that answered, answered, asked)."""
        s = client.slot()

        def done(answers, asked):
            oks = [res for ok, res in answers.values() if ok]
            errors = [res for ok, res in answers.values() if not ok]
            if errors and not oks:
                s.fill(b"-ERR %s\r\n" % errors[0].encode(errors="replace").replace(b"\r\n", b" "))
            else:
                s.fill(combine(oks, len(oks), len(asked)))
            # filled from a bus answer, a timer or inside a flush of replies: nothing else
            # writes it out soon
            self.fe.loop.call_soon(self.fe.flush_replies)
        self.ask_all(kind, args, done)

    def cmd_qlen(self, client, argv):
        """QLEN <queue> CLUSTER: the sum of the lengths the nodes answered with."""
        if self.cluster_form(client, argv, 3, "qlen"):
            self.gather(client, "qlen", [argv[1]], lambda res, n, asked: b":%d\r\n" % sum(res))

    def cmd_qstat(self, client, argv):
        """QSTAT <queue> CLUSTER: QSTAT's fields over the nodes, plus nodes-answered and
        nodes-asked; null when no node that answered has the queue."""
        if self.cluster_form(client, argv, 3, "qstat"):
            self.gather(client, "qstat", [argv[1]], combine_qstat)

    def cmd_qpeek(self, client, argv):
        """QPEEK <queue> <count> CLUSTER: the oldest (count > 0) or newest jobs over the nodes."""
        if not self.cluster_form(client, argv, 4, "qpeek"):
            return
        count = resp.parse_int(argv[2])
        if count is None:
            client.reply(NOT_INTEGER)
            return
        self.gather(client, "qpeek", [argv[1], count],
                    lambda res, n, asked: encode_peek(merge_peek(res, count)))


def combine_qstat(stats, answered, asked):
    stats = [s for s in stats if s is not None]
    if not stats:
        return resp.NULL_ARRAY
    paused = 0
    for s in stats:
        paused |= PAUSE_BITS.get(s["pause"], 0)
    # job groups: each node counts the groups it is the home of (docs/job-groups.md), so
    # the sums count each group once; a queue without groups keeps the 24 elements
    grouped = [s for s in stats if "groups" in s]
    groups = [
        b"$6\r\ngroups\r\n:%d\r\n" % sum(s["groups"] for s in grouped),
        b"$14\r\ngroups-blocked\r\n:%d\r\n" % sum(s["groups-blocked"] for s in grouped),
        b"$4\r\nheld\r\n:%d\r\n" % sum(s["held"] for s in grouped),
    ] if grouped else []
    return b"".join([
        b"*%d\r\n$4\r\nname\r\n" % (24 + 2 * len(groups)), resp.bulk(stats[0]["name"]),
        b"$3\r\nlen\r\n:%d\r\n" % sum(s["len"] for s in stats),
        b"$3\r\nage\r\n:%d\r\n" % max(s["age"] for s in stats),
        b"$4\r\nidle\r\n:%d\r\n" % min(s["idle"] for s in stats),
        b"$7\r\nblocked\r\n:%d\r\n" % sum(s["blocked"] for s in stats),
        b"$11\r\nimport-from\r\n",
        resp.bulk_array(sorted({n for s in stats for n in s["import-from"]})),
        b"$11\r\nimport-rate\r\n:%d\r\n" % sum(s["import-rate"] for s in stats),
        b"$7\r\njobs-in\r\n:%d\r\n" % sum(s["jobs-in"] for s in stats),
        b"$8\r\njobs-out\r\n:%d\r\n" % sum(s["jobs-out"] for s in stats),
        b"$5\r\npause\r\n", resp.bulk(PAUSE_NAMES[paused]),
        b"$14\r\nnodes-answered\r\n:%d\r\n" % answered,
        b"$11\r\nnodes-asked\r\n:%d\r\n" % asked,
    ] + groups)


def merge_peek(per_node, count):
    """The jobs of every node in queue order (newest first when count < 0), a job queued on
    two nodes (after a partition) once."""
    seen = set()
    jobs = []
    for j in sorted((j for node in per_node for j in node), key=lambda j: (j["ctime"], j["id"]),
                    reverse=count < 0):
        if j["id"] not in seen:
            seen.add(j["id"])
            jobs.append(j)
    return jobs[:abs(count)]


def encode_peek(jobs):
    return b"*%d\r\n" % len(jobs) + b"".join(
        [resp.bulk_array([j["queue"], j["id"], j["body"]]) for j in jobs])
