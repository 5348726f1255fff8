"""PING / QUIT / HELLO / INFO / QLEN / SHOW / command-table errors (SPEC 1.3, 2, 3.9, 3.10, 4.1, 4.5, 14, 16)."""

import re

import pytest
from support.info import info_sections, parse_info
from support.jobs import SHOW_FIELDS, addjob, show
from support.resp_client import encode_command, parse_resp
from support.waits import wait_until




def arity_err(name):
    return b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()


# ---------------------------------------------------------------------------
# PING / QUIT
# ---------------------------------------------------------------------------


def test_ping(server):
    r = server.raw()
    assert r.call("PING") == b"+PONG\r\n"
    assert r.call("ping") == b"+PONG\r\n"
    assert r.call("PING", "hello") == b"$5\r\nhello\r\n"
    assert r.call("PING", "") == b"$0\r\n\r\n"
    assert r.call("PING", "a", "b") == arity_err("ping")


def test_quit(server):
    r = server.raw()
    r.send(encode_command("QUIT"))
    data, closed = r.read_until_closed(5)
    assert data == b"+OK\r\n" and closed


def test_quit_with_args_and_pipelined_rest_ignored(server):
    r = server.raw()
    r.send(encode_command("quit", "a", "b", "c") + encode_command("PING"))
    data, closed = r.read_until_closed(5)
    assert data == b"+OK\r\n" and closed


# ---------------------------------------------------------------------------
# HELLO
# ---------------------------------------------------------------------------


def test_hello_single_node(server):
    r = server.raw()
    raw = r.call("HELLO")
    reply = parse_resp(raw)[0]
    assert raw.startswith(b"*3\r\n:1\r\n$40\r\n"), raw
    assert len(reply) == 3
    version, myid, entry = reply
    assert version == 1
    assert re.fullmatch(rb"[0-9a-f]{40}", myid)
    assert isinstance(entry, list) and len(entry) == 4
    assert all(type(x) is bytes for x in entry), entry      # all bulk strings (SPEC 16.2)
    assert entry[0] == myid
    assert entry[1] in (b"", b"127.0.0.1")
    assert entry[2] == str(server.port).encode()
    assert entry[3] == b"1"


def test_hello_arity_and_stable_id(server):
    r = server.raw()
    # HELLO <protover> is the Redis 6 handshake (tests/test_server_resp3.py)
    assert r.call("HELLO", "x") == b"-ERR Protocol version is not an integer or out of range\r\n"
    assert r.call("HELLO", "4") == b"-NOPROTO unsupported protocol version\r\n"
    assert r.execute("HELLO")[1] == server.raw().execute("HELLO")[1]


# ---------------------------------------------------------------------------
# INFO
# ---------------------------------------------------------------------------


def test_info_default_sections(server):
    r = server.raw()
    raw = r.call("INFO")
    assert raw.startswith(b"$")
    text = r.execute("INFO")
    assert type(text) is bytes
    for section in (b"# Server\r\n", b"# Clients\r\n", b"# Memory\r\n", b"# Jobs\r\n",
                     b"# Queues\r\n", b"# Stats\r\n"):
        assert section in text, section
    assert b"# Commandstats" not in text
    fields = parse_info(text)
    assert fields["disque_version"] == "1.0-rc1"
    assert fields["tcp_port"] == str(server.port)
    assert fields["process_id"] == str(server.pid)
    assert re.fullmatch(r"[0-9a-f]{40}", fields["run_id"])
    for key in ("connected_clients", "blocked_clients", "used_memory", "registered_jobs",
                "registered_queues", "total_connections_received", "total_commands_processed",
                "uptime_in_seconds"):
        assert re.fullmatch(r"\d+", fields[key]), (key, fields.get(key))
    assert int(fields["connected_clients"]) >= 1


def test_info_sections_format(server):
    text = server.raw().execute("INFO").decode()
    lines = text.split("\r\n")
    assert lines[0] == "# Server"
    section = None
    for line in lines:
        if line.startswith("# "):
            section = line[2:]
        elif line and section != "Workers":   # per-worker lines have a free format
            assert re.fullmatch(r"[A-Za-z0-9_\-]+:.*", line), line
    # sections separated by an empty line
    for i, line in enumerate(lines):
        if line.startswith("# ") and i > 0:
            assert lines[i - 1] == "", lines[i - 1:i + 1]


