"""PAUSE (SPEC 3.12) against real servers: 1 worker, 3 workers, 3 workers over ZeroMQ."""

import time

from support.admin import qstat, SYNTAX
from support.jobs import addjob, queue_names, show
from support.resp_client import encode_command
from support.waits import wait_until

PAUSED = b"-PAUSED Queue paused in input, try later\r\n"


# ---------------------------------------------------------------------------
# PAUSE
# ---------------------------------------------------------------------------


def test_pause_forms_and_replies(server):
    r = server.raw()
    addjob(r, "pq")
    assert r.call("PAUSE", "pq", "in") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "state") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "out") == b"+out\r\n"          # flags accumulate from none
    assert r.call("PAUSE", "pq", "in", "out") == b"+all\r\n"
    assert r.call("PAUSE", "pq", "none") == b"+none\r\n"
    assert r.call("PAUSE", "pq", "all") == b"+all\r\n"
    assert r.call("PAUSE", "pq", "all", "none") == b"+none\r\n"   # none resets what came before
    assert r.call("PAUSE", "pq", "none", "in") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "OUT", "State") == b"+out\r\n"   # case-insensitive
    assert r.call("PAUSE", "pq", "bcast") == b"+out\r\n"          # accepted, state unchanged
    assert r.call("PAUSE", "pq", "in", "BCAST") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "state", "state") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "in", "out", "none", "out", "in") == b"+all\r\n"
    assert qstat(r, "pq")[b"pause"] == b"all"
    assert r.call("PAUSE", "pq", "none") == b"+none\r\n"
    assert qstat(r, "pq")[b"pause"] == b"none"


def test_pause_errors_apply_nothing(server):
    r = server.raw()
    addjob(r, "pe")
    assert r.call("PAUSE", "pe", "in") == b"+in\r\n"
    assert r.call("PAUSE", "pe", "none", "bogus") == SYNTAX
    assert r.call("PAUSE", "pe", "out", "") == SYNTAX
    assert r.call("PAUSE", "pe", "inn") == SYNTAX
    assert r.call("PAUSE", "pe", "state") == b"+in\r\n"
    assert r.call("PAUSE", "pe") == b"-ERR wrong number of arguments for 'pause' command\r\n"
    assert r.call("PAUSE") == b"-ERR wrong number of arguments for 'pause' command\r\n"
    assert r.call("PAUSE", "missing-q", "bogus", "in") == SYNTAX
    assert qstat(r, "missing-q") is None


def test_pause_missing_queue(server):
    r = server.raw()
    assert r.call("PAUSE", "nq1", "state") == b"+none\r\n"
    assert r.call("PAUSE", "nq1", "bcast") == b"+none\r\n"
    assert r.call("PAUSE", "nq1", "none") == b"+none\r\n"
    assert r.call("PAUSE", "nq1", "in", "none") == b"+none\r\n"
    assert qstat(r, "nq1") is None                      # none: the queue is not created
    assert r.call("PAUSE", "nq2", "out") == b"+out\r\n"
    st = qstat(r, "nq2")                                # created by PAUSE
    assert st[b"pause"] == b"out" and st[b"len"] == 0
    assert r.execute("QLEN", "nq2") == 0


def test_pause_in_refuses_addjob(server):
    r = server.raw()
    addjob(r, "pin", "one")
    assert r.call("PAUSE", "pin", "in") == b"+in\r\n"
    assert r.call("ADDJOB", "pin", "two", 0) == PAUSED
    assert r.call("ADDJOB", "pin", "two", 0, "MAXLEN", 10) == PAUSED
    assert r.execute("QLEN", "pin") == 1
    # paused in: consumers are still served
    got = r.execute("GETJOB", "NOHANG", "FROM", "pin")
    assert got[0][2] == b"one"
    assert r.call("PAUSE", "pin", "out") == b"+out\r\n"   # input open again
    addjob(r, "pin", "three")
    assert r.execute("QLEN", "pin") == 1
    # a queue paused in before it exists refuses the first ADDJOB too
    assert r.call("PAUSE", "pin-new", "all") == b"+all\r\n"
    assert r.call("ADDJOB", "pin-new", "x", 0) == PAUSED
    assert r.call("PAUSE", "pin-new", "none") == b"+none\r\n"
    addjob(r, "pin-new", "x")


def test_pause_out_hides_jobs_from_getjob(server):
    r = server.raw()
    jid = addjob(r, "pout")
    assert r.call("PAUSE", "pout", "out") == b"+out\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "pout") == b"*-1\r\n"
    assert r.call("GETJOB", "TIMEOUT", 100, "FROM", "pout") == b"*-1\r\n"
    assert r.execute("QLEN", "pout") == 1
    assert r.execute("QPEEK", "pout", 1)[0][1] == jid
    assert r.call("PAUSE", "pout", "none") == b"+none\r\n"
    got = r.execute("GETJOB", "NOHANG", "FROM", "pout")
    assert got[0][1] == jid


def test_blocked_getjob_wakes_when_out_pause_cleared(server):
    r = server.raw()
    consumer = server.raw()
    jid = addjob(r, "pwake", "body")
    assert r.call("PAUSE", "pwake", "out") == b"+out\r\n"
    consumer.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", "pwake"))
    wait_until(lambda: qstat(r, "pwake")[b"blocked"] == 1)
    assert not consumer.has_data(0.3)
    # a new job while paused out does not wake it either
    jid2 = addjob(r, "pwake", "body2")
    assert not consumer.has_data(0.3)
    assert r.call("PAUSE", "pwake", "in") == b"+in\r\n"       # out cleared: wakes
    reply = consumer.read_parsed(5)
    assert len(reply) == 1 and reply[0][0] == b"pwake" and reply[0][1] == jid
    assert r.execute("QLEN", "pwake") == 1
    assert r.execute("GETJOB", "NOHANG", "FROM", "pwake")[0][1] == jid2
    # pausing "in" only never blocked consumers
    assert qstat(r, "pwake")[b"blocked"] == 0


def test_blocked_multi_queue_getjob_wakes_when_out_pause_cleared(server):
    """Queues on different workers (w3): the proxy waiter is woken too."""
    r = server.raw()
    consumer = server.raw()
    names = queue_names("pmulti", 6)
    jid = addjob(r, names[0])
    assert r.call("PAUSE", names[0], "out") == b"+out\r\n"
    consumer.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", *names))
    wait_until(lambda: qstat(r, names[0])[b"blocked"] == 1)
    assert not consumer.has_data(0.3)
    assert r.call("PAUSE", names[0], "none") == b"+none\r\n"
    reply = consumer.read_parsed(5)
    assert [j[1] for j in reply] == [jid]


def test_paused_in_postpones_requeue(server):
    r = server.raw()
    addjob(r, "preq", "b", 0, "RETRY", 1)
    jid = r.execute("GETJOB", "FROM", "preq")[0][1]
    assert r.call("PAUSE", "preq", "in") == b"+in\r\n"
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:              # RETRY 1 s passes twice: no requeue
        assert r.execute("QLEN", "preq") == 0
        time.sleep(0.1)
    assert show(r, jid)[b"state"] == b"active"
    assert r.call("PAUSE", "preq", "none") == b"+none\r\n"
    wait_until(lambda: r.execute("QLEN", "preq") == 1, timeout=4)
    assert show(r, jid)[b"state"] == b"queued"


