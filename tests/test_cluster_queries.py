"""QLEN / QSTAT / QPEEK <queue> ... CLUSTER (docs/commands.md, "Cluster-wide queue
figures"): a node answers for every node it reaches, within cluster-query-timeout, and says
how many nodes were asked and answered. Real nodes; the partition test cuts a node off with
iptables in the fault harness's network namespaces (faults/netns.py)."""
import os
import shutil
import sys
import threading
import time

import pytest
import redis

from support.waits import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

pytestmark = pytest.mark.cluster

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"),
    reason="network namespaces need root, iproute2 and iptables")


def qstat(node, queue):
    reply = node.client().execute_command("QSTAT", queue, "CLUSTER")
    return None if reply is None else {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def node_qlens(cluster, queue):
    return [n.client().execute_command("QLEN", queue) for n in cluster.nodes]


def test_qlen_cluster_is_the_sum_of_the_nodes_under_load(start_cluster):
    c = start_cluster(3, workers=2)
    stop = threading.Event()
    errors = []

    def produce(node):
        r = node.client()
        try:
            while not stop.is_set():
                r.execute_command("ADDJOB", "load", b"x" * 100, 0, "REPLICATE", 2)
        except Exception as e:          # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(n,)) for n in c.nodes for _ in range(2)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sum(node_qlens(c, "load")) > 500, timeout=20,
                   message="the producers queued nothing")
        # producers only: lengths grow, so the cluster figure lies between the sums
        # read just before and just after it, on every node asked
        for i in range(10):
            asker = c.nodes[i % 3].client()
            before = sum(node_qlens(c, "load"))
            total = asker.execute_command("QLEN", "load", "CLUSTER")
            after = sum(node_qlens(c, "load"))
            assert before <= total <= after, (before, total, after)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    final = sum(node_qlens(c, "load"))
    for n in c.nodes:
        assert n.client().execute_command("QLEN", "load", "CLUSTER") == final
    stat = qstat(c.nodes[1], "load")
    assert stat["len"] == final
    assert stat["nodes-answered"] == 3 and stat["nodes-asked"] == 3
    assert stat["jobs-in"] == final and stat["jobs-out"] == 0


def test_qstat_and_qpeek_cluster_combine_the_nodes(start_cluster):
    c = start_cluster(3, workers=2)
    ids = []
    for i, node in enumerate(c.nodes):
        r = node.client()
        for k in range(3):
            ids.append(r.execute_command("ADDJOB", "pq", b"n%d-%d" % (i, k), 0, "REPLICATE", 1))
            time.sleep(0.002)       # distinct creation milliseconds: a known global order
    r0 = c.nodes[0].client()
    assert r0.execute_command("QLEN", "pq") == 3
    assert r0.execute_command("QLEN", "pq", "CLUSTER") == 9
    oldest = r0.execute_command("QPEEK", "pq", 4, "CLUSTER")
    assert [j[1].decode() for j in oldest] == [i.decode() for i in ids[:4]]
    assert [j[2] for j in oldest] == [b"n0-0", b"n0-1", b"n0-2", b"n1-0"]
    newest = c.nodes[2].client().execute_command("QPEEK", "pq", -2, "CLUSTER")
    assert [j[1] for j in newest] == [ids[8], ids[7]]
    assert r0.execute_command("QPEEK", "pq", 0, "CLUSTER") == []
    # PAUSE on one node only: QSTAT CLUSTER says the queue is paused somewhere
    c.nodes[1].client().execute_command("PAUSE", "pq", "in")
    stat = qstat(c.nodes[0], "pq")
    assert stat["len"] == 9 and stat["pause"] == b"in"
    assert stat["name"] == b"pq" and stat["nodes-answered"] == 3
    assert qstat(c.nodes[0], "no-such-queue") is None
    assert r0.execute_command("QLEN", "no-such-queue", "CLUSTER") == 0
    # deeper than a console page, and bodies whole however large
    big = b"B" * (2 << 20)
    p = r0.pipeline(transaction=False)
    for i in range(700):
        p.execute_command("ADDJOB", "deep", big if i == 0 else b"d%d" % i, 0, "REPLICATE", 1)
    p.execute()
    deep = c.nodes[1].client().execute_command("QPEEK", "deep", 700, "CLUSTER")
    assert len(deep) == 700 and deep[0][2] == big and deep[699][2] == b"d699"


def test_cluster_forms_check_their_words_like_the_original(start_cluster):
    c = start_cluster(2, workers=2)
    r = c.nodes[0].client()
    for argv, name in ((("QLEN", "q", "nope"), "qlen"), (("QLEN", "q", "CLUSTER", "x"), "qlen"),
                       (("QSTAT", "q", "x"), "qstat"), (("QPEEK", "q", 1, "x"), "qpeek"),
                       (("QPEEK", "q", 1, "CLUSTER", "x"), "qpeek")):
        with pytest.raises(redis.ResponseError, match="wrong number of arguments for '%s'" % name):
            r.execute_command(*argv)
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("QPEEK", "q", "many", "CLUSTER")
    with pytest.raises(redis.ResponseError, match="between"):
        r.execute_command("QPEEK", "q", 10 ** 6, "CLUSTER")
    assert r.execute_command("qlen", "q", "cluster") == 0       # any case


