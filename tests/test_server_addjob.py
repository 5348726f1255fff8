"""ADDJOB (SPEC 3.1), job IDs (SPEC 5), default RETRY/REPLICATE rules."""

import os
import time

import pytest
from support.info import parse_info
from support.jobs import JOB_ID_RE, addjob, show
from support.resp_client import Status, encode_command



E_SYNTAX = b"-ERR syntax error\r\n"
E_REPLICATE = b"-ERR REPLICATE must be between 1 and 65535\r\n"
E_TTL = b"-ERR TTL must be a number > 0\r\n"
E_RETRY = b"-ERR RETRY time must be a non negative number\r\n"
E_DELAY = b"-ERR DELAY time must be a non negative number\r\n"
E_MAXLEN = b"-ERR MAXLEN must be a positive number\r\n"
E_TIMEOUT_INT = b"-ERR timeout is not an integer or out of range\r\n"
E_TIMEOUT_NEG = b"-ERR timeout is negative\r\n"
E_DELAY_TTL = b"-ERR The specified DELAY is greater than TTL. Job refused since would never be delivered\r\n"
E_NOREPL = b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"
E_RETRY0_REPL = b"-ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)\r\n"
E_MAXLEN_Q = b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n"


def _myid(r):
    hello = r.execute("HELLO")
    return hello[1]


# ---------------------------------------------------------------------------
# success path, reply type, ID format
# ---------------------------------------------------------------------------


def test_addjob_reply_is_status_with_valid_id(server):
    r = server.raw()
    raw = r.call("ADDJOB", "q", "hello world", 0)
    assert raw.startswith(b"+D-") and raw.endswith(b"\r\n"), raw  # status, not bulk (SPEC 16.1)
    job_id = raw[1:-2]
    assert len(job_id) == 40
    assert JOB_ID_RE.match(job_id), job_id
    assert job_id[2:10] == _myid(r)[:8]
    assert job_id.endswith(b"-05a1")  # default TTL 1 day, retry > 0 -> odd (SPEC 5)
    assert r.execute("QLEN", "q") == 1


def test_job_ids_unique_and_node_prefix(server):
    r = server.raw()
    prefix = _myid(r)[:8]
    cmds = b"".join(encode_command("ADDJOB", f"q{i % 7}", b"x", 0) for i in range(300))
    r.send(cmds)
    ids = []
    for _ in range(300):
        reply = r.read_parsed()
        assert type(reply) is Status, reply
        ids.append(bytes(reply))
    assert len(set(ids)) == 300
    for job_id in ids:
        assert JOB_ID_RE.match(job_id), job_id
        assert job_id[2:10] == prefix


def test_hello_myid_is_40_hex(server):
    r = server.raw()
    myid = _myid(r)
    assert len(myid) == 40
    assert all(ch in b"0123456789abcdef" for ch in myid), myid


@pytest.mark.parametrize("opts,suffix", [
    ((), b"05a1"),                              # 1440 min -> odd 1441
    (("TTL", 30), b"0001"),                     # 0 min -> odd 1
    (("TTL", 10), b"0001"),
    (("TTL", 600, "RETRY", 60), b"000b"),       # 10 -> 11
    (("TTL", 3600), b"003d"),                   # 60 -> 61
    (("TTL", 200, "DELAY", 100), b"0003"),      # 3 -> 3
    (("TTL", 3599), b"003b"),                   # 59 -> 59
    (("RETRY", 0, "REPLICATE", 1), b"05a0"),    # retry 0 -> even
    (("RETRY", 0, "TTL", 10), b"0000"),
    (("RETRY", 0, "TTL", 180), b"0002"),        # 3 -> 2
    (("TTL", 65535 * 60 * 3), b"ffff"),         # capped at 65535 (odd already)
    (("TTL", 65535 * 60 * 3, "RETRY", 0), b"fffe"),
])
def test_job_id_ttl_field_parity(server, opts, suffix):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, *opts)
    assert job_id[-4:] == suffix, (opts, job_id)
    assert job_id[35:36] == b"-"


