"""A node leaving the cluster gracefully (CLUSTER LEAVING yes, SPEC 3.1 step 5-6, 3.2, 8.7):
external replication, -LEAVING to consumers, no dummy ACKs, still serving NEEDJOBS so its
jobs drain to the other nodes."""
import threading

from support.info import parse_info
from support.jobs import show
from support.resp_client import NULL_ARRAY, Err, RawConn
from support.waits import wait_until
from support.jobs import addjob
from support.resp_client import Status, encode_command
from support.slots import queues_on_distinct_workers

LEAVING = Err(b"LEAVING This node is leaving the cluster, please connect to a different one")


def set_leaving(c, i, on=True):
    assert c[i].execute("CLUSTER", "LEAVING", "yes" if on else "no") == Status(b"OK")
    # the others stop counting it as reachable (it is in every bus header)
    want = str(len(c) - 2) if on else str(len(c) - 1)
    for k in range(len(c)):
        if k != i:
            wait_until(lambda k=k: c.cluster_info(k)["cluster_reachable_nodes"] == want,
                       timeout=5)


def registered_jobs(node):
    return int(parse_info(node.execute("INFO", "jobs"))["registered_jobs"])


def test_addjob_on_a_leaving_node_keeps_no_copy_or_fails_with_the_reason(start_cluster):
    c = start_cluster(3)
    set_leaving(c, 0)
    with RawConn(c[0].port) as r:
        # REPLICATE 2 needs 2 copies elsewhere: there are 2 reachable nodes
        jid = addjob(r, "lq", b"hello", 5000, "REPLICATE", 2)
        assert show(r, jid) is None and r.execute("QLEN", "lq") == 0
        assert r.execute("JSCAN", 0, "BUSYLOOP")[1] == []
        assert registered_jobs(c[0]) == 0
        owners = []
        for i in (1, 2):
            with RawConn(c[i].port) as o:
                s = show(o, jid)
                assert s is not None and s[b"body"] == b"hello"
                assert sorted(s[b"nodes-delivered"]) == sorted(x.encode() for x in c.ids[1:])
                owners.append(s[b"state"])
        assert sorted(owners) == [b"active", b"queued"]     # ENQUEUE went to one of them
        # REPLICATE 3 would need 3 other nodes: the NOREPL names the reason
        assert r.execute("ADDJOB", "lq", "x", 0, "REPLICATE", 3) == Err(
            b"NOREPL Not enough reachable nodes for the requested replication level, since I'm "
            b"unable to hold a copy of the message for the following reason: I'm leaving the "
            b"cluster")
        assert r.execute("ADDJOB", "lq", "x", 0, "REPLICATE", 4) == Err(
            b"NOREPL Not enough reachable nodes for the requested replication level")
        # ASYNC: not stored here either
        ajid = addjob(r, "lq", b"async", 0, "REPLICATE", 2, "ASYNC")
        assert show(r, ajid) is None
    with RawConn(c[1].port) as r:
        bodies = set()
        for _ in range(2):
            reply = r.execute("GETJOB", "TIMEOUT", 5000, "FROM", "lq")
            assert reply is not NULL_ARRAY
            bodies.add(reply[0][2])
            assert r.execute("ACKJOB", reply[0][1]) == 1
        assert bodies == {b"hello", b"async"}
    # the others no longer count the leaving node: 3 copies cannot be made from node 1
    assert c[1].execute("ADDJOB", "lq", "x", 0, "REPLICATE", 3) == Err(
        b"NOREPL Not enough reachable nodes for the requested replication level")
    # nor is it sent copies: REPLICATE 2 from node 1 lands on node 2
    jid = c[1].execute("ADDJOB", "lq2", "x", 5000, "REPLICATE", 2)
    assert sorted(c[1].execute("SHOW", jid)[21]) == sorted(x.encode() for x in c.ids[1:])
    assert c[0].execute("SHOW", jid) is None
    # and back: LEAVING no makes it a normal member again
    set_leaving(c, 0, on=False)
    # (a fresh queue: node 1's consumer above left interest in "lq" on node 0 for a while)
    jid = c[0].execute("ADDJOB", "lq3", "x", 5000, "REPLICATE", 3)
    assert type(jid) is Status, jid
    assert c[0].execute("QLEN", "lq3") == 1 and c[0].execute("SHOW", jid)[5] == b"queued"


