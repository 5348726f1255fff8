"""GETJOB (SPEC 3.2, 8.3, 16.3, 16.4): immediate path, options, errors, blocking basics."""

import time

import pytest
from support.jobs import addjob, show
from support.resp_client import Status, encode_command
from support.waits import wait_until



E_SYNTAX = b"-ERR syntax error\r\n"
E_COUNT = b"-ERR COUNT must be a number greater than zero\r\n"
E_TIMEOUT_INT = b"-ERR timeout is not an integer or out of range\r\n"
E_TIMEOUT_NEG = b"-ERR timeout is negative\r\n"


def blocked_clients(srv):
    return int(srv.info_fields("clients")["blocked_clients"])


# ---------------------------------------------------------------------------
# immediate path
# ---------------------------------------------------------------------------


def test_nohang_empty_is_null_array(server):
    r = server.raw()
    assert r.call("GETJOB", "NOHANG", "FROM", "emptyq") == b"*-1\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "e1", "e2", "e3") == b"*-1\r\n"


def test_single_job_exact_reply_bytes(server):
    r = server.raw()
    job_id = addjob(r, "q", b"body")
    raw = r.call("GETJOB", "FROM", "q")
    assert raw == b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$4\r\nbody\r\n"


def test_getjob_marks_active_and_decrements_qlen(server):
    r = server.raw()
    job_id = addjob(r, "q", b"b")
    assert r.execute("QLEN", "q") == 1
    assert r.execute("GETJOB", "NOHANG", "FROM", "q") == [[b"q", job_id, b"b"]]
    assert r.execute("QLEN", "q") == 0
    assert show(r, job_id)[b"state"] == b"active"
    assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"


def test_fifo_order_within_queue(server):
    r = server.raw()
    ids = [addjob(r, "fifo", b"%d" % i) for i in range(20)]
    got = []
    for _ in range(20):
        reply = r.execute("GETJOB", "NOHANG", "FROM", "fifo")
        got.append(reply[0][1])
    assert got == ids


def test_count(server):
    r = server.raw()
    ids = [addjob(r, "cq", b"%d" % i) for i in range(5)]
    reply = r.execute("GETJOB", "COUNT", 3, "FROM", "cq")
    assert [j[1] for j in reply] == ids[:3]
    reply = r.execute("GETJOB", "COUNT", 10, "NOHANG", "FROM", "cq")
    assert [j[1] for j in reply] == ids[3:]
    assert r.call("GETJOB", "COUNT", 10, "NOHANG", "FROM", "cq") == b"*-1\r\n"


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", ""])
def test_count_invalid(server, value):
    assert server.raw().call("GETJOB", "COUNT", value, "FROM", "q") == E_COUNT


def test_several_queues_left_to_right_sweeps(server):
    """One job per queue per sweep, queues scanned left to right (SPEC 3.2)."""
    r = server.raw()
    a1 = addjob(r, "qa", b"a1")
    a2 = addjob(r, "qa", b"a2")
    a3 = addjob(r, "qa", b"a3")
    b1 = addjob(r, "qb", b"b1")
    c1 = addjob(r, "qc", b"c1")
    c2 = addjob(r, "qc", b"c2")
    reply = r.execute("GETJOB", "COUNT", 100, "FROM", "qa", "qmissing", "qb", "qc")
    assert [j[1] for j in reply] == [a1, b1, c1, a2, c2, a3]
    assert [j[0] for j in reply] == [b"qa", b"qb", b"qc", b"qa", b"qc", b"qa"]


def test_several_queues_count_limits_sweep(server):
    r = server.raw()
    a1 = addjob(r, "qa", b"a1")
    addjob(r, "qa", b"a2")
    b1 = addjob(r, "qb", b"b1")
    assert [j[1] for j in r.execute("GETJOB", "COUNT", 2, "FROM", "qa", "qb")] == [a1, b1]
    # first non-empty queue from the left wins
    c1 = addjob(r, "qc", b"c1")
    assert [j[1] for j in r.execute("GETJOB", "FROM", "qempty", "qc", "qa")] == [c1]


def test_many_queues_spanning_workers_left_to_right(server):
    r = server.raw()
    queues = [f"lr-{i}" for i in range(12)]
    ids = {}
    for q in queues:
        ids[q] = [addjob(r, q, q.encode() + b"-1"), addjob(r, q, q.encode() + b"-2")]
    reply = r.execute("GETJOB", "COUNT", 24, "FROM", *queues)
    expected = [ids[q][0] for q in queues] + [ids[q][1] for q in queues]
    assert [j[1] for j in reply] == expected
    reversed_q = list(reversed(queues))
    for q in queues:
        addjob(r, q, b"x")
    reply = r.execute("GETJOB", "COUNT", 5, "FROM", *reversed_q)
    assert [j[0] for j in reply] == [q.encode() for q in reversed_q[:5]]