def test_info_jobs_and_queues_counts(server):
    r = server.raw()
    fields = parse_info(r.execute("INFO"))
    assert fields["registered_jobs"] == "0"
    ids = [addjob(r, f"iq{i % 4}", b"x") for i in range(10)]
    fields = parse_info(r.execute("INFO"))
    assert fields["registered_jobs"] == "10"
    assert fields["registered_queues"] == "4"
    r.execute("ACKJOB", *ids[:3])
    assert parse_info(r.execute("INFO"))["registered_jobs"] == "7"


def test_info_single_section_exact(server):
    r = server.raw()
    for i in range(3):
        addjob(r, "q", b"x")
    assert r.call("INFO", "jobs") == b"$27\r\n# Jobs\r\nregistered_jobs:3\r\n\r\n"
    assert r.call("INFO", "JOBS") == b"$27\r\n# Jobs\r\nregistered_jobs:3\r\n\r\n"
    assert r.call("INFO", "queues") == b"$31\r\n# Queues\r\nregistered_queues:1\r\n\r\n"
    server_section = r.execute("INFO", "server")
    assert server_section.startswith(b"# Server\r\n")
    assert b"# Jobs" not in server_section


def test_info_unknown_section_and_syntax(server):
    r = server.raw()
    assert r.call("INFO", "nosuchsection") == b"$0\r\n\r\n"
    assert r.call("INFO", "a", "b") == b"-ERR syntax error\r\n"


def test_info_all_has_commandstats(server):
    r = server.raw()
    r.execute("PING")
    text = r.execute("INFO", "all")
    assert b"# Commandstats\r\n" in text
    assert re.search(rb"cmdstat_ping:calls=\d+,usec=\d+,usec_per_call=\d+\.\d\d", text)


def test_info_workers_section(server):
    text = server.raw().execute("INFO").decode()
    sections = info_sections(text.encode())
    assert "Workers" in sections, list(sections)
    lines = [ln for ln in sections["Workers"] if ln.startswith("worker")]
    assert len(lines) == server.workers, sections["Workers"]


def test_info_blocked_clients(server):
    r = server.raw()
    r.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", "a"))
    wait_until(lambda: server.info_fields("clients")["blocked_clients"] == "1", 5)
    addjob(server.raw(), "a", b"x")
    assert len(r.read_parsed(timeout=5)) == 1
    wait_until(lambda: server.info_fields("clients")["blocked_clients"] == "0", 5)


# ---------------------------------------------------------------------------
# QLEN
# ---------------------------------------------------------------------------


def test_qlen(server):
    r = server.raw()
    assert r.call("QLEN", "nosuchq") == b":0\r\n"
    for i in range(5):
        addjob(r, "lq", b"x")
    assert r.call("QLEN", "lq") == b":5\r\n"
    r.execute("GETJOB", "COUNT", 2, "FROM", "lq")
    assert r.call("QLEN", "lq") == b":3\r\n"
    assert r.call("QLEN") == arity_err("qlen")
    assert r.call("QLEN", "a", "b") == arity_err("qlen")


# ---------------------------------------------------------------------------
# SHOW
# ---------------------------------------------------------------------------


