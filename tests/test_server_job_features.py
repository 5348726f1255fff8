"""NACK ... DELAY, retry back-off, dead-letter queues and GETJOB FROM-PREFIX on one node
(docs/job-features.md), with 1 and 3 workers."""
import time

import pytest

import aof_helpers
from support.info import parse_info
from support.jobs import addjob
from support.resp_client import NULL_ARRAY, encode_command, parse_resp
from support.slots import crc16, queues_on_distinct_workers
from support.waits import wait_until

pytestmark = pytest.mark.server



def show(r, jid):
    """SHOW as a dict; jobs with options have 40 elements instead of 30."""
    reply = r.execute("SHOW", jid)
    if reply is None:
        return None
    assert len(reply) in (30, 40), reply
    return dict(zip(reply[0::2], reply[1::2]))


def fetch(r, queue, withcounters=False):
    opts = ["WITHCOUNTERS"] if withcounters else []
    got = r.execute("GETJOB", "NOHANG", *opts, "FROM", queue)
    return got[0] if got is not NULL_ARRAY else None


def dead_queue_elsewhere(prefix, nworkers=3):
    """A queue name whose default dead-letter queue (<name>:dead) is on another worker."""
    for i in range(1000):
        name = f"{prefix}{i}"
        if (crc16(name.encode()) % 4096) % nworkers != \
                (crc16((name + ":dead").encode()) % 4096) % nworkers:
            return name
    raise AssertionError("no such name")


# ---- validation ------------------------------------------------------------------------

@pytest.mark.parametrize("opts, error", [
    (["BACKOFF", "x"], b"-ERR BACKOFF time must be a number > 0\r\n"),
    (["BACKOFF", "0"], b"-ERR BACKOFF time must be a number > 0\r\n"),
    (["BACKOFF", "-3"], b"-ERR BACKOFF time must be a number > 0\r\n"),
    (["RETRY", "10", "BACKOFF", "5"], b"-ERR BACKOFF time must not be less than RETRY\r\n"),
    (["MAXDELIVERIES", "0"], b"-ERR MAXDELIVERIES must be between 1 and 65535\r\n"),
    (["MAXDELIVERIES", "65536"], b"-ERR MAXDELIVERIES must be between 1 and 65535\r\n"),
    (["MAXDELIVERIES", "two"], b"-ERR MAXDELIVERIES must be between 1 and 65535\r\n"),
    (["MAXDELIVERIES", "2", "DEADLETTER", "vq"],
     b"-ERR DEADLETTER queue must be a non empty name different from the job's queue\r\n"),
    (["MAXDELIVERIES", "2", "DEADLETTER", ""],
     b"-ERR DEADLETTER queue must be a non empty name different from the job's queue\r\n"),
    (["DEADLETTER", "other"], b"-ERR DEADLETTER needs MAXDELIVERIES\r\n"),
    (["RETRY", "0", "MAXDELIVERIES", "2"],
     b"-ERR BACKOFF and MAXDELIVERIES need RETRY > 0 (a RETRY 0 job is never queued again)\r\n"),
    (["MAXDELIVERIES"], b"-ERR syntax error\r\n"),
    (["BACKOFF"], b"-ERR syntax error\r\n"),
])
def test_addjob_option_errors(server, opts, error):
    with server.raw() as r:
        assert r.call("ADDJOB", "vq", "b", 0, *opts) == error
        assert r.execute("QLEN", "vq") == 0


def test_nack_delay_errors(server):
    with server.raw() as r:
        jid = addjob(r, "vn", b"b", 0, "RETRY", 30)
        assert fetch(r, "vn")[1] == jid
        for bad in ("-1", "x", "4294967296"):
            assert r.call("NACK", jid, "DELAY", bad) == \
                b"-ERR DELAY time must be a non negative number\r\n"
        assert r.call("NACK", jid, "DELAY") == b"-BADID Invalid Job ID format.\r\n"
        assert r.call("NACK", "nope", "DELAY", 1) == b"-BADID Invalid Job ID format.\r\n"
        assert show(r, jid)[b"nacks"] == 0          # nothing happened
        assert r.execute("NACK", jid, "DELAY", 0) == 1     # DELAY 0: as plain NACK
        assert r.execute("QLEN", "vn") == 1


def test_plain_jobs_keep_the_upstream_show_and_requeue(server):
    with server.raw() as r:
        jid = addjob(r, "plain", b"b", 0, "RETRY", 30)
        assert len(r.execute("SHOW", jid)) == 30
        for n in range(1, 5):
            assert fetch(r, "plain")[1] == jid
            assert r.execute("NACK", jid) == 1
            assert show(r, jid)[b"nacks"] == n
        assert r.execute("QLEN", "plain") == 1 and r.execute("QLEN", "plain:dead") == 0


