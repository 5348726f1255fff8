"""The Redis 6+ handshake and RESP3 (SPEC 4.1 plus the compatibility brief): HELLO 2|3
with AUTH and SETNAME, RESP3 nulls after HELLO 3 (top level and nested), RESP3 maps for
HELLO and CONFIG GET, and every command we have through redis-py's default protocol
(redis-py >= 8 opens each connection with HELLO 3 and CLIENT SETINFO), through
`protocol=2`, and through redis-py's pure-Python RESP2/RESP3 parsers; redis-cli -3.
"""

import re
import shutil
import subprocess
import time

import pytest
import redis
from redis._parsers import _RESP2Parser, _RESP3Parser
from redis.backoff import NoBackoff
from redis.retry import Retry
from support.jobs import JOB_ID_RE, addjob
from support.resp_client import encode_command, parse_resp
from support.waits import wait_until


addjob, wait_until, encode = addjob, wait_until, encode_command
UNKNOWN_ID = "D-00000000-000000000000000000000000-0000"
OK = b"+OK\r\n"
NOAUTH = b"-NOAUTH Authentication required.\r\n"
REDIS_CLI = shutil.which("redis-cli")
needs_cli = pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed")


def hello_fields(proto, cid):
    return (b"$6\r\nserver\r\n$6\r\ndisque\r\n$7\r\nversion\r\n$7\r\n1.0-rc1\r\n"
            b"$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:%d\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
            b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n" % (proto, cid))


# ---------------------------------------------------------------------------
# HELLO <protover> (raw bytes)
# ---------------------------------------------------------------------------


def test_hello_3_and_2_exact_bytes(server):
    r = server.raw()
    cid = r.execute("CLIENT", "ID")
    assert r.call("HELLO", "3") == b"%7\r\n" + hello_fields(3, cid)
    assert r.call("HELLO", "2") == b"*14\r\n" + hello_fields(2, cid)
    # plain HELLO keeps the Disque reply, whatever the protocol
    assert r.call("HELLO").startswith(b"*3\r\n:1\r\n$40\r\n")
    r.call("HELLO", "3")
    assert r.call("HELLO").startswith(b"*3\r\n:1\r\n$40\r\n")


@pytest.mark.parametrize("args,reply", [
    (("HELLO", "1"), b"-NOPROTO unsupported protocol version\r\n"),
    (("HELLO", "4"), b"-NOPROTO unsupported protocol version\r\n"),
    (("HELLO", "-3"), b"-NOPROTO unsupported protocol version\r\n"),
    (("HELLO", "x"), b"-ERR Protocol version is not an integer or out of range\r\n"),
    (("HELLO", "3.0"), b"-ERR Protocol version is not an integer or out of range\r\n"),
    (("HELLO", "3", "BOGUS"), b"-ERR Syntax error in HELLO option 'BOGUS'\r\n"),
    (("HELLO", "3", "AUTH", "default"), b"-ERR Syntax error in HELLO option 'AUTH'\r\n"),
    (("HELLO", "3", "SETNAME"), b"-ERR Syntax error in HELLO option 'SETNAME'\r\n"),
    (("HELLO", "3", "SETNAME", "a b"),
     b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"),
])
def test_hello_errors(server, args, reply):
    r = server.raw()
    assert r.call(*args) == reply
    # the protocol did not change
    assert r.call("SHOW", UNKNOWN_ID) == b"$-1\r\n"


def test_hello_setname_and_auth_without_requirepass(server):
    r = server.raw()
    raw = r.call("HELLO", "3", "SETNAME", "hello-name", "AUTH", "default", "anything")
    assert raw.startswith(b"%7\r\n")
    assert r.call("CLIENT", "GETNAME") == b"$10\r\nhello-name\r\n"
    # the only user is "default"
    assert r.call("HELLO", "3", "AUTH", "alice", "x") == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")


def test_hello_auth_with_requirepass(start_server):
    srv = start_server()
    admin = srv.raw()
    assert admin.call("CONFIG", "SET", "requirepass", "hpw") == OK
    r = srv.raw()
    noauth_hello = (b"-NOAUTH HELLO must be called with the client already authenticated, "
                    b"otherwise the HELLO AUTH <user> <pass> option can be used to authenticate "
                    b"the client and select the RESP protocol version at the same time\r\n")
    assert r.call("HELLO", "3") == noauth_hello
    assert r.call("HELLO") == NOAUTH                 # the Disque HELLO is a normal command
    wrongpass = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert r.call("HELLO", "3", "AUTH", "default", "bad") == wrongpass
    assert r.call("HELLO", "3", "AUTH", "other", "hpw") == wrongpass
    assert r.call("PING") == NOAUTH
    assert r.call("HELLO", "3", "AUTH", "default", "hpw", "SETNAME", "authed").startswith(b"%7\r\n")
    assert r.call("PING") == b"+PONG\r\n"
    assert r.call("CLIENT", "GETNAME") == b"$6\r\nauthed\r\n"
    assert r.call("SHOW", UNKNOWN_ID) == b"_\r\n"
    # once authenticated, HELLO without AUTH is fine
    assert r.call("HELLO", "2").startswith(b"*14\r\n")
    admin.call("AUTH", "hpw")
    assert admin.call("CONFIG", "SET", "requirepass", "") == OK


# ---------------------------------------------------------------------------
# RESP3 replies after HELLO 3
# ---------------------------------------------------------------------------


def test_resp3_top_level_nulls(server):
    r = server.raw()
    r.call("HELLO", "3")
    assert r.call("SHOW", UNKNOWN_ID) == b"_\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "r3-empty") == b"_\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "r3-a", "r3-b", "r3-c", "r3-d") == b"_\r\n"
    assert r.call("GETJOB", "TIMEOUT", 50, "FROM", "r3-a") == b"_\r\n"
    assert r.call("GETJOB", "TIMEOUT", 50, "FROM", "r3-a", "r3-b", "r3-c", "r3-d") == b"_\r\n"
    assert r.call("QSTAT", "r3-nosuch") == b"_\r\n"
    assert r.call("CLIENT", "GETNAME") == b"_\r\n"
    assert r.call("COMMAND", "INFO", "nosuch") == b"*1\r\n_\r\n"
    # what is not a null stays as it is
    assert r.call("QPEEK", "r3-nosuch", 1) == b"*0\r\n"
    assert r.call("QLEN", "r3-nosuch") == b":0\r\n"
    assert r.call("ACKJOB") == b":0\r\n"
    assert r.call("PING") == b"+PONG\r\n"
    assert r.call("SHOW", "bad") == b"-BADID Invalid Job ID format.\r\n"
    # back to RESP2
    r.call("HELLO", "2")
    assert r.call("SHOW", UNKNOWN_ID) == b"$-1\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "r3-empty") == b"*-1\r\n"


def test_protocol_switch_in_a_pipeline(server):
    """Replies are encoded in the protocol in force when their command ran, even when a
    worker's reply arrives after a later HELLO switched the connection."""
    r = server.raw()
    cid = r.execute("CLIENT", "ID")
    r.send(encode("SHOW", UNKNOWN_ID) + encode("GETJOB", "NOHANG", "FROM", "sw-a", "sw-b", "sw-c")
           + encode("HELLO", "3") + encode("SHOW", UNKNOWN_ID) + encode("QSTAT", "sw-none")
           + encode("HELLO", "2") + encode("SHOW", UNKNOWN_ID))
    assert [r.read_reply() for _ in range(7)] == [
        b"$-1\r\n", b"*-1\r\n", b"%7\r\n" + hello_fields(3, cid), b"_\r\n", b"_\r\n",
        b"*14\r\n" + hello_fields(2, cid), b"$-1\r\n"]


def test_resp3_nested_nulls_and_bodies_left_alone(server):
    r = server.raw()
    tricky = b"x\r\n$-1\r\n*-1\r\n_\r\n-1\r\n"
    jid = addjob(r, "r3q", tricky, 0, "RETRY", 0, "REPLICATE", 1)      # at most once
    raw2 = r.call("SHOW", jid)
    assert b"$19\r\nnext-requeue-within\r\n$-1\r\n" in raw2
    r.call("HELLO", "3")
    raw3 = r.call("SHOW", jid)
    timeless = re.compile(rb"(next-awake-within\r\n|ttl\r\n):\d+")   # ms-dependent
    assert timeless.sub(rb"\1", raw3) == timeless.sub(rb"\1", raw2).replace(
        b"$19\r\nnext-requeue-within\r\n$-1\r\n", b"$19\r\nnext-requeue-within\r\n_\r\n")
    shown = parse_resp(raw3)[0]
    fields = dict(zip(shown[0::2], shown[1::2]))
    assert fields[b"next-requeue-within"] is None and fields[b"body"] == tricky
    peek = r.execute("QPEEK", "r3q", 1)
    assert peek == [[b"r3q", jid, tricky]]
    raw = r.call("JSCAN", "QUEUE", "r3q", "REPLY", "all")
    assert raw.count(b"within\r\n_\r\n") == 1 and tricky in raw and b"$-1" not in raw.replace(tricky, b"")
    got = r.execute("GETJOB", "FROM", "r3q")
    assert got == [[b"r3q", jid, tricky]]


def test_resp3_maps_and_command_entries(server):
    r = server.raw()
    r.call("HELLO", "3")
    assert r.call("CONFIG", "GET", "maxclients") == b"%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n"
    assert r.call("CONFIG", "GET", "nosuch*") == b"%0\r\n"
    assert r.call("COMMAND", "INFO", "qlen") == (
        b"*1\r\n*7\r\n$4\r\nqlen\r\n:-2\r\n~2\r\n+readonly\r\n+fast\r\n:0\r\n:0\r\n:0\r\n*0\r\n")
    # INFO stays a bulk string, TIME an array
    assert r.call("INFO", "jobs").startswith(b"$")
    assert r.call("TIME").startswith(b"*2\r\n$")


# ---------------------------------------------------------------------------
# redis-py: every command, default protocol (RESP3), protocol=2, pure-Python parsers
# ---------------------------------------------------------------------------

VARIANTS = {
    "default": {},                                            # RESP3 since redis-py 8
    "resp2": {"protocol": 2},
    "resp3-py": {"parser_class": _RESP3Parser},
    "resp2-py": {"protocol": 2, "parser_class": _RESP2Parser},
}


def redis_client(srv, variant, **extra):
    kw = dict(VARIANTS[variant])
    parser = kw.pop("parser_class", None)
    kw.update(extra)
    if parser is None:
        return redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=15, **kw)
    pool = redis.ConnectionPool(host="127.0.0.1", port=srv.port, socket_timeout=15,
                                parser_class=parser, **kw)
    return redis.Redis(connection_pool=pool)