def test_withcounters_shape_and_types(server):
    r = server.raw()
    job_id = addjob(r, "wq", b"hello")
    raw = r.call("GETJOB", "WITHCOUNTERS", "FROM", "wq")
    assert raw == (b"*1\r\n*7\r\n$2\r\nwq\r\n$40\r\n" + job_id + b"\r\n$5\r\nhello\r\n"
                   b"$5\r\nnacks\r\n:0\r\n$21\r\nadditional-deliveries\r\n:0\r\n")


def test_withcounters_count_multiple(server):
    r = server.raw()
    ids = [addjob(r, "wq", b"%d" % i) for i in range(3)]
    reply = r.execute("GETJOB", "COUNT", 3, "WITHCOUNTERS", "FROM", "wq")
    assert len(reply) == 3
    for job, job_id in zip(reply, ids):
        assert len(job) == 7
        assert job[:2] == [b"wq", job_id]
        assert job[3] == b"nacks" and job[4] == 0
        assert job[5] == b"additional-deliveries" and job[6] == 0


def test_options_case_insensitive(server):
    r = server.raw()
    ids = [addjob(r, "ciq", b"x") for _ in range(2)]
    reply = r.execute("getjob", "nohang", "count", 2, "withcounters", "timeout", 10, "from", "ciq")
    assert [j[1] for j in reply] == ids
    assert all(len(j) == 7 for j in reply)


def test_options_after_from_are_queue_names(server):
    r = server.raw()
    job_id = addjob(r, "NOHANG", b"x")
    assert r.execute("GETJOB", "NOHANG", "FROM", "COUNT", "NOHANG") == [[b"NOHANG", job_id, b"x"]]


@pytest.mark.parametrize("args", [
    ("q",), ("FROM",), ("NOHANG",), ("NOHANG", "q"), ("BOGUS", "FROM", "q"),
    ("TIMEOUT",), ("COUNT",), ("NOHANG", "TIMEOUT"), ("NOHANG", "COUNT"),
    ("NOHANG", "FROM"),
])
def test_syntax_errors(server, args):
    assert server.raw().call("GETJOB", *args) == E_SYNTAX


def test_getjob_arity(server):
    assert server.raw().call("GETJOB") == b"-ERR wrong number of arguments for 'getjob' command\r\n"


@pytest.mark.parametrize("value", ["abc", "1.5", " 10"])
def test_timeout_not_integer(server, value):
    assert server.raw().call("GETJOB", "TIMEOUT", value, "FROM", "q") == E_TIMEOUT_INT


def test_timeout_negative(server):
    assert server.raw().call("GETJOB", "TIMEOUT", "-1", "FROM", "q") == E_TIMEOUT_NEG


# ---------------------------------------------------------------------------
# blocking basics
# ---------------------------------------------------------------------------


def test_timeout_returns_null_array_after_timeout(server):
    r = server.raw()
    t0 = time.monotonic()
    raw = r.call("GETJOB", "TIMEOUT", 300, "FROM", "emptyq", timeout=10)
    elapsed = time.monotonic() - t0
    assert raw == b"*-1\r\n"
    assert 0.25 <= elapsed <= 1.5, elapsed


def test_timeout_multi_queue_returns_null_array(server):
    r = server.raw()
    t0 = time.monotonic()
    raw = r.call("GETJOB", "TIMEOUT", 200, "FROM", *[f"tq{i}" for i in range(12)], timeout=10)
    elapsed = time.monotonic() - t0
    assert raw == b"*-1\r\n"
    assert 0.15 <= elapsed <= 1.5, elapsed
    assert blocked_clients(server) == 0


def test_blocked_client_gets_exactly_one_job_even_with_count(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "COUNT", 5, "FROM", "bq"))
    wait_until(lambda: blocked_clients(server) == 1, 5)
    assert not r.has_data(0.1)
    p = server.raw()
    p.send(b"".join(encode_command("ADDJOB", "bq", b"%d" % i, 0) for i in range(3)))
    ids = [bytes(p.read_parsed()) for _ in range(3)]
    reply = r.read_parsed(timeout=5)
    assert reply == [[b"bq", ids[0], b"0"]]
    assert p.execute("QLEN", "bq") == 2
    wait_until(lambda: blocked_clients(server) == 0, 5)


def test_blocked_client_withcounters_remembered(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "WITHCOUNTERS", "TIMEOUT", 10000, "FROM", "bq"))
    wait_until(lambda: blocked_clients(server) == 1, 5)
    job_id = addjob(server.raw(), "bq", b"payload")
    raw = r.read_reply(timeout=5)
    assert raw == (b"*1\r\n*7\r\n$2\r\nbq\r\n$40\r\n" + job_id + b"\r\n$7\r\npayload\r\n"
                   b"$5\r\nnacks\r\n:0\r\n$21\r\nadditional-deliveries\r\n:0\r\n")