# ---- NACK ... DELAY ----------------------------------------------------------------------

def test_nack_delay_queues_the_job_after_the_delay(server):
    with server.raw() as r:
        jid = addjob(r, "nd", b"b", 0, "RETRY", 30)
        assert fetch(r, "nd")[1] == jid
        t0 = time.monotonic()
        assert r.execute("NACK", jid, "DELAY", 1) == 1
        s = show(r, jid)
        assert s[b"state"] == b"active" and s[b"nacks"] == 1
        assert 800 <= s[b"next-requeue-within"] <= 1000
        assert r.execute("QLEN", "nd") == 0
        wait_until(lambda: r.execute("QLEN", "nd") == 1, timeout=5)
        waited = time.monotonic() - t0
        assert 0.9 <= waited <= 1.6, waited
        got = fetch(r, "nd", withcounters=True)
        # counted once: at the NACK, not again at the requeue
        assert got[1] == jid and got[3:] == [b"nacks", 1, b"additional-deliveries", 0]


# ---- back-off ----------------------------------------------------------------------------

def requeue_wait(r, queue, jid):
    """Fetch the job and return the seconds until it is queued again by its timeout."""
    assert fetch(r, queue)[1] == jid
    t0 = time.monotonic()
    wait_until(lambda: r.execute("QLEN", queue) == 1, timeout=10)
    return time.monotonic() - t0


def test_backoff_doubles_each_redelivery_up_to_the_max(server):
    with server.raw() as r:
        jid = addjob(r, "bo", b"b", 0, "RETRY", 1, "BACKOFF", 3)
        s = show(r, jid)
        assert (s[b"retry"], s[b"retry-interval"], s[b"backoff"]) == (1, 1, 3)
        assert s[b"max-deliveries"] == 0 and s[b"deadletter"] is None
        w1 = requeue_wait(r, "bo", jid)
        assert 0.7 <= w1 <= 1.5, w1
        assert show(r, jid)[b"retry-interval"] == 2
        w2 = requeue_wait(r, "bo", jid)
        assert 1.7 <= w2 <= 2.5, w2
        s = show(r, jid)
        assert s[b"additional-deliveries"] == 2
        assert s[b"retry-interval"] == 3                   # 4 capped at BACKOFF 3
        assert 2500 <= s[b"next-requeue-within"] <= 3300
        # a NACK without DELAY waits the current interval too, and counts
        assert fetch(r, "bo")[1] == jid
        assert r.execute("NACK", jid) == 1
        s = show(r, jid)
        assert s[b"nacks"] == 1 and s[b"state"] == b"active"
        assert 2500 <= s[b"next-requeue-within"] <= 3000
        assert r.execute("QLEN", "bo") == 0


# ---- dead-letter queues ----------------------------------------------------------------------

def test_job_nacked_n_times_lands_in_the_dead_letter_queue_once(server):
    q = dead_queue_elsewhere("dl")          # with 3 workers its :dead is on another worker
    dead = q + ":dead"
    with server.raw() as r, server.raw() as consumer:
        # a consumer already blocked on the dead-letter queue gets the job
        consumer.send(encode_command("GETJOB", "TIMEOUT", 10000, "WITHCOUNTERS", "FROM", dead))
        jid = addjob(r, q, b"poison", 0, "RETRY", 30, "MAXDELIVERIES", 3)
        for n in range(3):
            assert fetch(r, q)[1] == jid
            assert r.execute("NACK", jid) == 1
            if n < 2:
                assert r.execute("QLEN", q) == 1
        assert r.execute("QLEN", q) == 0
        got = parse_resp(consumer.read_reply(timeout=5))[0]
        assert got[0][:3] == [dead.encode(), jid, b"poison"]
        assert got[0][3:] == [b"nacks", 3, b"additional-deliveries", 0]
        s = show(r, jid)
        assert s[b"queue"] == dead.encode() and s[b"dead-lettered-from"] == q.encode()
        assert s[b"deadletter"] == dead.encode() and s[b"max-deliveries"] == 3
        # in the dead-letter queue it is requeued there, never dead-lettered again
        assert r.execute("NACK", jid) == 1
        assert r.execute("QLEN", q) == 0
        assert fetch(r, dead)[1] == jid
        info = parse_info(r.execute("INFO", "deadletter"))
        assert info["dead_lettered_jobs"] == "1"
        assert f"queue={q},jobs=1" in r.execute("INFO", "deadletter").decode()
        assert r.execute("ACKJOB", jid) == 1
        wait_until(lambda: r.execute("SHOW", jid) is None, timeout=5)


