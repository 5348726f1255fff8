"""Admin command surface of the front-end (SPEC 1.3, 1.4, 2, 4.3, 4.5, 13, 14):
dispatch order with requirepass, AUTH, CLIENT, MONITOR, SLOWLOG, TIME, COMMAND, LATENCY,
DEBUG errors, CONFIG SET side effects (maxclients, requirepass, timeout, loglevel,
client-output-buffer-limit), rename-command, INFO sections and metrics.

Raw sockets check exact bytes; redis-cli is run as a subprocess for what a person sees.
The RESP3 handshake and redis-py's default protocol are in tests/test_server_resp3.py.
"""

import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import time

import pytest


import conftest as _c  # pytest registers tests/conftest.py under this name
Status, Err, NULL_ARRAY = _c.Status, _c.Err, _c.NULL_ARRAY
addjob, wait_until, encode = _c.addjob, _c.wait_until, _c.encode_command
parse_info, info_sections = _c.parse_info, _c.info_sections

OK = b"+OK\r\n"
NOAUTH = b"-NOAUTH Authentication required.\r\n"
CLIENT_SYNTAX = (b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                 b"SETNAME connection-name)\r\n")
SYNTAX = b"-ERR syntax error\r\n"
NOT_INT = b"-ERR value is not an integer or out of range\r\n"
UNKNOWN_ID = "D-00000000-000000000000000000000000-0000"
REDIS_CLI = shutil.which("redis-cli")
needs_cli = pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed")

CLIENT_LINE = re.compile(
    r"id=(\d+) addr=(127\.0\.0\.1:\d+) fd=(\d+) name=(\S*) age=(\d+) idle=(\d+) "
    r"flags=([ObcuAUN]+) qbuf=(\d+) qbuf-free=(\d+) obl=(\d+) oll=(\d+) omem=(\d+) "
    r"events=(r|w|rw) cmd=(\S+)")


def arity_err(name):
    return b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()


