"""MONITOR (SPEC 1.4) and SLOWLOG against real servers."""

import re
import subprocess
import time


from support.admin import addr_of, arity_err, cli, needs_cli, NOT_INT, OK, REDIS_CLI, UNKNOWN_ID
from support.jobs import addjob
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


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


