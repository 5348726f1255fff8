"""CLIENT (SPEC 4.5): LIST, KILL, SETNAME, PAUSE, REPLY, SETINFO against real servers."""

import time

import pytest

from support.admin import addr_of, arity_err, CLIENT_LINE, client_list, CLIENT_SYNTAX, NOT_INT, OK, SYNTAX
from support.jobs import addjob, show
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


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
    assert show(a, jid)[b"state"] == b"queued"
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