def test_custom_dead_letter_queue_and_timeouts_count(server):
    with server.raw() as r:
        jid = addjob(r, "cdl", b"b", 0, "RETRY", 1, "MAXDELIVERIES", 2, "DEADLETTER", "graveyard")
        assert fetch(r, "cdl")[1] == jid
        wait_until(lambda: r.execute("QLEN", "cdl") == 1, timeout=5)     # timeout: delivery 2
        assert fetch(r, "cdl")[1] == jid
        # the second timeout would queue it a third time: it goes to the graveyard instead
        got = r.execute("GETJOB", "TIMEOUT", 5000, "WITHCOUNTERS", "FROM", "graveyard")
        assert got[0][1] == jid and got[0][3:] == [b"nacks", 0, b"additional-deliveries", 2]
        assert r.execute("QLEN", "cdl") == 0
        assert show(r, jid)[b"dead-lettered-from"] == b"cdl"
        assert r.execute("ACKJOB", jid) == 1


# ---- GETJOB FROM-PREFIX --------------------------------------------------------------------

def test_from_prefix_serves_existing_and_new_queues(server):
    with server.raw() as r, server.raw() as consumer:
        assert r.call("GETJOB", "FROM-PREFIX") == b"-ERR syntax error\r\n"
        assert r.call("GETJOB", "FROM-PREFIX", "a", "b") == b"-ERR syntax error\r\n"
        assert r.execute("GETJOB", "NOHANG", "FROM-PREFIX", "fp:") is NULL_ARRAY
        a = addjob(r, "fp:old", b"1", 0)
        got = r.execute("GETJOB", "NOHANG", "COUNT", 5, "FROM-PREFIX", "fp:")
        assert [j[1] for j in got] == [a]
        # blocked before the queues exist: every worker creates one
        for name in queues_on_distinct_workers("fp:new", 1, 3):
            consumer.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM-PREFIX", "fp:"))
            time.sleep(0.1)     # let the GETJOB block first (what is tested is the wake-up)
            jid = addjob(r, name, b"x", 0)
            got = parse_resp(consumer.read_reply(timeout=5))[0]
            assert got[0][:2] == [name.encode(), jid]
        # other prefixes do not wake it; the timeout ends it
        assert r.execute("GETJOB", "TIMEOUT", 300, "FROM-PREFIX", "zz:") is NULL_ARRAY


# ---- AOF --------------------------------------------------------------------------------------

def test_aof_restart_keeps_the_options_and_the_move(start_server):
    srv = start_server(workers=3, extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    r = srv.raw()
    q = dead_queue_elsewhere("adl")
    moved = addjob(r, q, b"m", 0, "RETRY", 1, "MAXDELIVERIES", 1)
    slow = addjob(r, "abo", b"s", 0, "RETRY", 2, "BACKOFF", 60)
    assert fetch(r, q)[1] == moved
    assert r.execute("NACK", moved) == 1
    assert r.execute("QLEN", q + ":dead") == 1
    before = {j: show(r, j) for j in (moved, slow)}
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    for j in (moved, slow):
        s = show(r, j)
        for k in (b"queue", b"backoff", b"max-deliveries", b"deadletter",
                  b"dead-lettered-from", b"retry", b"nacks"):
            assert s[k] == before[j][k], (k, s[k], before[j][k])
    assert show(r, moved)[b"dead-lettered-from"] == q.encode()
    # back active after the restart: requeued after RETRY into the dead-letter queue (on
    # another worker than its slot's, which the blocked GETJOB learns while it waits)
    got = r.execute("GETJOB", "TIMEOUT", 5000, "FROM", q + ":dead")
    assert got[0][1] == moved


def test_aof_enqueue_once_is_no_redelivery(start_server):
    """Regression: aof-enqueue-jobs-once queued the jobs again through the requeue rule, so a
    never delivered MAXDELIVERIES 1 job came back in its dead-letter queue."""
    srv = start_server(workers=1, extra_args=["--appendonly", "yes", "--appendfsync", "always",
                                              "--aof-enqueue-jobs-once", "yes"])
    r = srv.raw()
    jid = addjob(r, "once", b"b", 0, "RETRY", 30, "MAXDELIVERIES", 1)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    s = show(r, jid)
    assert s[b"queue"] == b"once" and s[b"dead-lettered-from"] is None
    assert s[b"state"] == b"queued" and s[b"additional-deliveries"] == 0
    assert r.execute("QLEN", "once") == 1 and r.execute("QLEN", "once:dead") == 0
