"""RESP request parsing robustness over raw sockets (SPEC 1.1, 1.2, 1.3).

After every abuse another client must still work and the server process and all
of its workers must still be alive."""

import os
import socket
import time

import pytest
from support.jobs import addjob, show
from support.resp_client import Status, encode_command, parse_resp
from support.waits import wait_until


show, addjob, wait_until, encode = show, addjob, wait_until, encode_command

QUEUES = [f"pq-{i}" for i in range(12)]


def assert_server_healthy(srv):
    assert srv.all_alive(), f"server or a worker died; log:\n{srv.log_tail()}"
    with srv.raw() as r:
        assert r.call("PING") == b"+PONG\r\n"
        job_id = addjob(r, "health-q", b"x")
        assert r.execute("ACKJOB", job_id) == 1
    assert srv.all_alive()


def expect_error_and_close(conn, expected: bytes):
    data, closed = conn.read_until_closed(5)
    assert data == expected, data
    assert closed, "connection not closed after protocol error"


# ---------------------------------------------------------------------------
# inline commands
# ---------------------------------------------------------------------------


def test_inline_ping(server):
    r = server.raw()
    assert r.inline(b"PING\r\n") == b"+PONG\r\n"
    assert r.inline(b"PING\n") == b"+PONG\r\n"
    assert r.inline(b"ping hello\r\n") == b"$5\r\nhello\r\n"
    assert r.inline(b"   PING    \r\n") == b"+PONG\r\n"


def test_inline_quoted_args(server):
    r = server.raw()
    reply = r.inline(b'ADDJOB "queue one" "hello world" 0\r\n')
    job_id = parse_resp(reply)[0]
    assert type(job_id) is Status, reply
    s = show(r, bytes(job_id))
    assert s[b"queue"] == b"queue one" and s[b"body"] == b"hello world"


def test_inline_escapes(server):
    r = server.raw()
    job_id = bytes(parse_resp(r.inline(b'ADDJOB q "a\\x41\\n\\t\\"\\\\z" 0\r\n'))[0])
    assert show(r, job_id)[b"body"] == b'aA\n\t"\\z'
    job_id = bytes(parse_resp(r.inline(b"ADDJOB q 'it\\'s' 0\r\n"))[0])
    assert show(r, job_id)[b"body"] == b"it's"


def test_inline_empty_args_dropped(server):
    r = server.raw()
    # PING "" -> the empty argument is dropped -> plain PING (SPEC 1.2)
    assert r.inline(b'PING ""\r\n') == b"+PONG\r\n"


def test_inline_empty_line_ignored(server):
    r = server.raw()
    r.send(b"\r\n\n   \r\nPING\r\n")
    assert r.read_reply() == b"+PONG\r\n"
    assert not r.has_data(0.1)


def test_inline_unknown_command_and_arity(server):
    r = server.raw()
    assert r.inline(b"NOSUCH a b\r\n") == b"-ERR unknown command 'NOSUCH'\r\n"
    assert r.inline(b"qlen\r\n") == b"-ERR wrong number of arguments for 'qlen' command\r\n"


def test_unbalanced_quotes(server):
    r = server.raw()
    r.send(b'PING "abc\r\n')
    expect_error_and_close(r, b"-ERR Protocol error: unbalanced quotes in request\r\n")
    assert_server_healthy(server)


def test_unbalanced_single_quote(server):
    r = server.raw()
    r.send(b"ADDJOB q 'body 0\r\n")
    expect_error_and_close(r, b"-ERR Protocol error: unbalanced quotes in request\r\n")
    assert_server_healthy(server)


def test_too_big_inline_request(server):
    r = server.raw()
    try:
        r.send(b"A" * 66000)          # > 64 KiB, no newline
    except OSError:
        pass
    expect_error_and_close(r, b"-ERR Protocol error: too big inline request\r\n")
    assert_server_healthy(server)


def test_inline_just_under_limit_ok(server):
    r = server.raw()
    body = b"x" * (60 * 1024)
    reply = r.inline(b"ADDJOB bigline " + body + b" 0\r\n")
    assert reply.startswith(b"+D-"), reply[:80]
    assert r.execute("QLEN", "bigline") == 1


# ---------------------------------------------------------------------------
# multibulk
# ---------------------------------------------------------------------------


