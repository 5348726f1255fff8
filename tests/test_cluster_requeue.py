"""Requeue coordination and acknowledgements across real nodes: a job queued on exactly one
node after a retry, delivery after its queueing node and another copy die, WORKING and NACK
propagation, FASTACK (SPEC 3.4, 3.6, 3.7, 7.2-7.4)."""
import time

from support.jobs import show
from support.resp_client import RawConn
from support.waits import wait_until
from support.info import parse_info
from support.jobs import addjob
from support.resp_client import NULL_ARRAY


def qlens(c, queue, nodes=None):
    nodes = range(len(c)) if nodes is None else nodes
    return [c[i].execute("QLEN", queue) for i in nodes]


def shows(c, jid, nodes=None):
    nodes = range(len(c)) if nodes is None else nodes
    out = []
    for i in nodes:
        with RawConn(c[i].port) as r:
            out.append(show(r, jid))
    return out


def gone_everywhere(c, jid):
    return all(s is None for s in shows(c, jid))


def test_requeue_happens_on_exactly_one_node_and_counts_a_delivery(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "rq", b"work", 5000, "REPLICATE", 3, "RETRY", 1)
        got = r.execute("GETJOB", "NOHANG", "FROM", "rq")
        assert got[0][1] == jid                       # consumed, never acknowledged
    assert qlens(c, "rq") == [0, 0, 0]
    # the retry (1 s +- 250 ms, WILLQUEUE 500 ms before) makes one node queue it again
    wait_until(lambda: sum(qlens(c, "rq")) >= 1, timeout=5, message="job never requeued")
    # ... and only one: sampled over three more retry periods, the job is queued on
    # exactly one node (the others postpone their own requeue on QUEUED / WILLQUEUE)
    time.sleep(0.2)         # a simultaneous requeue elsewhere is settled by one QUEUED
    samples = []
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        samples.append(qlens(c, "rq"))
        time.sleep(0.05)
    bad = [s for s in samples if sum(s) != 1]
    assert not bad, f"{len(bad)}/{len(samples)} samples without exactly one queued copy: {bad[:5]}"
    holder = samples[-1].index(1)
    # additional-deliveries counts the requeue, on every copy (QUEUED with INCR_DELIV). Two
    # nodes whose retry fires within one message's flight of each other both requeue (WILLQUEUE
    # only postpones a copy already queued), and each counts both: as in the original, the
    # count is then 2 on every copy, but never missing on one
    def counts():
        return [s[b"additional-deliveries"] for s in shows(c, jid)]
    wait_until(lambda: len(set(counts())) == 1 and counts()[0] >= 1, timeout=3,
               message="copies disagree on additional-deliveries")
    delivered = counts()[0]
    assert delivered in (1, 2), counts()
    for i, s in enumerate(shows(c, jid)):
        assert s[b"state"] == (b"queued" if i == holder else b"active")
        assert s[b"nacks"] == 0
    with RawConn(c[holder].port) as r:
        got = r.execute("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "rq")
        assert got[0][1] == jid
        assert got[0][3:] == [b"nacks", 0, b"additional-deliveries", delivered]
        assert r.execute("ACKJOB", jid) == 1
    wait_until(lambda: gone_everywhere(c, jid), timeout=10)


def test_job_survives_its_queueing_node_and_one_more_copy(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "sq", b"precious", 5000, "REPLICATE", 3, "RETRY", 1)
        assert show(r, jid)[b"state"] == b"queued"      # queued on the originator only
    assert qlens(c, "sq") == [1, 0, 0]
    c.kill(0)
    c.kill(1)
    t0 = time.monotonic()
    with RawConn(c[2].port) as r:
        got = r.execute("GETJOB", "TIMEOUT", 10000, "FROM", "sq")
        assert got is not NULL_ARRAY and got[0][1:] == [jid, b"precious"]
        print(f"\nsurvivor delivered the job {time.monotonic() - t0:.2f}s after the kills")
        assert r.execute("ACKJOB", jid) == 1
        assert show(r, jid)[b"state"] == b"acked"     # the dead copies cannot confirm yet
    # the dead nodes come back empty (no AOF): the GC completes with them
    c.restart(0)
    c.restart(1)
    c.wait_mesh(timeout=15)
    wait_until(lambda: gone_everywhere(c, jid), timeout=15,
               message="the acked job was never garbage-collected after the restarts")


def test_working_postpones_the_requeue_on_every_copy(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "wq", b"slow", 5000, "REPLICATE", 3, "RETRY", 2)
        assert r.execute("GETJOB", "NOHANG", "FROM", "wq")[0][1] == jid
        # keep saying WORKING for three retry periods: nobody requeues it
        end = time.monotonic() + 6.0
        next_working = 0.0
        while time.monotonic() < end:
            if time.monotonic() >= next_working:
                assert r.execute("WORKING", jid) == 2
                next_working = time.monotonic() + 1.0
            assert qlens(c, "wq") == [0, 0, 0]
            time.sleep(0.1)
        # the other copies pushed their requeue time away too
        for s in shows(c, jid, [1, 2]):
            assert s[b"state"] == b"active" and s[b"next-requeue-within"] > 500
    # once the consumer stops, the job comes back after about RETRY
    wait_until(lambda: sum(qlens(c, "wq")) == 1, timeout=6, message="never requeued")


def test_nack_requeues_at_once_and_the_nack_count_reaches_every_copy(start_cluster):
    c = start_cluster(3)
    with RawConn(c[1].port) as r:
        jid = addjob(r, "nq", b"bad", 5000, "REPLICATE", 3, "RETRY", 30)
        assert r.execute("GETJOB", "NOHANG", "FROM", "nq")[0][1] == jid
        assert r.execute("NACK", jid) == 1
        assert r.execute("QLEN", "nq") == 1
        got = r.execute("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "nq")
        assert got[0][1] == jid and got[0][3:5] == [b"nacks", 1]
        assert r.execute("NACK", jid) == 1
    for i in range(3):
        wait_until(lambda i=i: shows(c, jid, [i])[0][b"nacks"] == 2, timeout=5,
                   message=f"node {i} did not learn the nacks")
    # NACK is not a delivery, and the other copies postponed their requeue by ~RETRY
    for i, s in enumerate(shows(c, jid)):
        assert s[b"additional-deliveries"] == 0
        if i != 1:
            assert s[b"state"] == b"active" and s[b"next-requeue-within"] > 25000
    assert qlens(c, "nq") == [0, 1, 0]


def test_fastack_deletes_every_copy(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "fq", b"x", 5000, "REPLICATE", 3)
    with RawConn(c[2].port) as r:
        assert r.execute("FASTACK", jid) == 1           # from a replica
    wait_until(lambda: gone_everywhere(c, jid), timeout=5)
    assert qlens(c, "fq") == [0, 0, 0]

    # FASTACK on a node that has no copy: DELJOB goes to every node
    with RawConn(c[0].port) as r:
        jid = addjob(r, "fq", b"y", 5000, "REPLICATE", 2)
        owners = {x.decode() for x in show(r, jid)[b"nodes-delivered"]}
    outsider = [i for i in range(3) if c.ids[i] not in owners][0]
    with RawConn(c[outsider].port) as r:
        assert r.execute("FASTACK", jid) == 0
    wait_until(lambda: gone_everywhere(c, jid), timeout=5)
    assert qlens(c, "fq") == [0, 0, 0]


def test_ackjob_on_a_replica_clears_every_copy_and_no_requeue_follows(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        ids = [addjob(r, "aq", b"j%d" % i, 5000, "REPLICATE", 3, "RETRY", 1) for i in range(5)]
        got = r.execute("GETJOB", "COUNT", 5, "NOHANG", "FROM", "aq")
        assert sorted(j[1] for j in got) == sorted(ids)
    with RawConn(c[2].port) as r:                       # acked where they were not delivered
        assert r.execute("ACKJOB", *ids) == 5
    for jid in ids:
        wait_until(lambda jid=jid: gone_everywhere(c, jid), timeout=10)
    for i in range(3):
        assert parse_info(c[i].execute("INFO", "jobs"))["registered_jobs"] == "0"
    time.sleep(2.0)                                     # two retry periods: nothing comes back
    assert qlens(c, "aq") == [0, 0, 0]
