"""Dispatch order (SPEC 1.3) and AUTH / requirepass (SPEC 4.5) against real servers."""

from support.admin import arity_err, cli, needs_cli, NOAUTH, OK, start_with_password, UNKNOWN_ID
from support.jobs import addjob
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


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