def test_multibulk_zero_and_negative_count_ignored(server):
    r = server.raw()
    r.send(b"*0\r\n*-1\r\n*0\r\n" + encode("PING"))
    assert r.read_reply() == b"+PONG\r\n"
    assert not r.has_data(0.1)


@pytest.mark.parametrize("payload", [b"*abc\r\n", b"*1x\r\n", b"*2000000\r\n", b"* 1\r\n"])
def test_invalid_multibulk_length(server, payload):
    r = server.raw()
    r.send(payload)
    expect_error_and_close(r, b"-ERR Protocol error: invalid multibulk length\r\n")
    assert_server_healthy(server)


@pytest.mark.parametrize("payload,char", [
    (b"*1\r\nPING\r\n", b"P"),
    (b"*2\r\n$4\r\nPING\r\n:5\r\n", b":"),
])
def test_expected_dollar(server, payload, char):
    r = server.raw()
    r.send(payload)
    expect_error_and_close(r, b"-ERR Protocol error: expected '$', got '" + char + b"'\r\n")
    assert_server_healthy(server)


@pytest.mark.parametrize("payload", [
    b"*1\r\n$999999999999\r\n",
    b"*1\r\n$536870913\r\n",          # 512 MiB + 1
    b"*1\r\n$-5\r\n",
    b"*1\r\n$abc\r\n",
])
def test_invalid_bulk_length(server, payload):
    r = server.raw()
    r.send(payload)
    expect_error_and_close(r, b"-ERR Protocol error: invalid bulk length\r\n")
    assert_server_healthy(server)


def test_too_big_mbulk_count_string(server):
    r = server.raw()
    try:
        r.send(b"*" + b"1" * 66000)
    except OSError:
        pass
    expect_error_and_close(r, b"-ERR Protocol error: too big mbulk count string\r\n")
    assert_server_healthy(server)


def test_too_big_bulk_count_string(server):
    r = server.raw()
    try:
        r.send(b"*1\r\n$" + b"1" * 66000)
    except OSError:
        pass
    expect_error_and_close(r, b"-ERR Protocol error: too big bulk count string\r\n")
    assert_server_healthy(server)


def test_replies_before_protocol_error_are_sent(server):
    r = server.raw()
    r.send(encode("PING") + encode("PING", "x") + b"*abc\r\n" + encode("PING"))
    data, closed = r.read_until_closed(5)
    assert data == b"+PONG\r\n$1\r\nx\r\n-ERR Protocol error: invalid multibulk length\r\n"
    assert closed


def test_half_command_then_disconnect(server):
    r = server.raw()
    r.send(b"*4\r\n$6\r\nADDJOB\r\n$7\r\nhalf-q1\r\n$4\r\nbo")
    r.close()
    r2 = server.raw()
    r2.send(b"ADDJOB half-q2 body")          # inline without newline
    r2.abort()
    r3 = server.raw()
    r3.send(b"*3\r\n$6\r\nADDJOB\r\n$7\r\nhalf-q3\r\n$4\r\nbody\r\n")   # missing the timeout arg
    r3.close()
    assert_server_healthy(server)
    with server.raw() as p:
        for q in ("half-q1", "half-q2", "half-q3"):
            assert p.execute("QLEN", q) == 0
        assert p.execute("INFO", "jobs") == b"# Jobs\r\nregistered_jobs:0\r\n"


def test_byte_by_byte_command(server):
    r = server.raw()
    for b in encode("PING", "slow"):
        r.send(bytes([b]))
    assert r.read_reply() == b"$4\r\nslow\r\n"
    for b in b"PING\r\n":
        r.send(bytes([b]))
    assert r.read_reply() == b"+PONG\r\n"


def test_large_argument_in_chunks(server):
    r = server.raw()
    body = os.urandom(3 * 1024 * 1024 + 7)
    data = encode("ADDJOB", "chunkq", body, 0)
    for i in range(0, len(data), 256 * 1024):
        r.send(data[i:i + 256 * 1024])
        time.sleep(0.002)
    job_id = bytes(r.read_parsed(timeout=30))
    assert r.execute("GETJOB", "FROM", "chunkq", timeout=30) == [[b"chunkq", job_id, body]]