def test_leaving_node_refuses_to_block_consumers_and_releases_blocked_ones(start_cluster):
    c = start_cluster(3)
    # two queues owned by different workers, so one GETJOB spans both workers
    qa, qb = queues_on_distinct_workers("lv", 1, 2)
    blocked = []
    for queues in ([qa], [qa, qb]):
        r = RawConn(c[0].port, timeout=15)
        r.send(encode_command("GETJOB", "TIMEOUT", 0, "FROM", *queues))
        blocked.append(r)
    wait_until(lambda: int(parse_info(c[0].execute("INFO", "clients"))["blocked_clients"]) == 2,
               timeout=5)
    try:
        set_leaving(c, 0)
        # consumers already blocked are told to go elsewhere (next cron pass)
        for r in blocked:
            assert r.read_parsed(timeout=5) == LEAVING
        with RawConn(c[0].port) as r:
            for queues in ([qa], [qa, qb]):
                assert r.execute("GETJOB", "FROM", *queues) == LEAVING
                assert r.execute("GETJOB", "TIMEOUT", 100, "FROM", *queues) == LEAVING
                # NOHANG is checked first
                assert r.execute("GETJOB", "NOHANG", "FROM", *queues) is NULL_ARRAY
            # no dummy ACK for a job it does not know
            unknown = "D-" + c.ids[1][:8] + "-" + "A" * 24 + "-05a1"
            assert r.execute("ACKJOB", unknown) == 0
            assert r.execute("SHOW", unknown) is None
            assert registered_jobs(c[0]) == 0
    finally:
        for r in blocked:
            r.close()


def test_producer_waiting_for_copies_gets_leaving_when_the_node_starts_leaving(start_cluster):
    c = start_cluster(3)
    for i in (1, 2):
        c[i].execute("DEBUG", "BUS", "DROP-ALL")         # no GOTJOB can come back
    try:
        with RawConn(c[0].port, timeout=15) as r:
            r.send(encode_command("ADDJOB", "pq", "x", 0, "REPLICATE", 3))
            wait_until(lambda: int(parse_info(c[0].execute("INFO", "clients"))
                                   ["blocked_clients"]) == 1, timeout=5)
            assert not r.has_data(0.3)
            assert c[0].execute("CLUSTER", "LEAVING", "yes") == Status(b"OK")
            assert r.read_parsed(timeout=5) == LEAVING      # SPEC 3.1 [quirk]
        assert registered_jobs(c[0]) == 0
    finally:
        for i in (1, 2):
            c[i].execute("DEBUG", "BUS", "RESTORE")


def test_leaving_node_drains_its_jobs_to_the_others(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        ids = {addjob(r, "dq", b"d%d" % i, 5000, "REPLICATE", 1) for i in range(20)}
        ids |= {addjob(r, "dq", b"e%d" % i, 5000, "REPLICATE", 2) for i in range(10)}
    assert c[0].execute("QLEN", "dq") == 30
    set_leaving(c, 0)
    # it sends no NEEDJOBS itself, but answers those of node 1's consumer
    got = {}
    with RawConn(c[1].port, timeout=20) as r:
        while len(got) < 30:
            reply = r.execute("GETJOB", "TIMEOUT", 10000, "COUNT", 10, "FROM", "dq")
            assert reply is not NULL_ARRAY, f"drain stalled after {len(got)} jobs"
            for _q, jid, body in reply:
                got[jid] = got.get(jid, 0) + 1
            assert r.execute("ACKJOB", *[j[1] for j in reply]) == len(reply)
    assert set(got) == ids and set(got.values()) == {1}
    assert c[0].execute("QLEN", "dq") == 0
    # acks reach the leaving node's copies: it ends up with nothing, the operator's signal
    wait_until(lambda: registered_jobs(c[0]) == 0, timeout=15,
               message="the leaving node still holds jobs")
    for i in (1, 2):
        wait_until(lambda i=i: registered_jobs(c[i]) == 0, timeout=15)


def test_blocked_consumer_elsewhere_gets_jobs_added_to_a_leaving_node(start_cluster):
    c = start_cluster(3)
    set_leaving(c, 2)
    result = {}

    def consumer():
        with RawConn(c[1].port, timeout=15) as r:
            result["reply"] = r.execute("GETJOB", "TIMEOUT", 10000, "FROM", "xq")

    th = threading.Thread(target=consumer)
    th.start()
    wait_until(lambda: (c[1].execute("QSTAT", "xq") or [0] * 10)[9] == 1, timeout=5)
    jid = c[2].execute("ADDJOB", "xq", "payload", 5000, "REPLICATE", 2)
    assert type(jid) is Status
    th.join(15)
    assert result["reply"][0][1:] == [jid, b"payload"]