def test_show_after_addjob_defaults(server):
    r = server.raw()
    before_ms = time.time() * 1000
    job_id = addjob(r, "myqueue", b"the body")
    after_ms = time.time() * 1000
    s = show(r, job_id)
    assert s[b"id"] == job_id
    assert s[b"queue"] == b"myqueue"
    assert s[b"state"] == b"queued"
    assert s[b"repl"] == 1                     # min(3, cluster_size=1)
    assert 86398 <= s[b"ttl"] <= 86400
    assert s[b"delay"] == 0
    assert s[b"retry"] == 300                  # min(86400/10, 300)
    assert s[b"nacks"] == 0 and s[b"additional-deliveries"] == 0
    assert s[b"nodes-delivered"] == [_myid(r)]
    assert s[b"nodes-confirmed"] == []
    assert s[b"body"] == b"the body"
    # ctime is ms * 1e6 (SPEC 6.3, 16.8)
    assert (before_ms - 2000) * 1_000_000 <= s[b"ctime"] <= (after_ms + 2000) * 1_000_000


@pytest.mark.parametrize("ttl,expected_retry", [
    (100, 10), (5, 1), (9, 1), (10, 1), (19, 1), (20, 2), (2999, 299), (3000, 300),
    (3010, 300), (86400, 300), (1, 1),
])
def test_default_retry_rule(server, ttl, expected_retry):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, "TTL", ttl)
    assert show(r, job_id)[b"retry"] == expected_retry


def test_explicit_options_reflected_in_show(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, "REPLICATE", 1, "DELAY", 50, "RETRY", 7, "TTL", 3600, "MAXLEN", 10)
    s = show(r, job_id)
    assert s[b"repl"] == 1
    assert s[b"delay"] == 50
    assert s[b"retry"] == 7
    assert 3598 <= s[b"ttl"] <= 3600
    assert s[b"state"] == b"active"            # delayed: not queued yet
    assert r.execute("QLEN", "q") == 0


def test_retry_greater_than_ttl_is_accepted(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, "TTL", 10, "RETRY", 20)
    assert job_id.endswith(b"-0001")
    assert show(r, job_id)[b"retry"] == 20


def test_options_case_insensitive_any_order(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, "ttl", 100, "rEpLiCaTe", 1, "Retry", 4, "delay", 2, "maxLEN", 5, "async")
    s = show(r, job_id)
    assert (s[b"retry"], s[b"delay"], s[b"repl"]) == (4, 2, 1)
    assert 98 <= s[b"ttl"] <= 100


def test_options_last_occurrence_wins(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, "RETRY", 4, "RETRY", 9)
    assert show(r, job_id)[b"retry"] == 9


def test_async_single_node_is_immediate_and_queued(server):
    r = server.raw()
    job_id = addjob(r, "q", b"x", 0, "ASYNC")
    assert show(r, job_id)[b"state"] == b"queued"
    assert r.execute("QLEN", "q") == 1


def test_addjob_binary_body_roundtrip(server):
    r = server.raw()
    body = bytes(range(256)) + b"\r\n\x00$3\r\n*1\r\n"
    job_id = addjob(r, "binq", body)
    reply = r.execute("GETJOB", "NOHANG", "FROM", "binq")
    assert reply == [[b"binq", job_id, body]]


def test_addjob_large_body_roundtrip(server):
    r = server.raw()
    body = os.urandom(2 * 1024 * 1024)
    job_id = addjob(r, "bigq", body)
    assert show(r, job_id)[b"body"] == body
    assert r.execute("GETJOB", "NOHANG", "FROM", "bigq", timeout=30) == [[b"bigq", job_id, body]]


def test_empty_body_and_queue_names_with_spaces(server):
    r = server.raw()
    job_id = addjob(r, "queue with spaces", b"")
    assert r.execute("GETJOB", "NOHANG", "FROM", "queue with spaces") == [[b"queue with spaces", job_id, b""]]


