"""Helpers of the admin command tests (AUTH, CLIENT, MONITOR, SLOWLOG, CONFIG, INFO ...):
their fixed replies, redis-cli, CLIENT LIST parsing, a server started with a password."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from support.resp_client import RawConn
from support.waits import wait_until

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
            with RawConn(srv.port, timeout=2) as r:
                return r.call("PING") == NOAUTH
        except OSError:
            return False

    wait_until(ready, timeout=30, interval=0.05, message=srv.log_tail())
    wait_until(lambda: len(srv.worker_pids()) >= workers, timeout=10)
    srv.record_descendants()
    return srv


def qstat(r, q):
    """QSTAT as a dict (None for an unknown queue)."""
    from support.resp_client import NULL_ARRAY
    reply = r.execute("QSTAT", q)
    if reply is NULL_ARRAY:
        return None
    return dict(zip(reply[0::2], reply[1::2]))
