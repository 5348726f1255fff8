"""`unixsocket` / `unixsocketperm` (issue 10 item 3): the node listens on the socket file
with the given permissions, serves it exactly as TCP, shows its clients in CLIENT LIST as
upstream does (addr `<path>:0`, flag U) and removes the file when it stops."""

import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile

import pytest
import redis
from support.resp_client import encode_command
from support.waits import wait_until


pytestmark = pytest.mark.server
wait_until, encode = wait_until, encode_command
REDIS_CLI = shutil.which("redis-cli")


@pytest.fixture
def sock_dir():
    # a short directory: a unix socket path is limited to 107 bytes
    d = tempfile.mkdtemp(prefix="dq-sock-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def unix_call(path, *args):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(encode(*args))
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_socket_file_exists_with_its_permissions_and_serves_jobs(start_server, sock_dir):
    path = os.path.join(sock_dir, "disque.sock")
    srv = start_server(workers=2, extra_args=["--unixsocket", path, "--unixsocketperm", "755"])
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o755
    r = redis.Redis(unix_socket_path=path, protocol=2)
    try:
        assert r.ping()
        jid = r.execute_command("ADDJOB", "uq", b"over unix", 0)
        assert jid.startswith(b"D-")
        [[queue, got, body]] = r.execute_command("GETJOB", "NOHANG", "FROM", "uq")
        assert (queue, got, body) == (b"uq", jid, b"over unix")
        assert r.execute_command("ACKJOB", jid) == 1
        # the same node over TCP sees the same data
        tcp = srv.client()
        assert tcp.execute_command("QLEN", "uq") == 0
        # CLIENT LIST: the unix client with upstream's addr and the U flag, the TCP one without
        r.execute_command("CLIENT", "SETNAME", "overunix")
        listing = tcp.execute_command("CLIENT", "LIST").decode()
        line = next(l for l in listing.splitlines() if "name=overunix" in l)
        assert " addr=%s:0 " % path in line
        assert re.search(r" flags=\w*U\w* ", line)
        for other in listing.splitlines():
            if "name=overunix" not in other:
                assert re.search(r" addr=127\.0\.0\.1:\d+ ", other)
                assert not re.search(r" flags=\w*U", other)
        # CLIENT KILL by that address closes the unix client
        assert tcp.execute_command("CLIENT", "KILL", "ADDR", "%s:0" % path) == 1
    finally:
        r.close()
    # raw bytes over the socket, exactly as over TCP
    reply = unix_call(path, "PING")
    assert reply == b"+PONG\r\n"


def test_socket_file_is_removed_at_shutdown(start_server, sock_dir):
    path = os.path.join(sock_dir, "d.sock")
    srv = start_server(extra_args=["--unixsocket", path, "--unixsocketperm", "700"])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert srv.client().config_get("unixsocket") in ({b"unixsocket": path.encode()},
                                                     [b"unixsocket", path.encode()])
    try:
        redis.Redis(unix_socket_path=path).execute_command("SHUTDOWN")
    except redis.ConnectionError:
        pass                            # the node closes the connection as it stops
    assert srv.wait_exit() == 0
    assert not os.path.exists(path)


def test_stale_socket_file_is_replaced(start_server, sock_dir):
    path = os.path.join(sock_dir, "stale.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)                     # a file left behind by a killed process
    stale.close()
    start_server(extra_args=["--unixsocket", path])
    assert unix_call(path, "PING") == b"+PONG\r\n"


def test_unusable_path_fails_fast_with_one_line(start_server, sock_dir):
    path = os.path.join(sock_dir, "no-such-dir", "d.sock")
    srv = start_server(extra_args=["--unixsocket", path], wait=False)
    assert srv.wait_exit() == 1
    assert "Opening Unix socket %s" % path in srv.log_text()


@pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed")
def test_redis_cli_over_the_socket(start_server, sock_dir):
    path = os.path.join(sock_dir, "cli.sock")
    start_server(workers=2, extra_args=["--unixsocket", path])
    out = subprocess.run([REDIS_CLI, "-s", path, "ADDJOB", "cliq", "hello", "0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("D-"), out
    out = subprocess.run([REDIS_CLI, "-s", path, "QLEN", "cliq"], capture_output=True,
                         text=True, timeout=30)
    assert out.stdout.strip() == "1"
    out = subprocess.run([REDIS_CLI, "-s", path, "CLIENT", "LIST"], capture_output=True,
                         text=True, timeout=30)
    assert "addr=%s:0" % path in out.stdout and "flags=U" in out.stdout
