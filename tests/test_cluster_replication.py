"""Cluster of real nodes: membership, synchronous replication, NOREPL, acks and GC
(SPEC 3.1, 4.2, 7.4, 10)."""
import time


from support.jobs import show
from support.resp_client import RawConn
from support.waits import wait_until
from support.jobs import addjob
from support.resp_client import Err


def test_chain_of_meets_forms_a_full_mesh_and_hello_lists_every_node(start_cluster):
    c = start_cluster(4)
    for i in range(4):
        info = c.cluster_info(i)
        assert info["cluster_size"] == "4" and info["cluster_known_nodes"] == "4"
        hello = c[i].execute("HELLO")
        assert hello[0] == 1 and hello[1].decode() == c.ids[i]
        entries = {e[0].decode(): e for e in hello[2:]}
        assert set(entries) == set(c.ids)
        assert all(e[3] == b"1" for e in entries.values())
        assert {int(e[2]) for e in entries.values()} == {n.port for n in c.nodes}
        nodes = c[i].execute("CLUSTER", "NODES").decode().splitlines()
        assert len(nodes) == 4
        assert [l for l in nodes if "myself" in l][0].startswith(c.ids[i])


def test_addjob_replicates_to_n_nodes_and_ack_removes_every_copy(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "rq", b"payload", 5000)      # default REPLICATE = min(3, size) = 3
        info = show(r, jid)
        assert info[b"repl"] == 3 and info[b"state"] == b"queued"
        assert sorted(x.decode() for x in info[b"nodes-delivered"]) == sorted(c.ids)
    for i in (1, 2):
        with RawConn(c[i].port) as r:
            copy = show(r, jid)
            assert copy is not None and copy[b"state"] == b"active" and copy[b"body"] == b"payload"
    with RawConn(c[1].port) as r:
        job = r.execute("GETJOB", "TIMEOUT", 5000, "FROM", "rq")
        assert job[0][1] == jid
        assert r.execute("ACKJOB", jid) == 1

    def gone_everywhere():
        for node in c.nodes:
            with RawConn(node.port) as r:
                if show(r, jid) is not None:
                    return False
        return True
    wait_until(gone_everywhere, timeout=10, message="acked job still known somewhere")


def test_replicate_two_copies_and_norepl_errors(start_cluster):
    c = start_cluster(3)
    with RawConn(c[2].port) as r:
        jid = addjob(r, "q2", b"x", 5000, "REPLICATE", 2)
        assert len(show(r, jid)[b"nodes-delivered"]) == 2
        assert r.execute("ADDJOB", "q2", "x", 0, "REPLICATE", 4) == Err(
            b"NOREPL Not enough reachable nodes for the requested replication level")
        assert r.execute("ADDJOB", "q2", "x", 0, "RETRY", 0) == Err(
            b"ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)")


def test_norepl_timeout_when_copies_cannot_be_confirmed(start_cluster):
    c = start_cluster(3)
    c[1].execute("DEBUG", "BUS", "DROP-ALL")
    c[2].execute("DEBUG", "BUS", "DROP-ALL")
    try:
        with RawConn(c[0].port) as r:
            t0 = time.monotonic()
            reply = r.execute("ADDJOB", "qt", "x", 300, "REPLICATE", 3)
            assert reply == Err(b"NOREPL Timeout reached before replicating to the requested "
                                   b"number of nodes")
            assert time.monotonic() - t0 < 3
            assert r.execute("QLEN", "qt") == 0
            assert r.execute("JSCAN", 0, "BUSYLOOP")[1] == []
    finally:
        c[1].execute("DEBUG", "BUS", "RESTORE")
        c[2].execute("DEBUG", "BUS", "RESTORE")


def test_async_addjob_replies_at_once_and_copies_follow(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "qa", b"x", 0, "ASYNC")
    for i in (1, 2):
        def has_copy(i=i):
            with RawConn(c[i].port) as r:
                return show(r, jid) is not None
        wait_until(has_copy, timeout=5)


def test_ack_on_a_node_without_a_copy_reaches_the_owners(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "qd", b"x", 5000, "REPLICATE", 2)
        owners = {x.decode() for x in show(r, jid)[b"nodes-delivered"]}
    outsider = [i for i in range(3) if c.ids[i] not in owners][0]
    with RawConn(c[outsider].port) as r:
        assert r.execute("ACKJOB", jid) == 0        # unknown here: a dummy ACK is created

    def gone_everywhere():
        for node in c.nodes:
            with RawConn(node.port) as r:
                if show(r, jid) is not None:
                    return False
        return True
    wait_until(gone_everywhere, timeout=10, message="dummy ACK did not garbage-collect the job")