def test_command_name_case_insensitive(server):
    r = server.raw()
    assert r.call("pInG") == b"+PONG\r\n"
    job_id = bytes(r.execute("aDdJoB", "cq", "b", 0))
    assert r.execute("qLeN", "cq") == 1
    assert r.execute("sHoW", job_id)[1] == job_id


# ---------------------------------------------------------------------------
# pipelining
# ---------------------------------------------------------------------------


def test_pipeline_many_commands_in_one_write(server):
    r = server.raw()
    cmds = []
    expected_kinds = []
    for i in range(200):
        q = QUEUES[i % 12]
        cmds.append(encode("ADDJOB", q, b"p%d" % i, 0))
        expected_kinds.append("id")
        if i % 10 == 0:
            cmds.append(encode("PING", b"m%d" % i))
            expected_kinds.append(b"m%d" % i)
            cmds.append(encode("QLEN", q))
            expected_kinds.append(("qlen", q, i))
    r.send(b"".join(cmds))
    for kind in expected_kinds:
        reply = r.read_parsed(timeout=15)
        if kind == "id":
            assert type(reply) is Status, reply
        elif isinstance(kind, tuple):
            _, q, i = kind
            # QLEN reflects exactly the ADDJOBs pipelined before it
            assert reply == sum(1 for j in range(i + 1) if QUEUES[j % 12] == q), (kind, reply)
        else:
            assert reply == kind
    assert not r.has_data(0.1)


def test_pipeline_add_then_get_each_queue(server):
    """Pipelined commands are executed in order even when they hit different workers."""
    r = server.raw()
    cmds = []
    for q in QUEUES:
        cmds.append(encode("ADDJOB", q, q.encode(), 0))
        cmds.append(encode("GETJOB", "NOHANG", "FROM", q))
        cmds.append(encode("QLEN", q))
    r.send(b"".join(cmds))
    for q in QUEUES:
        job_id = bytes(r.read_parsed())
        assert r.read_parsed() == [[q.encode(), job_id, q.encode()]]
        assert r.read_parsed() == 0
    assert r.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", *QUEUES) == b"*-1\r\n"


def test_pipeline_mixed_reply_sizes(server):
    r = server.raw()
    big = b"B" * 200_000
    cmds = [encode("ADDJOB", "mixq", big, 0), encode("PING")] * 20
    r.send(b"".join(cmds))
    ids = []
    for _ in range(20):
        ids.append(bytes(r.read_parsed(timeout=15)))
        assert r.read_reply(timeout=15) == b"+PONG\r\n"
    r.send(b"".join(encode("SHOW", i) for i in ids) + encode("PING"))
    for i in ids:
        s = parse_resp(r.read_reply(timeout=15))[0]
        assert s[1] == i and s[-1] == big
    assert r.read_reply() == b"+PONG\r\n"


def test_pipelined_quit_stops_processing(server):
    r = server.raw()
    r.send(encode("ADDJOB", "quitq", "a", 0) + encode("QUIT") + encode("ADDJOB", "quitq", "b", 0))
    data, closed = r.read_until_closed(5)
    assert closed
    assert data.startswith(b"+D-") and data.endswith(b"\r\n+OK\r\n"), data
    with server.raw() as p:
        assert p.execute("QLEN", "quitq") == 1


# ---------------------------------------------------------------------------
# many connections
# ---------------------------------------------------------------------------


def test_many_connections(server):
    conns = [server.raw() for _ in range(200)]
    for i, c in enumerate(conns):
        c.send(encode("PING", b"c%d" % i))
    for i, c in enumerate(conns):
        assert c.read_reply() == b"$%d\r\nc%d\r\n" % (len(b"c%d" % i), i)
    for c in conns[::2]:
        c.abort()
    for c in conns[1::2]:
        assert c.call("PING") == b"+PONG\r\n"
    assert_server_healthy(server)


def test_abusive_sequence_then_healthy(server):
    """All abuses in a row on fresh connections, then a normal workload."""
    abuses = [b"*abc\r\n", b"*1\r\nPING\r\n", b"*1\r\n$999999999999\r\n", b'PING "x\r\n',
              b"\x00\x01\x02\xff\r\n", b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq"]
    for payload in abuses:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(payload)
        s.close()
    assert_server_healthy(server)
    with server.raw() as r:
        ids = [addjob(r, q, b"ok") for q in QUEUES]
        assert r.execute("ACKJOB", *ids) == 12
