"""ACKJOB / FASTACK / DELJOB / NACK / ENQUEUE / DEQUEUE / WORKING (SPEC 3.3-3.8, 5, 7.2)."""

import time

import pytest
from support.info import parse_info
from support.jobs import addjob, show
from support.waits import wait_until



E_BADID = b"-BADID Invalid Job ID format.\r\n"
E_NOJOB = b"-NOJOB Job not known in the context of this node.\r\n"
E_TOOLATE = (b"-TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone "
             b"the next delivery.\r\n")

UNKNOWN_ID = "D-00000000-000000000000000000000000-0000"
UNKNOWN_ODD_ID = "D-00000000-000000000000000000000000-05a1"
# only length and the four fixed positions are validated (SPEC 5)
ODD_BUT_VALID_ID = "D-zzzzzzzz-!!!!!!!!!!!!!!!!!!!!!!!!-zzzz"

BAD_IDS = [
    "garbage",
    "",
    "D-00000000-000000000000000000000000-000",      # 39 chars
    "D-00000000-000000000000000000000000-00000",    # 41 chars
    "X-00000000-000000000000000000000000-0000",     # char0 not D
    "DX00000000-000000000000000000000000-0000",     # char1 not -
    "D-00000000X000000000000000000000000-0000",     # char10 not -
    "D-00000000-000000000000000000000000X0000",     # char35 not -
    "d-00000000-000000000000000000000000-0000",     # lowercase d
]


def registered_jobs(r):
    return int(parse_info(r.execute("INFO", "jobs"))["registered_jobs"])


# ---------------------------------------------------------------------------
# ACKJOB
# ---------------------------------------------------------------------------