def test_blocked_client_exact_reply_bytes(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "FROM", "bq"))
    wait_until(lambda: blocked_clients(server) == 1, 5)
    job_id = addjob(server.raw(), "bq", b"xyz")
    assert r.read_reply(timeout=5) == b"*1\r\n*3\r\n$2\r\nbq\r\n$40\r\n" + job_id + b"\r\n$3\r\nxyz\r\n"


def test_blocking_on_duplicate_queue_names(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", "dq", "dq", "dq"))
    wait_until(lambda: blocked_clients(server) == 1, 5)   # duplicates counted once
    p = server.raw()
    id1 = addjob(p, "dq", b"1")
    id2 = addjob(p, "dq", b"2")
    assert r.read_parsed(timeout=5) == [[b"dq", id1, b"1"]]
    assert not r.has_data(0.2)
    assert p.execute("QLEN", "dq") == 1
    assert p.execute("GETJOB", "NOHANG", "FROM", "dq") == [[b"dq", id2, b"2"]]


def test_blocked_served_by_delayed_job(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", "dlq"))
    wait_until(lambda: blocked_clients(server) == 1, 5)
    t0 = time.monotonic()
    job_id = addjob(server.raw(), "dlq", b"later", 0, "DELAY", 1)
    reply = r.read_parsed(timeout=5)
    elapsed = time.monotonic() - t0
    assert reply == [[b"dlq", job_id, b"later"]]
    assert 0.8 <= elapsed <= 2.0, elapsed


def test_pipelined_input_of_blocked_client_processed_after_unblock(server):
    """SPEC 1.2: a blocked client's further pipelined input is buffered."""
    r = server.raw()
    r.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", "pq") + encode_command("PING", "after")
           + encode_command("QLEN", "pq") + encode_command("ADDJOB", "pq2", "y", 0))
    wait_until(lambda: blocked_clients(server) == 1, 5)
    assert not r.has_data(0.3), r.buf
    p = server.raw()
    assert p.execute("QLEN", "pq2") == 0          # the pipelined ADDJOB has not run yet
    job_id = addjob(p, "pq", b"x")
    assert r.read_parsed(timeout=5) == [[b"pq", job_id, b"x"]]
    assert r.read_reply(timeout=5) == b"$5\r\nafter\r\n"
    assert r.read_reply(timeout=5) == b":0\r\n"
    assert type(r.read_parsed(timeout=5)) is Status
    assert p.execute("QLEN", "pq2") == 1


def test_flushall_unblocks_with_null_array(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "FROM", "fq", "fq2"))
    wait_until(lambda: blocked_clients(server) >= 1, 5)
    assert server.raw().call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    assert r.read_reply(timeout=5) == b"*-1\r\n"
    wait_until(lambda: blocked_clients(server) == 0, 5)
    # the connection is still usable
    assert r.call("PING") == b"+PONG\r\n"


def test_nohang_never_blocks(server):
    r = server.raw()
    t0 = time.monotonic()
    assert r.call("GETJOB", "NOHANG", "TIMEOUT", 5000, "FROM", "nq") == b"*-1\r\n"
    assert time.monotonic() - t0 < 1.0
    assert blocked_clients(server) == 0


def test_timeout_zero_blocks_until_job(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "TIMEOUT", 0, "FROM", "zq"))
    wait_until(lambda: blocked_clients(server) == 1, 5)
    assert not r.has_data(0.6)      # longer than any cron tick: TIMEOUT 0 = forever
    job_id = addjob(server.raw(), "zq", b"z")
    assert r.read_parsed(timeout=5) == [[b"zq", job_id, b"z"]]


def test_disconnect_while_blocked_is_cleaned_up(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "FROM", "cq1", "cq2"))
    wait_until(lambda: blocked_clients(server) >= 1, 5)
    r.abort()
    wait_until(lambda: blocked_clients(server) == 0, 5)
    p = server.raw()
    addjob(p, "cq1", b"x")
    addjob(p, "cq2", b"y")
    assert p.execute("QLEN", "cq1") == 1 and p.execute("QLEN", "cq2") == 1


def test_redis_py_client_roundtrip(server):
    """A stock redis-py (protocol 2) client can drive the basic cycle."""
    c = server.client()
    job_id = c.execute_command("ADDJOB", "rq", "hello", 0)
    assert isinstance(job_id, bytes) and len(job_id) == 40
    reply = c.execute_command("GETJOB", "TIMEOUT", 1000, "FROM", "rq")
    assert reply == [[b"rq", job_id, b"hello"]]
    assert c.execute_command("ACKJOB", job_id) == 1
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "rq") is None