def cli(srv, *args, timeout=20, stdin=None, env=None):
    """redis-cli against srv; returns the CompletedProcess (text)."""
    return subprocess.run([REDIS_CLI, "-p", str(srv.port), *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=env)


def addr_of(conn):
    host, port = conn.sock.getsockname()[:2]
    return f"{host}:{port}"


def client_list(conn):
    text = conn.execute("CLIENT", "LIST").decode()
    assert text.endswith("\n")
    rows = []
    for line in text.splitlines():
        m = CLIENT_LINE.fullmatch(line)
        assert m, line
        rows.append(dict(kv.split("=", 1) for kv in line.split(" ")))
    return rows


def start_with_password(start_server, password, workers=1, extra=()):
    """start_server() waits for +PONG, which a server with requirepass never gives: start
    without waiting and wait for -NOAUTH instead."""
    srv = start_server(workers=workers, extra_args=("--requirepass", password, *extra),
                       wait=False)

    def ready():
        try:
            with _c.RawConn(srv.port, timeout=2) as r:
                return r.call("PING") == NOAUTH
        except OSError:
            return False

    wait_until(ready, timeout=30, interval=0.05, message=srv.log_tail())
    wait_until(lambda: len(srv.worker_pids()) >= workers, timeout=10)
    srv.record_descendants()
    return srv


# ---------------------------------------------------------------------------
# dispatch order (SPEC 1.3) and AUTH (SPEC 4.5)
# ---------------------------------------------------------------------------


def test_dispatch_order_with_requirepass(start_server):
    srv = start_with_password(start_server, "s3cret")
    r = srv.raw()
    # 2. unknown and 3. arity come before 4. NOAUTH
    assert r.call("NOSUCH", "x") == b"-ERR unknown command 'NOSUCH'\r\n"
    assert r.call("QLEN") == arity_err("qlen")
    assert r.call("AUTH") == arity_err("auth")
    assert r.call("AUTH", "a", "b") == arity_err("auth")
    # 4. every command but AUTH (and HELLO <protover>, see test_server_resp3)
    for args in (("PING",), ("QLEN", "q"), ("ADDJOB", "q", "b", "0"), ("INFO",), ("HELLO",),
                 ("CONFIG", "GET", "port"), ("DEBUG", "FLUSHALL"), ("SHOW", UNKNOWN_ID),
                 ("GETJOB", "FROM", "q"), ("CLIENT", "LIST"), ("MONITOR",), ("SLOWLOG", "LEN"),
                 ("COMMAND",), ("TIME",)):
        assert r.call(*args) == NOAUTH, args
    assert r.call("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert r.call("PING") == NOAUTH
    assert r.call("AUTH", "s3cret") == OK
    assert r.call("PING") == b"+PONG\r\n"
    assert r.call("QLEN", "q") == b":0\r\n"
    # a wrong password de-authenticates
    assert r.call("AUTH", "nope") == b"-ERR invalid password\r\n"
    assert r.call("QLEN", "q") == NOAUTH
    # 1. QUIT is answered before anything, authenticated or not
    r.send(encode("QUIT", "any", "args"))
    data, closed = r.read_until_closed()
    assert data == OK and closed


def test_auth_without_password_and_config_set_requirepass(start_server):
    srv = start_server()
    r, other = srv.raw(), srv.raw()
    assert r.call("AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"
    assert r.call("PING") == b"+PONG\r\n"
    assert r.execute("CONFIG", "GET", "requirepass") == [b"requirepass", b""]
    assert r.call("CONFIG", "SET", "requirepass", "pw") == OK
    # as upstream, clients are not authenticated just because they connected earlier
    assert r.call("PING") == NOAUTH
    assert other.call("QLEN", "q") == NOAUTH
    assert srv.raw().call("PING") == NOAUTH
    assert r.call("AUTH", "pw") == OK
    assert r.execute("CONFIG", "GET", "requirepass") == [b"requirepass", b"pw"]
    assert r.call("CONFIG", "SET", "requirepass", "") == OK        # empty clears it
    assert other.call("QLEN", "q") == b":0\r\n"
    assert srv.raw().call("AUTH", "pw") == b"-ERR Client sent AUTH, but no password is set\r\n"


def test_requirepass_long_password_and_binary_safe(start_server):
    srv = start_server()
    r = srv.raw()
    pw = "p" * 512
    assert r.call("CONFIG", "SET", "requirepass", pw) == OK
    assert r.call("AUTH", pw[:-1]) == b"-ERR invalid password\r\n"
    assert r.call("AUTH", pw) == OK
    assert r.call("AUTH", pw + "x") == b"-ERR invalid password\r\n"
    assert r.call("AUTH", pw) == OK
    assert r.call("CONFIG", "SET", "requirepass", "") == OK


@needs_cli
def test_requirepass_through_redis_cli(start_server):
    srv = start_with_password(start_server, "clipw")
    out = cli(srv, "--no-raw", "PING")
    assert out.stdout.strip() == "(error) NOAUTH Authentication required."
    out = cli(srv, "-a", "clipw", "--no-auth-warning", "PING")
    assert out.returncode == 0 and out.stdout == "PONG\n", out
    out = cli(srv, "-a", "bad", "--no-auth-warning", "--no-raw", "PING")
    assert "invalid password" in out.stdout + out.stderr, out


# ---------------------------------------------------------------------------
# CLIENT (SPEC 4.5)
# ---------------------------------------------------------------------------


def test_client_list_format(server):
    a, b = server.raw(), server.raw()
    assert b.call("CLIENT", "SETNAME", "worker-b") == OK
    b.call("QLEN", "q")
    raw = a.call("CLIENT", "LIST")
    assert raw.startswith(b"$")
    rows = {row["addr"]: row for row in client_list(a)}
    ra, rb = rows[addr_of(a)], rows[addr_of(b)]
    assert rb["name"] == "worker-b" and rb["cmd"] == "qlen" and rb["flags"] == "N"
    assert ra["cmd"] == "client" and ra["name"] == ""
    assert int(rb["id"]) > 0 and int(ra["id"]) != int(rb["id"])
    assert rb["events"] == "r" and rb["oll"] == "0" and rb["omem"] == "0"
    # a new connection that never sent a command
    c = server.raw()
    wait_until(lambda: addr_of(c) in {r["addr"] for r in client_list(a)}, 5)
    assert {r["addr"]: r for r in client_list(a)}[addr_of(c)]["cmd"] == "NULL"


def test_client_list_flags_blocked_and_monitor(server):
    a, blocked, mon = server.raw(), server.raw(), server.raw()
    blocked.send(encode("GETJOB", "TIMEOUT", 10000, "FROM", "flagq"))
    assert mon.call("MONITOR") == OK

    def flags():
        rows = {r["addr"]: r["flags"] for r in client_list(a)}
        return rows.get(addr_of(blocked)) == "b" and rows.get(addr_of(mon)) == "O" and rows

    wait_until(flags, 5)
    addjob(server.raw(), "flagq", b"x")
    assert len(blocked.read_parsed(timeout=5)) == 1


def test_client_setname_getname(server):
    r = server.raw()
    assert r.call("CLIENT", "GETNAME") == b"$-1\r\n"
    assert r.call("CLIENT", "SETNAME", "my-conn_1.2!~") == OK
    assert r.call("CLIENT", "GETNAME") == b"$13\r\nmy-conn_1.2!~\r\n"
    bad = b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    for name in ("a b", "a\nb", "tab\there", "caf\u00e9", "\x7f"):
        assert r.call("CLIENT", "SETNAME", name) == bad, name
    assert r.call("CLIENT", "GETNAME") == b"$13\r\nmy-conn_1.2!~\r\n"
    assert r.call("CLIENT", "SETNAME", "") == OK            # empty clears
    assert r.call("CLIENT", "GETNAME") == b"$-1\r\n"


def test_client_id_info_setinfo(server):
    r = server.raw()
    cid = r.execute("CLIENT", "ID")
    assert isinstance(cid, int) and cid > 0
    assert server.raw().execute("CLIENT", "ID") > cid
    info = r.execute("CLIENT", "INFO").decode()
    assert CLIENT_LINE.fullmatch(info.rstrip("\n")) and info.startswith(f"id={cid} ")
    assert r.call("CLIENT", "SETINFO", "LIB-NAME", "redis-py") == OK
    assert r.call("CLIENT", "SETINFO", "lib-ver", "8.1.0") == OK
    assert r.call("CLIENT", "SETINFO", "bogus", "x") == b"-ERR Unrecognized option 'bogus'\r\n"
    assert r.call("CLIENT", "SETINFO", "LIB-NAME", "a b") == (
        b"-ERR lib-name cannot contain spaces, newlines or special characters.\r\n")
    assert r.call("CLIENT", "SETINFO", "LIB-NAME") == CLIENT_SYNTAX


@pytest.mark.parametrize("args", [
    ("CLIENT", "BOGUS"), ("CLIENT", "LIST", "x"), ("CLIENT", "GETNAME", "x"),
    ("CLIENT", "SETNAME"), ("CLIENT", "SETNAME", "a", "b"), ("CLIENT", "PAUSE"),
    ("CLIENT", "REPLY"), ("CLIENT", "ID", "1"), ("CLIENT", "MAINT_NOTIFICATIONS", "ON"),
])
def test_client_syntax_errors(server, args):
    assert server.raw().call(*args) == CLIENT_SYNTAX


def test_client_arity(server):
    assert server.raw().call("CLIENT") == arity_err("client")


def test_client_kill_old_form(server):
    a, b = server.raw(), server.raw()
    assert b.call("PING") == b"+PONG\r\n"
    target = addr_of(b)
    assert a.call("CLIENT", "KILL", target) == OK
    data, closed = b.read_until_closed(timeout=5)
    assert closed and data == b""
    assert a.call("CLIENT", "KILL", target) == b"-ERR No such client\r\n"
    assert a.call("CLIENT", "KILL", "1.2.3.4:5") == b"-ERR No such client\r\n"
    # the old form may kill the caller itself: +OK, then the connection closes
    a.send(encode("CLIENT", "KILL", addr_of(a)) + encode("PING"))
    data, closed = a.read_until_closed(timeout=5)
    assert data == OK and closed


def test_client_kill_filters(server):
    a, b, c = server.raw(), server.raw(), server.raw()
    bid = b.execute("CLIENT", "ID")
    c.call("PING")
    assert a.call("CLIENT", "KILL", "ID", bid) == b":1\r\n"
    assert b.read_until_closed(timeout=5)[1]
    assert a.call("CLIENT", "KILL", "ID", bid) == b":0\r\n"
    assert a.call("CLIENT", "KILL", "ADDR", addr_of(c), "TYPE", "normal") == b":1\r\n"
    assert c.read_until_closed(timeout=5)[1]
    # SKIPME yes is the default: the caller is spared
    assert a.call("CLIENT", "KILL", "ADDR", addr_of(a)) == b":0\r\n"
    assert a.call("CLIENT", "KILL", "ADDR", addr_of(a), "SKIPME", "yes") == b":0\r\n"
    assert a.call("CLIENT", "KILL", "TYPE", "pubsub") == b":0\r\n"
    d, e = server.raw(), server.raw()
    d.call("PING")
    e.call("PING")
    killed = a.execute("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert killed >= 2
    assert d.read_until_closed(timeout=5)[1] and e.read_until_closed(timeout=5)[1]
    assert a.call("PING") == b"+PONG\r\n"
    # errors
    assert a.call("CLIENT", "KILL") == SYNTAX
    assert a.call("CLIENT", "KILL", "ID") == b"-ERR No such client\r\n"    # the old form
    assert a.call("CLIENT", "KILL", "ID", "x") == NOT_INT
    assert a.call("CLIENT", "KILL", "TYPE", "bogus") == b"-ERR Unknown client type 'bogus'\r\n"
    assert a.call("CLIENT", "KILL", "SKIPME", "maybe") == SYNTAX
    assert a.call("CLIENT", "KILL", "FOO", "bar") == SYNTAX
    assert a.call("CLIENT", "KILL", "ID", "1", "ADDR") == SYNTAX
    # SKIPME no: the caller kills itself after the reply
    a.send(encode("CLIENT", "KILL", "ADDR", addr_of(a), "SKIPME", "no"))
    data, closed = a.read_until_closed(timeout=5)
    assert data == b":1\r\n" and closed


def test_client_kill_blocked_client_loses_no_job(server):
    a, b = server.raw(), server.raw()
    b.send(encode("GETJOB", "TIMEOUT", 0, "FROM", "killq1", "killq2", "killq3"))
    wait_until(lambda: server.info_fields("clients")["blocked_clients"] == "1", 5)
    assert a.call("CLIENT", "KILL", addr_of(b)) == OK
    assert b.read_until_closed(timeout=5)[1]
    wait_until(lambda: server.info_fields("clients")["blocked_clients"] == "0", 5)
    jid = addjob(a, "killq2", b"x")
    assert _c.show(a, jid)[b"state"] == b"queued"
    assert a.execute("QLEN", "killq2") == 1


def test_client_pause(server):
    a, b, mon = server.raw(), server.raw(), server.raw()
    assert mon.call("MONITOR") == OK
    assert a.call("CLIENT", "PAUSE", "x") == b"-ERR timeout is not an integer or out of range\r\n"
    assert a.call("CLIENT", "PAUSE", "-1") == b"-ERR timeout is negative\r\n"
    t0 = time.monotonic()
    assert a.call("CLIENT", "PAUSE", 400) == OK
    b.send(encode("PING") + encode("QLEN", "pq"))
    assert not b.has_data(0.2)                         # held while paused
    assert b.read_reply(timeout=5) == b"+PONG\r\n"
    assert b.read_reply(timeout=5) == b":0\r\n"
    assert time.monotonic() - t0 >= 0.38
    assert a.call("PING") == b"+PONG\r\n"
    # a monitor is not paused: it saw the commands only once they ran
    lines = [mon.read_reply(timeout=5) for _ in range(3)]
    assert lines[0].endswith(b'"PING"\r\n') and lines[1].endswith(b'"QLEN" "pq"\r\n')
    assert a.call("CLIENT", "PAUSE", 0) == OK
    assert b.call("PING") == b"+PONG\r\n"


def test_client_reply_on_off_skip(server):
    r = server.raw()
    r.send(encode("CLIENT", "REPLY", "OFF") + encode("PING") + encode("ADDJOB", "rq", "x", 0)
           + encode("QLEN", "rq") + encode("NOSUCH") + encode("CLIENT", "REPLY", "ON"))
    assert r.read_reply() == OK
    assert not r.has_data(0.2)
    assert r.call("QLEN", "rq") == b":1\r\n"            # the muted ADDJOB did run
    r.send(encode("CLIENT", "REPLY", "SKIP") + encode("QLEN", "rq") + encode("PING", "a")
           + encode("PING", "b"))
    assert r.read_reply() == b"$1\r\na\r\n"
    assert r.read_reply() == b"$1\r\nb\r\n"
    assert not r.has_data(0.2)
    assert r.call("CLIENT", "REPLY", "bogus") == SYNTAX
    assert r.call("CLIENT", "REPLY", "ON") == OK


# ---------------------------------------------------------------------------
# MONITOR (SPEC 1.4)
# ---------------------------------------------------------------------------

FEED = re.compile(rb"\+(\d+)\.(\d{6}) \[([0-9.]+:\d+)\] (.*)\r\n")


def test_monitor_feed_format_and_quoting(server):
    mon, c = server.raw(), server.raw()
    assert mon.call("MONITOR") == OK
    mon.send(encode("MONITOR"))              # already a monitor: no reply (upstream)
    assert not mon.has_data(0.2)
    c.call("PING")
    body = b'a"b\\c\n\r\t\x07\x08\x01\x7f\xc3\xa9 z'
    c.call("ADDJOB", "mq", body, 0)
    c.call("CONFIG", "GET", "port")          # admin: not shown
    c.call("AUTH", "x")                      # never shown (it carries a password)
    c.call("QLEN", "mq")
    c.call("NOSUCH")                         # not executed: not shown
    c.call("QLEN")                           # arity error: not shown
    t = time.time()
    lines = [mon.read_reply(timeout=5) for _ in range(3)]
    assert not mon.has_data(0.2)
    parsed = [FEED.fullmatch(line) for line in lines]
    assert all(parsed), lines
    for m in parsed:
        assert m.group(3).decode() == addr_of(c)
        assert abs(int(m.group(1)) - t) < 5
    assert parsed[0].group(4) == b'"PING"'
    assert parsed[1].group(4) == (b'"ADDJOB" "mq" "a\\"b\\\\c\\n\\r\\t\\a\\b\\x01\\x7f\\xc3\\xa9 z"'
                                  b' "0"')
    assert parsed[2].group(4) == b'"QLEN" "mq"'


def test_monitor_sees_every_client_and_itself(server):
    mon = server.raw()
    assert mon.call("MONITOR") == OK
    others = [server.raw() for _ in range(3)]
    for i, o in enumerate(others):
        o.call("PING", f"from-{i}")
    mon.send(encode("PING", "mine"))
    got = [mon.read_reply(timeout=5) for _ in range(5)]
    feed = got[:-1]
    assert got[-1] == b"$4\r\nmine\r\n"      # its own command is fed before it runs
    assert all(FEED.fullmatch(g) for g in feed), feed
    assert any(g.endswith(b'"PING" "mine"\r\n') for g in feed)
    for i, o in enumerate(others):
        assert any(g.endswith(b'"PING" "from-%d"\r\n' % i) and addr_of(o).encode() in g
                   for g in feed)


@needs_cli
def test_monitor_through_redis_cli(server):
    proc = subprocess.Popen([REDIS_CLI, "-p", str(server.port), "MONITOR"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline() == "OK\n"
        r = server.raw()
        r.call("QLEN", "cli mon")
        line = proc.stdout.readline()
        assert re.fullmatch(r'\d+\.\d{6} \[127\.0\.0\.1:\d+\] "QLEN" "cli mon"\n', line), line
    finally:
        proc.terminate()
        proc.wait(5)


# ---------------------------------------------------------------------------
# SLOWLOG
# ---------------------------------------------------------------------------


def test_slowlog_slower_than_zero_logs_everything(server):
    r = server.raw()
    try:
        assert r.call("CONFIG", "SET", "slowlog-log-slower-than", 0) == OK
        assert r.call("SLOWLOG", "RESET") == OK
        jid = addjob(r, "slq", b"x")                  # worker-routed
        r.call("PING")                                # front-end
        r.call("SHOW", jid)
        r.call("GETJOB", "NOHANG", "FROM", "slq")
        entries = r.execute("SLOWLOG", "GET")
        assert [e[3] for e in entries] == [
            [b"GETJOB", b"NOHANG", b"FROM", b"slq"], [b"SHOW", jid], [b"PING"],
            [b"ADDJOB", b"slq", b"x", b"0"], [b"SLOWLOG", b"RESET"]]
        ids = [e[0] for e in entries]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == 5
        for e in entries:
            assert len(e) == 4 and abs(e[1] - time.time()) < 10 and e[2] >= 0
        assert r.execute("SLOWLOG", "LEN") == 6           # + the SLOWLOG GET itself
        assert len(r.execute("SLOWLOG", "GET", 2)) == 2
        assert r.execute("SLOWLOG", "GET", 0) == []
        assert len(r.execute("SLOWLOG", "GET", -1)) == 9
        assert r.call("SLOWLOG", "RESET") == OK
        assert r.execute("SLOWLOG", "LEN") == 1           # the RESET itself
    finally:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", 10000)


def test_slowlog_threshold_max_len_and_truncation(server):
    r = server.raw()
    try:
        assert r.call("SLOWLOG", "RESET") == OK
        r.call("PING")
        r.call("DEBUG", "SLEEP", "0.03")             # 30 ms > the default 10 ms
        entries = r.execute("SLOWLOG", "GET")
        assert [e[3] for e in entries] == [[b"DEBUG", b"SLEEP", b"0.03"]]
        assert entries[0][2] >= 25000
        # negative disables it, but only from the config file / command line (SPEC 4.3, 13)
        assert r.call("CONFIG", "SET", "slowlog-log-slower-than", -1) == (
            b"-ERR Invalid argument '-1' for CONFIG SET 'slowlog-log-slower-than'\r\n")
        assert r.call("CONFIG", "SET", "slowlog-log-slower-than", 100000) == OK
        r.call("DEBUG", "SLEEP", "0.03")
        assert r.execute("SLOWLOG", "LEN") == 1
        assert r.call("CONFIG", "SET", "slowlog-log-slower-than", 0) == OK
        assert r.call("CONFIG", "SET", "slowlog-max-len", 3) == OK
        for i in range(6):
            r.call("PING", str(i))
        assert r.execute("SLOWLOG", "LEN") == 3
        assert [e[3] for e in r.execute("SLOWLOG", "GET")] == [
            [b"SLOWLOG", b"LEN"], [b"PING", b"5"], [b"PING", b"4"]]
        # long arguments and long commands are abridged as upstream
        r.call("PING", b"y" * 200)
        assert r.execute("SLOWLOG", "GET", 1)[0][3] == [b"PING", b"y" * 128 + b"... (72 more bytes)"]
        r.call("ACKJOB", *[UNKNOWN_ID] * 40)
        args = r.execute("SLOWLOG", "GET", 1)[0][3]
        assert len(args) == 32 and args[0] == b"ACKJOB" and args[-1] == b"... (10 more arguments)"
    finally:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", 10000)
        r.call("CONFIG", "SET", "slowlog-max-len", 128)
        r.call("SLOWLOG", "RESET")


def test_slowlog_disabled_by_negative_threshold(start_server):
    srv = start_server(extra_args=("--slowlog-log-slower-than", "-1"))
    r = srv.raw()
    assert r.execute("CONFIG", "GET", "slowlog-log-slower-than") == [
        b"slowlog-log-slower-than", b"-1"]
    r.call("DEBUG", "SLEEP", "0.03")
    addjob(r, "q", b"x")
    assert r.execute("SLOWLOG", "LEN") == 0
    assert r.call("CONFIG", "SET", "slowlog-log-slower-than", 0) == OK
    r.call("PING")
    assert [e[3] for e in r.execute("SLOWLOG", "GET")] == [[b"PING"]]


def test_slowlog_errors(server):
    r = server.raw()
    err = b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"
    for args in (("SLOWLOG", "BOGUS"), ("SLOWLOG", "LEN", "1"), ("SLOWLOG", "RESET", "x"),
                 ("SLOWLOG", "GET", "1", "2")):
        assert r.call(*args) == err, args
    assert r.call("SLOWLOG") == arity_err("slowlog")
    assert r.call("SLOWLOG", "GET", "x") == NOT_INT


def test_blocking_getjob_time_blocked_is_not_logged(server):
    r = server.raw()
    try:
        assert r.call("CONFIG", "SET", "slowlog-log-slower-than", 50000) == OK
        assert r.call("SLOWLOG", "RESET") == OK
        assert r.call("GETJOB", "TIMEOUT", 200, "FROM", "slow-b1", "slow-b2") == b"*-1\r\n"
        assert r.execute("SLOWLOG", "LEN") == 0
    finally:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", 10000)


@needs_cli
def test_slowlog_through_redis_cli(server):
    r = server.raw()
    try:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", 0)
        r.call("SLOWLOG", "RESET")
        r.call("QLEN", "cliq")
        out = cli(server, "--no-raw", "SLOWLOG", "GET", "1")
        assert out.returncode == 0
        assert re.fullmatch(r'1\) 1\) \(integer\) \d+\n   2\) \(integer\) \d+\n'
                            r'   3\) \(integer\) \d+\n   4\) 1\) "QLEN"\n      2\) "cliq"\n',
                            out.stdout), out.stdout
    finally:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", 10000)


# ---------------------------------------------------------------------------
# TIME / COMMAND / LATENCY / DEBUG
# ---------------------------------------------------------------------------


def test_time(server):
    r = server.raw()
    raw = r.call("TIME")
    sec, usec = r.execute("TIME")
    assert re.fullmatch(rb"\*2\r\n\$10\r\n\d{10}\r\n\$\d\r\n\d{1,6}\r\n", raw), raw
    assert abs(int(sec) - time.time()) < 5 and 0 <= int(usec) < 10**6
    assert r.call("TIME", "x") == arity_err("time")


def test_command_introspection(server):
    r = server.raw()
    # upstream's 32 commands plus ECHO (which redis-cli --pipe needs)
    assert r.call("COMMAND", "COUNT") == b":33\r\n"
    table = r.execute("COMMAND")
    assert len(table) == 33
    names = {e[0] for e in table}
    assert {b"addjob", b"getjob", b"hello", b"auth", b"client", b"slowlog", b"monitor"} <= names
    assert r.call("COMMAND", "INFO", "AddJob") == (
        b"*1\r\n*6\r\n$6\r\naddjob\r\n:-4\r\n*3\r\n+write\r\n+denyoom\r\n+fast\r\n:0\r\n:0\r\n:0\r\n")
    assert r.execute("COMMAND", "INFO", "enqueue", "nosuch", "hello") == [
        [b"enqueue", -1, [b"write", b"denyoom", b"fast"], 0, 0, 0], None,
        [b"hello", -1, [b"readonly", b"fast"], 0, 0, 0]]
    assert r.execute("COMMAND", "INFO") == []
    assert r.execute("COMMAND", "GETKEYS", "ADDJOB", "q", "b", "0") == []
    assert r.call("COMMAND", "GETKEYS", "NOPE") == b"-ERR Invalid command specified\r\n"
    assert r.call("COMMAND", "GETKEYS", "QLEN") == (
        b"-ERR Invalid number of arguments specified for command\r\n")
    err = b"-ERR Unknown subcommand or wrong number of arguments.\r\n"
    assert r.call("COMMAND", "DOCS") == err          # redis-cli falls back to its own help
    assert r.call("COMMAND", "COUNT", "x") == err


def test_latency(server):
    r = server.raw()
    assert r.call("LATENCY", "LATEST") == b"*0\r\n"
    assert r.call("LATENCY", "HISTORY", "command") == b"*0\r\n"
    assert r.call("LATENCY", "RESET") == b":0\r\n"
    assert r.call("LATENCY", "RESET", "command", "fork") == b":0\r\n"
    assert r.call("LATENCY", "GRAPH", "command") == (
        b"-ERR No samples available for event 'command'\r\n")
    assert r.execute("LATENCY", "DOCTOR").startswith(b"I'm sorry, Dave")
    for args in (("LATENCY", "BOGUS"), ("LATENCY", "LATEST", "x"), ("LATENCY", "HISTORY")):
        assert r.call(*args) == SYNTAX, args
    assert r.call("LATENCY") == arity_err("latency")


def test_errors_echoing_input_stay_on_one_line(server):
    r = server.raw()
    assert r.call("CONFIG", "SET", "maxclients", b"1\r\n+OK") == (
        b"-ERR Invalid argument '1  +OK' for CONFIG SET 'maxclients'\r\n")
    assert r.call("CONFIG", "SET", b"no\nsuch", "1") == (
        b"-ERR Unsupported CONFIG parameter: no such\r\n")
    assert r.call("HELLO", "3", b"x\r\ny") == b"-ERR Syntax error in HELLO option 'x  y'\r\n"
    assert r.call("CLIENT", "KILL", "TYPE", b"a\nb") == b"-ERR Unknown client type 'a b'\r\n"
    assert r.call("CLIENT", "SETINFO", b"a\nb", "x") == b"-ERR Unrecognized option 'a b'\r\n"
    assert r.call("LATENCY", "GRAPH", b"e\r") == b"-ERR No samples available for event 'e '\r\n"
    assert r.call("PING") == b"+PONG\r\n"


def test_debug_errors(server):
    r = server.raw()
    assert r.call("DEBUG", "nope") == (
        b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'nope'\r\n")
    assert r.call("DEBUG", "SLEEP") == (
        b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'SLEEP'\r\n")
    assert r.call("DEBUG", "ERROR", "MYERR some\nthing") == b"-MYERR some thing\r\n"
    assert r.call("DEBUG", "SLEEP", "0") == OK


# ---------------------------------------------------------------------------
# CONFIG SET side effects: maxclients, timeout, loglevel, output buffer limit
# ---------------------------------------------------------------------------


def test_maxclients(start_server):
    srv = start_server(extra_args=("--maxclients", "3"))
    conns = [srv.raw() for _ in range(3)]
    for c in conns:
        assert c.call("PING") == b"+PONG\r\n"
    extra = srv.raw()
    data, closed = extra.read_until_closed(timeout=5)
    assert data == b"-ERR max number of clients reached\r\n" and closed
    assert parse_info(conns[0].execute("INFO", "stats"))["rejected_connections"] == "1"
    assert conns[0].call("CONFIG", "SET", "maxclients", 4) == OK
    assert conns[0].execute("CONFIG", "GET", "maxclients") == [b"maxclients", b"4"]
    fourth = srv.raw()
    assert fourth.call("PING") == b"+PONG\r\n"
    data, closed = srv.raw().read_until_closed(timeout=5)
    assert data == b"-ERR max number of clients reached\r\n" and closed
    conns[1].close()
    wait_until(lambda: srv.raw().call("PING") == b"+PONG\r\n", 5)
    assert conns[0].call("CONFIG", "SET", "maxclients", 0) == (
        b"-ERR Invalid argument '0' for CONFIG SET 'maxclients'\r\n")
    # more clients than the open-files limit allows (the server inherited our hard limit)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY:
        assert conns[0].call("CONFIG", "SET", "maxclients", hard + 100) == (
            b"-ERR The operating system is not able to handle the specified number of "
            b"clients, try with %d\r\n" % (hard - 32))
        assert conns[0].execute("CONFIG", "GET", "maxclients") == [b"maxclients", b"4"]


def _closed_while_busy(victim, busy, timeout=6):
    """Wait until the server closes `victim`, keeping `busy` active meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert busy.call("PING") == b"+PONG\r\n"
        if victim.has_data(0.3):
            data, closed = victim.read_until_closed(timeout=1)
            return closed and data == b""
    return False


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] == resource.RLIM_INFINITY,
                    reason="no hard limit on open files")
def test_maxclients_reduced_to_the_open_files_limit(start_server):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    srv = start_server(extra_args=("--maxclients", str(hard + 1000)))
    assert srv.execute("CONFIG", "GET", "maxclients") == [b"maxclients", str(hard - 32).encode()]
    assert "maxclients has been reduced to %d" % (hard - 32) in srv.log_text()


def test_idle_timeout_spares_blocked_clients_and_monitors(start_server):
    srv = start_server(extra_args=("--timeout", "1", "--loglevel", "verbose"))
    idle, blocked, mon, busy = srv.raw(), srv.raw(), srv.raw(), srv.raw()
    assert idle.call("PING") == b"+PONG\r\n"
    blocked.send(encode("GETJOB", "TIMEOUT", 4000, "FROM", "idleq"))
    assert mon.call("MONITOR") == OK
    t0 = time.monotonic()
    assert _closed_while_busy(idle, busy)     # a client that talks is never idle
    assert 0.9 <= time.monotonic() - t0 <= 4
    # the blocked client times out on its own GETJOB, not on the idle timeout
    deadline = time.monotonic() + 6
    while not blocked.has_data(0.3) and time.monotonic() < deadline:
        assert busy.call("PING") == b"+PONG\r\n"
    assert blocked.read_reply(timeout=1) == b"*-1\r\n"
    assert busy.call("PING") == b"+PONG\r\n"
    assert "Closing idle client" in srv.log_text()
    # the monitor, silent for > 3 s, is still connected; it sees its own PING, then PONG
    mon.send(encode("PING"))
    seen = [mon.read_reply(timeout=5)]
    while seen[-1] != b"+PONG\r\n":         # after the feed of the other clients' PINGs
        seen.append(mon.read_reply(timeout=5))
    assert seen[-2].endswith(b"[%s] \"PING\"\r\n" % addr_of(mon).encode())
    assert busy.call("CONFIG", "SET", "timeout", 0) == OK
    quiet = srv.raw()
    assert quiet.call("PING") == b"+PONG\r\n"
    assert not quiet.has_data(2.0)            # no longer closed


def test_loglevel_config_set(start_server):
    srv = start_server(extra_args=("--timeout", "1"))
    r = srv.raw()
    assert r.execute("CONFIG", "GET", "loglevel") == [b"loglevel", b"notice"]
    victim = srv.raw()
    victim.call("PING")
    assert _closed_while_busy(victim, r)
    assert "Closing idle client" not in srv.log_text()        # a verbose line
    assert r.call("CONFIG", "SET", "loglevel", "verbose") == OK
    victim = srv.raw()
    victim.call("PING")
    assert _closed_while_busy(victim, r)
    wait_until(lambda: "Closing idle client" in srv.log_text(), 5)
    assert r.call("CONFIG", "SET", "loglevel", "loud") == (
        b"-ERR Invalid argument 'loud' for CONFIG SET 'loglevel'\r\n")
    r.call("CONFIG", "SET", "timeout", 0)


def _slow_reader(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    return s


def _closed_by_server(sock, timeout=10):
    """Read and discard until EOF/RST; True when the server closed the connection."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not sock.recv(1 << 20):
                return True
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True
    return False


@pytest.mark.parametrize("workers", [1, 3])
def test_output_buffer_hard_limit_closes_slow_reader(start_server, workers):
    srv = start_server(workers=workers)
    r = srv.raw()
    assert r.execute("CONFIG", "GET", "client-output-buffer-limit") == [
        b"client-output-buffer-limit", b"normal 0 0 0"]
    assert r.call("CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0") == OK
    big = b"B" * 200_000
    jid = addjob(r, "bigq", big)
    for _ in range(4):
        addjob(r, "bigq", big)
    slow = _slow_reader(srv.port)
    try:
        # ~60 MB of replies asked for, none read
        slow.sendall(b"".join(encode("SHOW", jid) + encode("QPEEK", "bigq", 5)
                              for _ in range(50)))
        wait_until(lambda: "overcoming of output buffer limits" in srv.log_text(), 15)
        # others keep working meanwhile
        other = srv.raw()
        for _ in range(20):
            assert other.call("PING") == b"+PONG\r\n"
            assert len(other.execute("QPEEK", "bigq", 1)) == 1
        assert _closed_by_server(slow)
        assert other.execute("CLIENT", "LIST").count(b"\n") == 2       # r and other
    finally:
        slow.close()


def test_output_buffer_soft_limit(start_server):
    srv = start_server()
    r = srv.raw()
    assert r.call("CONFIG", "SET", "client-output-buffer-limit", "normal 0 256kb 1") == OK
    jid = addjob(r, "softq", b"S" * 100_000)
    slow = _slow_reader(srv.port)
    try:
        slow.sendall(encode("SHOW", jid) * 200)          # ~20 MB
        t0 = time.monotonic()
        wait_until(lambda: "overcoming of output buffer limits" in srv.log_text(), 10)
        assert time.monotonic() - t0 >= 0.9               # over the soft limit for > 1 s
        assert _closed_by_server(slow)
        # a client that reads what it asks for is never closed
        fast = srv.raw()
        for _ in range(30):
            assert len(fast.execute("SHOW", jid)) == 30
        assert fast.call("PING") == b"+PONG\r\n"
    finally:
        slow.close()
    assert r.call("CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0") == OK
    assert r.call("CONFIG", "SET", "client-output-buffer-limit", "slave 0 0 0") == (
        b"-ERR Invalid argument 'slave 0 0 0' for CONFIG SET 'client-output-buffer-limit'\r\n")


# ---------------------------------------------------------------------------
# rename-command (SPEC 13)
# ---------------------------------------------------------------------------


def test_rename_command_disables_and_renames(start_server):
    srv = start_server(workers=3, extra_args=("--rename-command", "DEBUG", "",
                                              "--rename-command", "CONFIG", "s3cret-config",
                                              "--rename-command", "QLEN", "ql"))
    r = srv.raw()
    assert r.call("DEBUG", "FLUSHALL") == b"-ERR unknown command 'DEBUG'\r\n"
    assert r.call("CONFIG", "GET", "port") == b"-ERR unknown command 'CONFIG'\r\n"
    assert r.execute("S3CRET-CONFIG", "GET", "port") == [b"port", str(srv.port).encode()]
    # arity errors name the command by its real name, as upstream
    assert r.call("s3cret-config") == arity_err("config")
    # a renamed worker command still reaches its worker
    for q in ("rq-a", "rq-b", "rq-c", "rq-d"):
        addjob(r, q, b"x")
        assert r.call("QL", q) == b":1\r\n"
    assert r.call("QLEN", "rq-a") == b"-ERR unknown command 'QLEN'\r\n"
    assert r.call("COMMAND", "COUNT") == b":32\r\n"          # DEBUG is gone (33 with ECHO)
    assert r.execute("COMMAND", "INFO", "debug", "ql") == [
        None, [b"qlen", 2, [b"readonly", b"fast"], 0, 0, 0]]
    assert b"cmdstat_qlen:calls=4," in r.execute("INFO", "commandstats")


@needs_cli
def test_rename_command_through_redis_cli(start_server):
    srv = start_server(extra_args=("--rename-command", "DEBUG", ""))
    out = cli(srv, "DEBUG", "SLEEP", "0")
    assert out.stdout.strip() == "ERR unknown command 'DEBUG'"
    assert cli(srv, "PING").stdout == "PONG\n"


def test_rename_command_errors_at_startup(start_server, tmp_path):
    srv = start_server(extra_args=("--rename-command", "NOSUCHCMD", "x"), wait=False)
    assert srv.wait_exit(20) == 1
    assert "No such command in rename-command" in srv.log_text()
    srv = start_server(extra_args=("--rename-command", "QLEN", "show"), wait=False)
    assert srv.wait_exit(20) == 1
    assert "Target command name already exists" in srv.log_text()


# ---------------------------------------------------------------------------
# INFO (SPEC 14)
# ---------------------------------------------------------------------------

SPEC_FIELDS = {
    "Server": ["disque_version", "disque_git_sha1", "disque_git_dirty", "disque_build_id", "os",
               "arch_bits", "multiplexing_api", "gcc_version", "process_id", "run_id",
               "tcp_port", "uptime_in_seconds", "uptime_in_days", "hz", "executable",
               "config_file"],
    "Clients": ["connected_clients", "client_longest_output_list", "client_biggest_input_buf",
                "blocked_clients"],
    "Memory": ["used_memory", "used_memory_human", "used_memory_rss", "used_memory_peak",
               "used_memory_peak_human", "mem_fragmentation_ratio", "mem_allocator"],
    "Jobs": ["registered_jobs"],
    "Queues": ["registered_queues"],
    "Persistence": ["loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress",
                    "aof_rewrite_scheduled", "aof_last_rewrite_time_sec",
                    "aof_current_rewrite_time_sec", "aof_last_bgrewrite_status",
                    "aof_last_write_status"],
    "Stats": ["total_connections_received", "total_commands_processed",
              "instantaneous_ops_per_sec", "total_net_input_bytes", "total_net_output_bytes",
              "instantaneous_input_kbps", "instantaneous_output_kbps", "rejected_connections",
              "latest_fork_usec"],
    "CPU": ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"],
}
HUMAN = re.compile(r"\d+B|\d+\.\d\d[KMGTP]")


def _fields(lines):
    return [line.split(":", 1)[0] for line in lines]


@pytest.mark.parametrize("section", ["", "default", "all", "everything"])
def test_info_every_section_and_field_in_order(server, section):
    r = server.raw()
    r.call("PING")
    text = r.execute("INFO", section) if section else r.execute("INFO")
    secs = info_sections(text)
    order = ["Server", "Clients", "Memory", "Jobs", "Queues", "Persistence", "Stats", "CPU",
             "Workers"]
    if section in ("all", "everything"):
        order.append("Commandstats")
    assert list(secs) == order
    for name, fields in SPEC_FIELDS.items():
        got = _fields(secs[name])
        if name == "Server":
            # ours: the number of workers and their restarts (docs/faults.md)
            assert got == fields + ["workers", "worker_restarts", "worker_restarting",
                                    "worker_last_restart_unavailable_ms",
                                    "worker_max_restart_unavailable_ms"], got
        else:
            assert got == fields, (name, got)
    assert text.endswith(b"\r\n") and not text.endswith(b"\r\n\r\n")
    values = parse_info(text)
    assert HUMAN.fullmatch(values["used_memory_human"]) and HUMAN.fullmatch(
        values["used_memory_peak_human"])
    assert re.fullmatch(r"\d+\.\d\d", values["mem_fragmentation_ratio"])
    for k in ("instantaneous_input_kbps", "instantaneous_output_kbps", "used_cpu_sys",
              "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"):
        assert re.fullmatch(r"\d+\.\d\d", values[k]), k
    assert re.fullmatch(r"[0-9a-f]{40}", values["run_id"])
    assert values["workers"] == str(server.workers)
    assert len(secs["Workers"]) == server.workers
    if section in ("all", "everything"):
        for line in secs["Commandstats"]:
            assert re.fullmatch(r"cmdstat_[a-z]+:calls=\d+,usec=\d+,usec_per_call=\d+\.\d\d",
                                line), line


@pytest.mark.parametrize("name", ["server", "CLIENTS", "Memory", "jobs", "queues",
                                  "persistence", "stats", "cpu", "workers", "commandstats"])
def test_info_single_section_case_insensitive(server, name):
    r = server.raw()
    r.call("PING")
    secs = info_sections(r.execute("INFO", name))
    assert len(secs) == 1 and list(secs)[0].lower() == name.lower()


def test_info_errors(server):
    r = server.raw()
    assert r.call("INFO", "nosuch") == b"$0\r\n\r\n"
    assert r.call("INFO", "server", "clients") == SYNTAX


def test_info_instantaneous_metrics(server):
    r = server.raw()
    pipeline = encode("PING") * 200

    def busy():
        r.send(pipeline)
        for _ in range(200):
            r.read_reply()
        stats = parse_info(server.raw().execute("INFO", "stats"))
        return (int(stats["instantaneous_ops_per_sec"]) > 0
                and float(stats["instantaneous_input_kbps"]) > 0
                and float(stats["instantaneous_output_kbps"]) > 0)

    wait_until(busy, 10, interval=0.01)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:             # ~1 s of steady load
        busy()
    peak = int(parse_info(server.raw().execute("INFO", "stats"))["instantaneous_ops_per_sec"])
    assert peak > 100
    # the mean of the last 16 samples: it decays within ~1.6 s of (near) silence
    wait_until(lambda: int(parse_info(server.raw().execute("INFO", "stats"))[
        "instantaneous_ops_per_sec"]) < 20, 10, interval=0.3)


def test_info_commandstats_and_resetstat(server):
    r = server.raw()
    addjob(r, "csq", b"x")
    r.call("PING")
    r.call("NOSUCH")                       # unknown: not counted
    r.call("QLEN")                         # arity error: not counted
    stats = info_sections(r.execute("INFO", "commandstats"))["Commandstats"]
    names = {line.split(":")[0] for line in stats}
    assert {"cmdstat_addjob", "cmdstat_ping"} <= names
    assert not any("nosuch" in n for n in names)
    before = parse_info(r.execute("INFO", "stats"))
    assert int(before["total_commands_processed"]) > 3
    assert r.call("CONFIG", "RESETSTAT") == OK
    after = parse_info(r.execute("INFO", "stats"))
    assert int(after["total_commands_processed"]) <= 2
    assert after["total_connections_received"] == "0"
    stats = info_sections(r.execute("INFO", "commandstats"))["Commandstats"]
    assert not any(line.startswith("cmdstat_addjob:") for line in stats)
    addjob(r, "csq", b"x")
    line = [ln for ln in info_sections(r.execute("INFO", "commandstats"))["Commandstats"]
            if ln.startswith("cmdstat_addjob:")][0]
    m = re.fullmatch(r"cmdstat_addjob:calls=1,usec=(\d+),usec_per_call=(\d+\.\d\d)", line)
    assert m and int(m.group(1)) < 100000, line


def test_info_clients_counts(server):
    r = server.raw()
    extra = [server.raw() for _ in range(3)]
    for e in extra:
        e.call("PING")
    clients = parse_info(r.execute("INFO", "clients"))
    assert int(clients["connected_clients"]) >= 4
    for e in extra:
        e.close()
    wait_until(lambda: int(parse_info(r.execute("INFO", "clients"))["connected_clients"]) <= 2, 5)


@needs_cli
def test_info_and_client_list_through_redis_cli(server):
    out = cli(server, "INFO", "server")
    assert out.returncode == 0 and out.stdout.startswith("# Server\ndisque_version:1.0-rc1\n")
    out = cli(server, "CLIENT", "LIST")
    assert CLIENT_LINE.fullmatch(out.stdout.strip()), out.stdout
    out = cli(server, "--no-raw", "CLIENT", "GETNAME")
    assert out.stdout == "(nil)\n"
    out = cli(server, "--no-raw", "CLIENT", "BOGUS")
    assert out.stdout.strip() == ("(error) ERR Syntax error, try CLIENT (LIST | KILL ip:port | "
                                  "GETNAME | SETNAME connection-name)")
    out = cli(server, "--no-raw", "TIME")
    assert re.fullmatch(r'1\) "\d{10}"\n2\) "\d+"\n', out.stdout), out.stdout
    out = cli(server, "COMMAND", "COUNT")
    assert out.stdout == "33\n"


@needs_cli
def test_redis_cli_interactive_session(server):
    """redis-cli's prompt mode asks COMMAND DOCS at start; our error makes it use its own
    help table, and the session works."""
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "dumb"
        os.execv(REDIS_CLI, [REDIS_CLI, "-p", str(server.port)])
    out = b""
    try:
        def read_until(marker, timeout=10):
            nonlocal out
            deadline = time.monotonic() + timeout
            while marker not in out and time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        out += os.read(fd, 65536)
                    except OSError:
                        break
            return marker in out

        assert read_until(b"> "), out
        os.write(fd, b"PING\n")
        assert read_until(b"PONG"), out
        os.write(fd, b"QLEN interactive-q\n")
        assert read_until(b"(integer) 0"), out
        os.write(fd, b"QUIT\n")
    finally:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