def s(v):
    return v.decode() if isinstance(v, bytes) else v


@pytest.fixture
def rpy(server, request):
    clients = []

    def make(variant, **extra):
        c = redis_client(server, variant, **extra)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_redis_py_every_command(server, rpy, variant):
    r = rpy(variant)
    assert r.ping() is True
    conn = r.connection_pool.get_connection()
    try:
        proto = VARIANTS[variant].get("protocol", 3)
        if proto == 3:
            meta = {s(k): s(v) for k, v in conn.handshake_metadata.items()}
            assert meta["server"] == "disque" and meta["proto"] == 3 and meta["mode"] == "standalone"
        else:
            assert conn.handshake_metadata is None
    finally:
        r.connection_pool.release(conn)
    # the library name reached the server through CLIENT SETINFO
    me = r.client_info()
    assert me["cmd"] in ("client", "ping") and int(me["id"]) == r.client_id()
    # ---- job commands
    node = r.execute_command("HELLO")
    assert node[0] == 1 and re.fullmatch(rb"[0-9a-f]{40}", node[1])
    q = f"py-{variant}"
    jid = r.execute_command("ADDJOB", q, "body one", 0)
    assert JOB_ID_RE.match(jid)
    once = r.execute_command("ADDJOB", q, b"two\r\n$-1\r\n", 0, "RETRY", 0, "REPLICATE", 1,
                             "TTL", 60)
    shown = r.execute_command("SHOW", once)
    fields = dict(zip(shown[0::2], shown[1::2]))
    assert fields[b"next-requeue-within"] is None and fields[b"body"] == b"two\r\n$-1\r\n"
    assert fields[b"state"] == b"queued" and fields[b"nodes-confirmed"] == []
    assert r.execute_command("SHOW", UNKNOWN_ID) is None
    assert r.execute_command("QLEN", q) == 2
    assert r.execute_command("QPEEK", q, 10) == [[q.encode(), jid, b"body one"],
                                                 [q.encode(), once, b"two\r\n$-1\r\n"]]
    qstat = r.execute_command("QSTAT", q)
    assert dict(zip(qstat[0::2], qstat[1::2]))[b"len"] == 2
    assert r.execute_command("QSTAT", "py-nosuch") is None
    got = r.execute_command("GETJOB", "COUNT", 2, "WITHCOUNTERS", "FROM", q)
    assert [j[1] for j in got] == [jid, once] and got[0][3:] == [b"nacks", 0, b"additional-deliveries", 0]
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "py-empty") is None
    assert r.execute_command("GETJOB", "TIMEOUT", 30, "FROM", "py-e1", "py-e2", "py-e3") is None
    assert r.execute_command("WORKING", jid) > 0
    assert r.execute_command("NACK", jid) == 1
    assert r.execute_command("DEQUEUE", jid) == 1
    assert r.execute_command("ENQUEUE", jid) == 1
    assert r.execute_command("ACKJOB", jid) == 1
    assert r.execute_command("FASTACK", once) == 1
    gone = r.execute_command("ADDJOB", q, "x", 0)
    assert r.execute_command("DELJOB", gone) == 1
    assert r.execute_command("ACKJOB") == 0
    assert r.execute_command("PAUSE", q, "in") == b"in"
    assert r.execute_command("PAUSE", q, "none") == b"none"
    r.execute_command("ADDJOB", q, "scan me", 0)
    cursor, queues = r.execute_command("QSCAN", "BUSYLOOP")
    assert cursor == b"0" and q.encode() in queues
    cursor, jobs = r.execute_command("JSCAN", "BUSYLOOP", "QUEUE", q, "REPLY", "all")
    assert cursor == b"0" and len(jobs) == 1 and len(jobs[0]) == 30
    with pytest.raises(redis.ResponseError, match="only processed from AOF"):
        r.execute_command("LOADJOB", "x")
    with pytest.raises(redis.ResponseError, match="BADID"):
        r.execute_command("SHOW", "garbage")
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCMD")
    # ---- node commands
    info = r.info()
    assert info["disque_version"] == "1.0-rc1" and info["workers"] == server.workers
    assert r.info("all")["cmdstat_addjob"]["calls"] >= 1
    assert r.info("nosuch") == {}
    assert {s(k): s(v) for k, v in r.config_get("maxclients").items()} == {"maxclients": "10000"}
    assert r.config_set("slowlog-max-len", 100) is True
    assert r.config_set("slowlog-max-len", 128) is True
    with pytest.raises(redis.ResponseError, match="Unsupported CONFIG parameter"):
        r.config_set("nosuch", 1)
    sec, usec = r.time()
    assert abs(sec - time.time()) < 5
    cmds = r.command()
    assert len(cmds) == 33 and cmds["addjob"]["arity"] == -4
    assert "denyoom" in cmds["addjob"]["flags"]
    assert r.command_count() == 33
    assert r.client_setname("py-name") is True
    assert s(r.client_getname()) == "py-name"
    mine = [c for c in r.client_list() if c["name"] == "py-name"]
    assert len(mine) == 1 and mine[0]["flags"] == "N"
    assert r.client_setinfo("LIB-NAME", "tests") is True
    assert r.client_pause(1) is True
    assert r.client_kill_filter(_id=10**9) == 0
    assert r.slowlog_reset() is True
    assert r.config_set("slowlog-log-slower-than", 0) is True
    r.execute_command("QLEN", "py-slow")
    entries = r.slowlog_get(2)
    assert [e["command"] for e in entries] == [b"QLEN py-slow", b"CONFIG SET slowlog-log-slower-than 0"]
    assert r.slowlog_len() >= 2
    assert r.config_set("slowlog-log-slower-than", 10000) is True
    assert r.execute_command("LATENCY", "LATEST") == []
    assert r.execute_command("DEBUG", "SLEEP", 0) in (True, b"OK", "OK")
    # (AUTH without requirepass: redis-py maps that error to AuthenticationError, a
    # ConnectionError it retries with backoff; the raw tests cover it)
    # MONITOR: redis-py's Monitor helper expects Redis' "[db addr]"; Disque has no db
    # (SPEC 1.4), so read the raw feed from its connection
    other = rpy(variant)
    with r.monitor() as m:
        other.execute_command("QLEN", "py-mon")
        line = m.connection.read_response()
        while "HELLO" in s(line):        # the other client's handshake
            line = m.connection.read_response()
    line = s(line)
    assert re.fullmatch(r'\d+\.\d{6} \[127\.0\.0\.1:\d+\] "QLEN" "py-mon"', line), line
    # QUIT answers +OK and closes; a new connection (with a new HELLO) works
    assert r.execute_command("QUIT") in (True, b"OK", "OK")
    r.connection_pool.disconnect()      # else the next command may race the server's close
    assert r.ping() is True