def test_show_structure_and_types(server):
    r = server.raw()
    job_id = addjob(r, "showq", b"hello world", 0, "RETRY", 30, "TTL", 3600)
    reply = r.execute("SHOW", job_id)
    assert isinstance(reply, list) and len(reply) == 30
    assert reply[0::2] == SHOW_FIELDS
    assert all(type(name) is bytes for name in reply[0::2])   # field names are bulk strings
    v = dict(zip(reply[0::2], reply[1::2]))
    assert type(v[b"id"]) is bytes and v[b"id"] == job_id
    assert type(v[b"queue"]) is bytes and v[b"queue"] == b"showq"
    assert type(v[b"state"]) is bytes and v[b"state"] == b"queued"
    for name in (b"repl", b"ttl", b"ctime", b"delay", b"retry", b"nacks", b"additional-deliveries",
                 b"next-requeue-within", b"next-awake-within"):
        assert type(v[name]) is int, (name, v[name])
    assert v[b"repl"] == 1 and v[b"retry"] == 30 and v[b"delay"] == 0
    assert 3598 <= v[b"ttl"] <= 3600
    assert isinstance(v[b"nodes-delivered"], list) and len(v[b"nodes-delivered"]) == 1
    assert len(v[b"nodes-delivered"][0]) == 40
    assert v[b"nodes-confirmed"] == []
    assert 0 <= v[b"next-awake-within"] <= v[b"next-requeue-within"] <= 30_250
    assert type(v[b"body"]) is bytes and v[b"body"] == b"hello world"


def test_show_raw_prefix(server):
    r = server.raw()
    job_id = addjob(r, "q", b"b")
    raw = r.call("SHOW", job_id)
    assert raw.startswith(b"*30\r\n$2\r\nid\r\n$40\r\n" + job_id + b"\r\n$5\r\nqueue\r\n$1\r\nq\r\n"
                          b"$5\r\nstate\r\n$6\r\nqueued\r\n$4\r\nrepl\r\n:1\r\n$3\r\nttl\r\n:"), raw
    assert raw.endswith(b"$4\r\nbody\r\n$1\r\nb\r\n")


def test_show_unknown_and_bad(server):
    r = server.raw()
    assert r.call("SHOW", "D-00000000-000000000000000000000000-0000") == b"$-1\r\n"
    assert r.call("SHOW", "garbage") == b"-BADID Invalid Job ID format.\r\n"
    assert r.call("SHOW") == arity_err("show")
    assert r.call("SHOW", "a", "b") == arity_err("show")


def test_show_states(server):
    r = server.raw()
    job_id = addjob(r, "stq", b"x")
    assert show(r, job_id)[b"state"] == b"queued"
    r.execute("GETJOB", "FROM", "stq")
    assert show(r, job_id)[b"state"] == b"active"
    delayed = addjob(r, "stq", b"x", 0, "DELAY", 10)
    assert show(r, delayed)[b"state"] == b"active"


# ---------------------------------------------------------------------------
# command table errors (SPEC 1.3)
# ---------------------------------------------------------------------------


def test_unknown_command_name_as_sent(server):
    r = server.raw()
    assert r.call("FOOBAR") == b"-ERR unknown command 'FOOBAR'\r\n"
    assert r.call("fooBar", "x", "y") == b"-ERR unknown command 'fooBar'\r\n"
    # Redis-only commands are unknown
    assert r.call("GET", "x") == b"-ERR unknown command 'GET'\r\n"
    assert r.call("PING") == b"+PONG\r\n"      # connection still usable


@pytest.mark.parametrize("args,name", [
    (("ADDJOB", "q", "b"), "addjob"),
    (("addjob",), "addjob"),
    (("GetJob",), "getjob"),
    (("SHOW",), "show"),
    (("QLEN",), "qlen"),
    (("WORKING",), "working"),
    (("TIME", "x"), "time"),
    (("PING", "a", "b"), "ping"),
    (("INFO", "a", "b"), None),                 # INFO has arity -1: syntax error instead
    (("PAUSE", "q"), "pause"),
    (("QPEEK", "q"), "qpeek"),
    (("DEBUG",), "debug"),
])
def test_arity_errors_lowercase_name(server, args, name):
    raw = server.raw().call(*args)
    if name is None:
        assert raw == b"-ERR syntax error\r\n"
    else:
        assert raw == arity_err(name)


def test_debug_flushall(server):
    r = server.raw()
    job_id = addjob(r, "fq", b"x")
    assert r.call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    assert r.execute("SHOW", job_id) is None
    assert r.execute("QLEN", "fq") == 0
    fields = parse_info(r.execute("INFO"))
    assert fields["registered_jobs"] == "0" and fields["registered_queues"] == "0"