def test_ctime_strictly_increasing_within_queue(server):
    r = server.raw()
    ids = [addjob(r, "ctq", b"%d" % i) for i in range(50)]
    ctimes = [show(r, i)[b"ctime"] for i in ids]
    assert all(a < b for a, b in zip(ctimes, ctimes[1:])), ctimes


# ---------------------------------------------------------------------------
# validation errors (exact strings, SPEC 3.1)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "65536", "abc", "1.5", "100000000000000000000"])
def test_replicate_invalid(server, value):
    assert server.raw().call("ADDJOB", "q", "b", 0, "REPLICATE", value) == E_REPLICATE


@pytest.mark.parametrize("value", ["0", "-5", "abc", "", "1.0", " 10", "99999999999999999999"])
def test_ttl_invalid(server, value):
    # empty string parses as 0 (SPEC 1.3) -> "> 0" error; leading whitespace rejected
    assert server.raw().call("ADDJOB", "q", "b", 0, "TTL", value) == E_TTL


@pytest.mark.parametrize("value", ["-1", "abc", "1x", "99999999999999999999"])
def test_retry_invalid(server, value):
    assert server.raw().call("ADDJOB", "q", "b", 0, "RETRY", value) == E_RETRY


@pytest.mark.parametrize("value", ["-1", "abc", "2s"])
def test_delay_invalid(server, value):
    assert server.raw().call("ADDJOB", "q", "b", 0, "DELAY", value) == E_DELAY


@pytest.mark.parametrize("value", ["0", "-1", "abc", ""])
def test_maxlen_invalid(server, value):
    assert server.raw().call("ADDJOB", "q", "b", 0, "MAXLEN", value) == E_MAXLEN


@pytest.mark.parametrize("opt", ["REPLICATE", "DELAY", "RETRY", "TTL", "MAXLEN", "ttl"])
def test_option_missing_value_is_syntax_error(server, opt):
    assert server.raw().call("ADDJOB", "q", "b", 0, opt) == E_SYNTAX


@pytest.mark.parametrize("extra", [("BOGUS",), ("TTL", 10, "FOO"), ("ASYNC", "ASYNCX"), ("10",)])
def test_unknown_option_is_syntax_error(server, extra):
    assert server.raw().call("ADDJOB", "q", "b", 0, *extra) == E_SYNTAX


def test_integer_parsing_rules(server):
    r = server.raw()
    s = show(r, addjob(r, "q", b"x", 0, "TTL", "+100"))
    assert 98 <= s[b"ttl"] <= 100
    s = show(r, addjob(r, "q", b"x", 0, "TTL", "0100", "RETRY", "007"))
    assert 98 <= s[b"ttl"] <= 100 and s[b"retry"] == 7
    # empty string parses as 0: DELAY "" -> no delay
    s = show(r, addjob(r, "q", b"x", "", "DELAY", ""))
    assert s[b"delay"] == 0 and s[b"state"] == b"queued"


@pytest.mark.parametrize("timeout", ["abc", "1.5", " 1", "99999999999999999999"])
def test_timeout_not_integer(server, timeout):
    assert server.raw().call("ADDJOB", "q", "b", timeout) == E_TIMEOUT_INT


def test_timeout_negative(server):
    assert server.raw().call("ADDJOB", "q", "b", -1) == E_TIMEOUT_NEG


def test_option_errors_come_before_timeout_errors(server):
    r = server.raw()
    assert r.call("ADDJOB", "q", "b", "abc", "BOGUS") == E_SYNTAX
    assert r.call("ADDJOB", "q", "b", "abc", "TTL", 0) == E_TTL
    assert r.call("ADDJOB", "q", "b", "-5", "DELAY", 10, "TTL", 5) == E_TIMEOUT_NEG


@pytest.mark.parametrize("delay,ttl", [(10, 10), (20, 10), (86400, None), (1, 1)])
def test_delay_not_less_than_ttl(server, delay, ttl):
    opts = ["DELAY", delay] + (["TTL", ttl] if ttl is not None else [])
    assert server.raw().call("ADDJOB", "q", "b", 0, *opts) == E_DELAY_TTL