@pytest.mark.parametrize("variant", ["default", "resp2", "resp3-py"])
def test_redis_py_with_password(start_server, variant):
    srv = start_server()
    admin = srv.raw()
    assert admin.call("CONFIG", "SET", "requirepass", "py-pw") == OK
    r = redis_client(srv, variant, password="py-pw")
    try:
        assert r.ping() is True
        assert r.execute_command("QLEN", "q") == 0
        # no retries: redis-py retries authentication errors (ConnectionError) with backoff
        bad = redis_client(srv, variant, password="wrong", retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.AuthenticationError):
            bad.ping()
        bad.close()
        anon = redis_client(srv, variant, retry=Retry(NoBackoff(), 0))
        with pytest.raises(redis.RedisError):
            anon.execute_command("QLEN", "q")
        anon.close()
    finally:
        r.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_redis_py_pipeline_mixed_workers(server, rpy, variant):
    r = rpy(variant)
    p = r.pipeline(transaction=False)
    queues = [f"pp-{variant}-{i}" for i in range(6)]
    for q in queues:
        p.execute_command("ADDJOB", q, "b", 0)
    for q in queues:
        p.execute_command("QLEN", q)
    p.execute_command("SHOW", UNKNOWN_ID)
    p.execute_command("GETJOB", "NOHANG", "FROM", "pp-empty")
    p.ping()
    out = p.execute()
    assert all(JOB_ID_RE.match(x) for x in out[:6])
    assert out[6:12] == [1] * 6 and out[12] is None and out[13] is None and out[14] is True