def test_ackjob_queued_job_disappears(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x")
    assert r.call("ACKJOB", job_id) == b":1\r\n"
    assert r.call("SHOW", job_id) == b"$-1\r\n"
    assert r.execute("QLEN", "q") == 0
    assert registered_jobs(r) == 0
    assert r.call("ACKJOB", job_id) == b":0\r\n"


def test_ackjob_active_job(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x")
    assert r.execute("GETJOB", "FROM", "q")[0][1] == job_id
    assert r.execute("ACKJOB", job_id) == 1
    assert r.execute("SHOW", job_id) is None
    assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"


def test_ackjob_no_args_is_zero(server):
    r = server.raw()
    assert r.call("ACKJOB") == b":0\r\n"
    assert r.call("FASTACK") == b":0\r\n"
    assert r.call("DELJOB") == b":0\r\n"
    assert r.call("NACK") == b":0\r\n"
    assert r.call("ENQUEUE") == b":0\r\n"
    assert r.call("DEQUEUE") == b":0\r\n"


def test_ackjob_unknown_ids(server):
    r = server.raw()
    assert r.call("ACKJOB", UNKNOWN_ID) == b":0\r\n"
    assert r.call("ACKJOB", UNKNOWN_ODD_ID) == b":0\r\n"
    assert r.call("ACKJOB", ODD_BUT_VALID_ID) == b":0\r\n"
    # single node: no dummy ACK is kept (SPEC 3.3, 7.4 step 2)
    assert r.call("SHOW", UNKNOWN_ODD_ID) == b"$-1\r\n"
    assert registered_jobs(r) == 0


def test_ackjob_multiple_across_queues(server):
    r = server.raw()
    ids = [addjob(r, f"mq{i % 12}", b"x") for i in range(36)]
    assert r.execute("ACKJOB", *ids) == 36
    for job_id in ids:
        assert r.execute("SHOW", job_id) is None
    assert sum(r.execute("QLEN", f"mq{i}") for i in range(12)) == 0
    assert registered_jobs(r) == 0


def test_ackjob_mixed_known_unknown_and_duplicates(server):
    r = server.raw()
    a = addjob(r, "q1", b"a")
    b = addjob(r, "q2", b"b")
    assert r.execute("ACKJOB", a, UNKNOWN_ID, b, a) == 2


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("cmd", ["ACKJOB", "FASTACK", "DELJOB", "NACK", "ENQUEUE", "DEQUEUE"])
def test_badid_multi_id_commands_process_nothing(server, cmd, bad):
    r = server.raw()
    a = addjob(r, "bq1", b"a")
    b = addjob(r, "bq2", b"b")
    assert r.call(cmd, a, bad, b) == E_BADID
    assert r.call(cmd, bad) == E_BADID
    # nothing processed: both jobs still queued
    for job_id in (a, b):
        assert show(r, job_id)[b"state"] == b"queued"
    assert r.execute("QLEN", "bq1") == 1 and r.execute("QLEN", "bq2") == 1


@pytest.mark.parametrize("bad", BAD_IDS[:3])
@pytest.mark.parametrize("cmd", ["SHOW", "WORKING"])
def test_badid_single_id_commands(server, cmd, bad):
    assert server.raw().call(cmd, bad) == E_BADID


def test_valid_format_unknown_id_is_not_badid(server):
    r = server.raw()
    assert r.call("SHOW", ODD_BUT_VALID_ID) == b"$-1\r\n"
    assert r.call("DELJOB", ODD_BUT_VALID_ID) == b":0\r\n"


# ---------------------------------------------------------------------------
# FASTACK / DELJOB
# ---------------------------------------------------------------------------


def test_fastack(server):
    r = server.raw()
    a = addjob(r, "fq", b"a")
    b = addjob(r, "fq", b"b")
    r.execute("GETJOB", "FROM", "fq")
    assert r.call("FASTACK", a, b, UNKNOWN_ID) == b":2\r\n"
    assert r.execute("SHOW", a) is None and r.execute("SHOW", b) is None
    assert r.execute("QLEN", "fq") == 0
    assert r.call("FASTACK", a) == b":0\r\n"


def test_deljob_any_state(server):
    r = server.raw()
    queued = addjob(r, "dq", b"queued")
    active = addjob(r, "dq2", b"active")
    delayed = addjob(r, "dq3", b"delayed", 0, "DELAY", 100)
    assert r.execute("GETJOB", "FROM", "dq2")[0][1] == active
    assert r.call("DELJOB", queued, active, delayed) == b":3\r\n"
    for job_id in (queued, active, delayed):
        assert r.execute("SHOW", job_id) is None
    assert r.execute("QLEN", "dq") == 0
    assert r.call("DELJOB", queued) == b":0\r\n"
    assert registered_jobs(r) == 0


def test_deleted_job_is_never_delivered(server):
    r = server.raw()
    ids = [addjob(r, "ddq", b"%d" % i) for i in range(5)]
    assert r.execute("DELJOB", ids[0], ids[2], ids[4]) == 3
    reply = r.execute("GETJOB", "COUNT", 10, "NOHANG", "FROM", "ddq")
    assert [j[1] for j in reply] == [ids[1], ids[3]]


# ---------------------------------------------------------------------------
# NACK / ENQUEUE / DEQUEUE
# ---------------------------------------------------------------------------


def test_nack_requeues_immediately_and_counts(server):
    r = server.raw()
    job_id = addjob(r, "nq", b"x", 0, "RETRY", 300)
    r.execute("GETJOB", "FROM", "nq")
    assert r.execute("QLEN", "nq") == 0
    assert r.call("NACK", job_id) == b":1\r\n"
    assert r.execute("QLEN", "nq") == 1
    s = show(r, job_id)
    assert s[b"state"] == b"queued" and s[b"nacks"] == 1 and s[b"additional-deliveries"] == 0
    reply = r.execute("GETJOB", "WITHCOUNTERS", "FROM", "nq")
    assert reply == [[b"nq", job_id, b"x", b"nacks", 1, b"additional-deliveries", 0]]
    assert r.execute("NACK", job_id) == 1
    r.execute("GETJOB", "FROM", "nq")
    assert show(r, job_id)[b"nacks"] == 2


def test_nack_goes_to_queue_head_by_ctime(server):
    r = server.raw()
    first = addjob(r, "nq", b"first")
    second = addjob(r, "nq", b"second")
    assert r.execute("GETJOB", "FROM", "nq")[0][1] == first
    assert r.execute("NACK", first) == 1
    # queues are ordered by ctime: the older job comes first again (SPEC 6.3)
    got = [j[1] for j in r.execute("GETJOB", "COUNT", 2, "FROM", "nq")]
    assert got == [first, second]


def test_nack_only_active_jobs(server):
    r = server.raw()
    job_id = addjob(r, "nq", b"x")
    assert r.execute("NACK", job_id) == 0            # queued: not active
    assert r.execute("NACK", UNKNOWN_ID) == 0
    assert show(r, job_id)[b"nacks"] == 0


def test_nack_retry0_delivered_job_not_requeued(server):
    r = server.raw()
    job_id = addjob(r, "nq0", b"x", 0, "RETRY", 0)
    r.execute("GETJOB", "FROM", "nq0")
    assert r.execute("NACK", job_id) == 0
    assert r.execute("ENQUEUE", job_id) == 0
    assert r.execute("QLEN", "nq0") == 0


def test_enqueue_active_job_counts_additional_delivery(server):
    r = server.raw()
    job_id = addjob(r, "eq", b"x")
    r.execute("GETJOB", "FROM", "eq")
    assert r.call("ENQUEUE", job_id) == b":1\r\n"
    assert r.execute("ENQUEUE", job_id) == 0          # already queued
    s = show(r, job_id)
    assert s[b"state"] == b"queued"
    assert s[b"additional-deliveries"] == 1 and s[b"nacks"] == 0
    reply = r.execute("GETJOB", "WITHCOUNTERS", "FROM", "eq")
    assert reply == [[b"eq", job_id, b"x", b"nacks", 0, b"additional-deliveries", 1]]


def test_enqueue_delayed_job_queues_now(server):
    r = server.raw()
    job_id = addjob(r, "eq", b"x", 0, "DELAY", 100)
    assert r.execute("QLEN", "eq") == 0
    assert r.execute("ENQUEUE", job_id) == 1
    assert r.execute("QLEN", "eq") == 1
    # first queueing of a job is silent: no additional delivery (SPEC 7.2, 16.12)
    assert show(r, job_id)[b"additional-deliveries"] == 0


def test_dequeue(server):
    r = server.raw()
    a = addjob(r, "deq", b"a")
    b = addjob(r, "deq", b"b")
    assert r.call("DEQUEUE", a, UNKNOWN_ID) == b":1\r\n"
    assert r.execute("DEQUEUE", a) == 0
    assert show(r, a)[b"state"] == b"active"
    assert show(r, a)[b"next-requeue-within"] is not None   # will be requeued later
    assert r.execute("QLEN", "deq") == 1
    assert r.execute("GETJOB", "FROM", "deq")[0][1] == b
    assert r.execute("DEQUEUE", b) == 0               # active, not queued


def test_multi_id_commands_across_workers(server):
    r = server.raw()
    queues = [f"wq{i}" for i in range(12)]
    ids = [addjob(r, q, b"x") for q in queues]
    assert r.execute("DEQUEUE", *ids) == 12
    assert all(r.execute("QLEN", q) == 0 for q in queues)
    assert r.execute("ENQUEUE", *ids) == 12
    assert all(r.execute("QLEN", q) == 1 for q in queues)
    got = r.execute("GETJOB", "COUNT", 100, "FROM", *queues)
    assert sorted(j[1] for j in got) == sorted(ids)
    assert r.execute("NACK", *ids) == 12
    assert all(show(r, i)[b"nacks"] == 1 for i in ids)
    assert r.execute("DELJOB", *ids[:6]) == 6
    assert r.execute("FASTACK", *ids) == 6
    assert registered_jobs(r) == 0


# ---------------------------------------------------------------------------
# WORKING
# ---------------------------------------------------------------------------


def test_working_returns_retry(server):
    r = server.raw()
    job_id = addjob(r, "wq", b"x", 0, "RETRY", 7)
    r.execute("GETJOB", "FROM", "wq")
    assert r.call("WORKING", job_id) == b":7\r\n"
    default = addjob(r, "wq", b"y")
    assert r.call("WORKING", default) == b":300\r\n"


def test_working_dequeues_queued_job(server):
    r = server.raw()
    job_id = addjob(r, "wq", b"x", 0, "RETRY", 30)
    assert r.execute("WORKING", job_id) == 30
    assert r.execute("QLEN", "wq") == 0
    s = show(r, job_id)
    assert s[b"state"] == b"active"
    assert 29_000 <= s[b"next-requeue-within"] <= 30_300


def test_working_unknown_job(server):
    assert server.raw().call("WORKING", UNKNOWN_ID) == E_NOJOB


def test_working_arity(server):
    r = server.raw()
    assert r.call("WORKING") == b"-ERR wrong number of arguments for 'working' command\r\n"
    assert r.call("WORKING", UNKNOWN_ID, UNKNOWN_ID) == b"-ERR wrong number of arguments for 'working' command\r\n"


def test_working_toolate_after_half_ttl(server):
    r = server.raw()
    t0 = time.monotonic()
    job_id = addjob(r, "tlq", b"x", 0, "TTL", 4, "RETRY", 1)
    r.execute("GETJOB", "FROM", "tlq")
    # life = etime*1000 - ctime_ms is in (3000, 4000] ms: half is in (1500, 2000]
    wait_until(lambda: time.monotonic() - t0 >= 0.9, 2)
    assert r.execute("WORKING", job_id) == 1
    first_toolate = None
    deadline = t0 + 3.2
    while time.monotonic() < deadline:
        raw = r.call("WORKING", job_id)
        if raw == E_TOOLATE:
            first_toolate = time.monotonic() - t0
            break
        assert raw == b":1\r\n", raw
        time.sleep(0.05)
    assert first_toolate is not None, "WORKING never answered TOOLATE"
    assert 1.4 <= first_toolate <= 2.6, first_toolate