def test_a_node_alone_answers_for_itself(start_server):
    srv = start_server(workers=2)
    r = srv.client()
    r.execute_command("ADDJOB", "solo", b"a", 0)
    assert r.execute_command("QLEN", "solo", "CLUSTER") == 1
    stat = r.execute_command("QSTAT", "solo", "CLUSTER")
    assert stat[-4:] == [b"nodes-answered", 1, b"nodes-asked", 1]


@needs_root
@pytest.mark.slow
def test_a_partitioned_node_costs_the_deadline_not_the_answer(tmp_path):
    from faults import netns
    from faults.nodes import Node, cli, join

    netns.setup(3)
    nodes = [Node(i, str(tmp_path), workers=2, aof=None) for i in range(3)]
    try:
        for n in nodes:
            n.start()
        assert all(n.wait_ready() for n in nodes)
        assert join(nodes)
        for i in range(3):
            for _ in range(i + 2):          # 2, 3 and 4 jobs
                assert cli(i, "ADDJOB", "part", "body", 0, "REPLICATE", 1).startswith("D-")
        wait_until(lambda: cli(0, "QLEN", "part", "CLUSTER") == "9", timeout=10,
                   message="cluster-wide QLEN never reached 9")
        netns.partition(3, [[0, 1], [2]])   # the clients still reach every node
        t0 = time.monotonic()
        stat = cli(0, "QSTAT", "part", "CLUSTER").split("\n")
        took = time.monotonic() - t0
        fields = dict(zip(stat[0::2], stat[1::2]))
        assert fields["nodes-answered"] == "2", fields
        assert fields["len"] == "5", fields     # nodes 0 and 1: 2 + 3
        assert fields["nodes-asked"] in ("2", "3"), fields   # 2 once node 2 is flagged PFAIL
        assert took < 4.0, took                 # the deadline (1 s) plus redis-cli's start
        assert cli(0, "QLEN", "part", "CLUSTER") == "5"
        assert cli(2, "QLEN", "part", "CLUSTER") == "4"     # the other side answers for itself
        netns.heal(3)
        wait_until(lambda: cli(0, "QLEN", "part", "CLUSTER") == "9", timeout=15,
                   message="the healed node was not asked again")
        info = cli(0, "INFO", "cluster")
        assert "cluster_queries_late:" in info and "cluster_queries_asked:" in info
    finally:
        for n in nodes:
            n.stop()
        netns.cleanup()



def test_a_member_asking_malformed_queries_gets_errors_and_breaks_nothing(start_server, tmp_path):
    """A member of the cluster (a bus node run in this process, tests/test_bus_hostile_member.py)
    sends QUERY messages with unknown kinds, arguments of the wrong shape, and actions while
    they are off: each gets an ANSWER with ok false, the node and its workers live on, and a
    well-formed question is still answered."""
    from test_bus_hostile_member import Member, assert_unharmed, joined
    from disque.contracts import bus_messages as bus_msg
    srv = start_server(workers=2)
    workers = srv.worker_pids()
    srv.execute("ADDJOB", "mq", b"x", 0)
    member = Member(tmp_path)
    answers = {}
    member.bus.on_query = lambda sender, msg: answers.update(
        {msg.payload[0]: msg.payload[1:]} if msg.type == bus_msg.ANSWER else {})
    try:
        server_id = joined(srv, member)
        node = member.bus.nodes[server_id]
        bad = [["nope", []], ["qlen", []], ["qlen", ["mq"]], ["qlen", [b"mq", b"extra"]],
               ["jobs", [b"mq", "0", 10, False, 100]], ["queue_rows", [[b"a", 7]]],
               ["act", ["delete", [[b"D-x"]], "member"]],
               ["act", ["pause", [], "member"]], ["act", ["rm", [b"x"], "member"]]]
        for qid, (kind, args) in enumerate(bad, 1):
            assert member.bus.send(node, bus_msg.QUERY, bus_msg.Query.encode(qid, kind, args))
        clamped = len(bad) + 1         # numbers out of range are brought within bounds
        assert member.bus.send(node, bus_msg.QUERY, bus_msg.Query.encode(
            clamped, "search", [b"mq", b"x", -5, 2 ** 62]))
        good = clamped + 1
        assert member.bus.send(node, bus_msg.QUERY, bus_msg.Query.encode(good, "qlen", [b"mq"]))
        member.until(lambda: good in answers, message="the well-formed query was not answered")
        member.until(lambda: len(answers) == good, message="some queries got no answer")
        for qid in range(1, clamped):
            ok, why = answers[qid]
            assert ok is False and isinstance(why, str), (bad[qid - 1], answers[qid])
        assert answers[clamped] == [True, {"scanned": 1, "complete": True, "jobs": []}]
        assert answers[good] == [True, 1]
        assert "metrics-actions no" in answers[7][1]
        assert_unharmed(srv, workers)
        assert srv.execute("QLEN", "mq", "CLUSTER") == 1
    finally:
        member.close()