# ---------------------------------------------------------------------------
# redis-cli -3
# ---------------------------------------------------------------------------


@needs_cli
def test_redis_cli_resp3(server):
    def cli(*args):
        return subprocess.run([REDIS_CLI, "-3", "-p", str(server.port), "--no-raw", *args],
                              capture_output=True, text=True, timeout=20)

    assert cli("PING").stdout == "PONG\n"
    assert cli("SHOW", UNKNOWN_ID).stdout == "(nil)\n"
    assert cli("GETJOB", "NOHANG", "FROM", "cli3").stdout == "(nil)\n"
    out = cli("CONFIG", "GET", "port").stdout
    assert out == f'1# "port" => "{server.port}"\n', out
    out = cli("HELLO", "3").stdout
    assert '1# "server" => "disque"' in out and '3# "proto" => (integer) 3' in out, out
    jid = server.execute("ADDJOB", "cli3", "b", 0)
    out = cli("QPEEK", "cli3", "1").stdout
    assert out == f'1) 1) "cli3"\n   2) "{bytes(jid).decode()}"\n   3) "b"\n', out
    # redis-cli without -3 and --no-raw: HELLO alone is the Disque reply
    out = subprocess.run([REDIS_CLI, "-p", str(server.port), "--no-raw", "HELLO"],
                         capture_output=True, text=True, timeout=20).stdout
    assert out.startswith("1) (integer) 1\n2) \""), out
