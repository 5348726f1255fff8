"""CONFIG SET side effects: maxclients, timeout, loglevel, output buffer limits."""

import resource
import socket
import time

import pytest

from support.admin import addr_of, OK
from support.info import parse_info
from support.jobs import addjob
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


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