def test_delay_just_below_ttl_ok(server):
    r = server.raw()
    addjob(r, "q", b"b", 0, "DELAY", 9, "TTL", 10)
    addjob(r, "q", b"b", 0, "DELAY", 86399)


@pytest.mark.parametrize("opts", [
    ("REPLICATE", 2), ("REPLICATE", 3), ("REPLICATE", 65535), ("REPLICATE", 2, "ASYNC"),
])
def test_replicate_more_than_cluster_single_node(server, opts):
    r = server.raw()
    assert r.call("ADDJOB", "q", "b", 0, *opts) == E_NOREPL
    assert r.execute("QLEN", "q") == 0
    assert parse_info(r.execute("INFO", "jobs"))["registered_jobs"] == "0"


def test_retry0_with_explicit_replicate_gt1_error(server):
    # step 2 (RETRY 0 + REPLICATE > 1) is checked before reachability (step 6)
    assert server.raw().call("ADDJOB", "q", "b", 0, "RETRY", 0, "REPLICATE", 2) == E_RETRY0_REPL


def test_retry0_replicate1_ok(server):
    r = server.raw()
    job_id = addjob(r, "q", b"b", 0, "RETRY", 0, "REPLICATE", 1)
    s = show(r, job_id)
    assert s[b"retry"] == 0 and s[b"state"] == b"queued"
    assert s[b"next-requeue-within"] is None   # qtime 0 -> null bulk (SPEC 3.9)


def test_retry0_default_replicate_on_single_node_ok(server):
    # default REPLICATE = min(3, cluster_size) = 1 on a single node
    r = server.raw()
    job_id = addjob(r, "q", b"b", 0, "RETRY", 0)
    assert job_id.endswith(b"-05a0")


def test_option_errors_leave_no_job(server):
    r = server.raw()
    for args in (("TTL", 0), ("RETRY", -1), ("BOGUS",), ("DELAY", 5, "TTL", 5), ("REPLICATE", 2)):
        assert r.execute("ADDJOB", "q", "b", 0, *args)[:1] in (b"E", b"N")  # ERR / NOREPL
    assert r.execute("QLEN", "q") == 0
    assert parse_info(r.execute("INFO", "jobs"))["registered_jobs"] == "0"


# ---------------------------------------------------------------------------
# MAXLEN
# ---------------------------------------------------------------------------


def test_maxlen(server):
    r = server.raw()
    addjob(r, "mq", b"1", 0, "MAXLEN", 1)        # queue missing -> fine
    addjob(r, "mq", b"2", 0, "MAXLEN", 2)        # len 1 < 2
    assert r.call("ADDJOB", "mq", "3", 0, "MAXLEN", 2) == E_MAXLEN_Q   # len 2 >= 2
    assert r.call("ADDJOB", "mq", "3", 0, "MAXLEN", 1) == E_MAXLEN_Q
    assert r.execute("QLEN", "mq") == 2
    addjob(r, "mq", b"3", 0, "MAXLEN", 3)
    assert r.execute("QLEN", "mq") == 3


def test_maxlen_counts_only_queued_jobs(server):
    r = server.raw()
    addjob(r, "mq2", b"1")
    addjob(r, "mq2", b"2")
    assert r.execute("GETJOB", "FROM", "mq2")[0][2] == b"1"
    addjob(r, "mq2", b"3", 0, "MAXLEN", 2)       # only 1 queued now


# ---------------------------------------------------------------------------
# arity
# ---------------------------------------------------------------------------


def test_addjob_arity(server):
    r = server.raw()
    assert r.call("ADDJOB", "q", "b") == b"-ERR wrong number of arguments for 'addjob' command\r\n"
    assert r.call("AddJob", "q") == b"-ERR wrong number of arguments for 'addjob' command\r\n"
    assert r.call("ADDJOB") == b"-ERR wrong number of arguments for 'addjob' command\r\n"
