"""NACK ... DELAY and dead-letter queues with a job's copies on 3 nodes (docs/job-features.md):
the delay is known to every copy, the dead-letter move travels with QUEUED, and after a
partition (DEBUG BUS) heals there is one job, queued in one queue, removed by one ACK."""
import time

import pytest

from support.resp_client import RawConn, Status
from support.waits import wait_until
from support.info import parse_info
from support.jobs import addjob

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def show(port, jid):
    with RawConn(port) as r:
        reply = r.execute("SHOW", jid)
    return None if reply is None else dict(zip(reply[0::2], reply[1::2]))


def qlens(c, queue):
    return [c[i].execute("QLEN", queue) for i in range(len(c))]


def test_nack_delay_is_honoured_by_every_copy(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "cnd", b"w", 5000, "REPLICATE", 3, "RETRY", 2)
        assert r.execute("GETJOB", "NOHANG", "FROM", "cnd")[0][1] == jid
        assert r.execute("NACK", jid, "DELAY", 3) == 1
        t0 = time.monotonic()
    for i in (1, 2):
        wait_until(lambda i=i: show(c[i].port, jid)[b"nacks"] == 1, timeout=3,
                   message="the delayed NACK did not reach node %d" % i)
        # the other copies wait for the delay and then one RETRY: never before the delay ends
        left = show(c[i].port, jid)[b"next-requeue-within"]
        assert left >= 3000 + 2000 - 250 - (time.monotonic() - t0) * 1000 - 100, left
    assert show(c[0].port, jid)[b"nacks"] == 1
    while time.monotonic() - t0 < 2.8:
        assert qlens(c, "cnd") == [0, 0, 0], "queued before the delay ended"
        time.sleep(0.05)
    wait_until(lambda: qlens(c, "cnd") == [1, 0, 0], timeout=3)
    assert 2.9 <= time.monotonic() - t0 <= 4.0


def test_dead_letter_move_reaches_every_copy_and_one_ack_removes_them(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "cmv", b"poison", 5000, "REPLICATE", 3, "RETRY", 5,
                        "MAXDELIVERIES", 1)
        assert r.execute("GETJOB", "NOHANG", "FROM", "cmv")[0][1] == jid
        assert r.execute("NACK", jid) == 1
    for i in range(3):
        wait_until(lambda i=i: show(c[i].port, jid)[b"queue"] == b"cmv:dead", timeout=3,
                   message="node %d did not follow the move" % i)
        s = show(c[i].port, jid)
        assert s[b"dead-lettered-from"] == b"cmv" and s[b"nacks"] == 1
    assert qlens(c, "cmv:dead") == [1, 0, 0] and qlens(c, "cmv") == [0, 0, 0]
    with RawConn(c[0].port) as r:
        assert r.execute("GETJOB", "NOHANG", "FROM", "cmv:dead")[0][1] == jid
    with RawConn(c[1].port) as r:
        assert r.execute("ACKJOB", jid) == 1            # acked on a node holding a copy
    wait_until(lambda: all(show(c[i].port, jid) is None for i in range(3)), timeout=15,
               message="copies left after the ACK")


@pytest.mark.parametrize("n", [3, pytest.param(5, marks=pytest.mark.long)])
def test_dead_letter_during_a_partition_converges_to_one_queued_job(start_cluster, n):
    c = start_cluster(n)
    with RawConn(c[0].port) as r:
        jid = addjob(r, "cdq", b"poison", 5000, "REPLICATE", n, "RETRY", 2,
                        "MAXDELIVERIES", 2)
        assert r.execute("GETJOB", "NOHANG", "FROM", "cdq")[0][1] == jid
        assert r.execute("NACK", jid) == 1               # delivery 1, queued again
        for i in range(n):
            wait_until(lambda i=i: show(c[i].port, jid)[b"nacks"] == 1, timeout=3)
        assert r.execute("GETJOB", "NOHANG", "FROM", "cdq")[0][1] == jid    # delivery 2
        # node 0 is cut off and moves its copy; nodes 1 and 2 decide alone, from the same
        # counters, when their RETRY makes them queue the job again
        assert c[0].execute("DEBUG", "BUS", "DROP-ALL") == Status(b"OK")
        try:
            assert r.execute("NACK", jid) == 1
            assert c[0].execute("QLEN", "cdq:dead") == 1
            wait_until(lambda: sum(qlens(c, "cdq:dead")[1:]) == 1, timeout=10,
                       message="the other side did not dead-letter its copies")
            assert sum(qlens(c, "cdq")) == 0
        finally:
            c[0].execute("DEBUG", "BUS", "RESTORE")
    c.wait_mesh(timeout=15)
    # two queued copies after the heal (one per side): the queued ones repeat the move every
    # RETRY, and the QUEUED tie-break leaves one
    wait_until(lambda: sum(qlens(c, "cdq:dead")) == 1, timeout=15,
               message="copies still queued on both sides of the healed partition")
    samples = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        samples.append((qlens(c, "cdq:dead"), qlens(c, "cdq")))
        time.sleep(0.1)
    assert all(sum(d) == 1 and sum(q) == 0 for d, q in samples), samples
    for i in range(n):
        s = show(c[i].port, jid)
        assert s is not None, "a copy was lost"
        assert s[b"queue"] == b"cdq:dead" and s[b"dead-lettered-from"] == b"cdq"
    holder = samples[-1][0].index(1)
    with RawConn(c[holder].port) as r:
        got = r.execute("GETJOB", "NOHANG", "FROM", "cdq:dead")
        assert got[0][1] == jid
        assert r.execute("ACKJOB", jid) == 1
    wait_until(lambda: all(show(c[i].port, jid) is None for i in range(n)), timeout=20,
               message="copies left after the ACK")
    moved = sum(int(parse_info(c[i].execute("INFO", "deadletter"))["dead_lettered_jobs"])
                for i in range(n))
    assert moved >= 2          # each side counted the move it made
