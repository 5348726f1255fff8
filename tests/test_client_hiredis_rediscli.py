"""``redis-cli`` (Debian's redis-tools) and the ``hiredis`` reply parser against our server.

redis-cli runs without a terminal here, so by default it prints in its "raw" format;
``--no-raw`` asks for the formatting a person sees at a terminal (``(integer) 1``,
``(error) ERR ...``, quoted bulk strings, unquoted status replies, ``(nil)``).
"""

import re
import shutil
import subprocess

import hiredis
import pytest


from support.slots import queues_on_distinct_workers
from support.info import info_sections
from support.jobs import JOB_ID_RE
from support.resp_client import Err, NULL_ARRAY, Status, encode_command, parse_resp2
encode = encode_command
ID_TEXT = r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}"
EMPTY_ARRAY = r"\((empty array|empty list or set)\)"    # redis-cli >= 6.2 / older

REDIS_CLI = shutil.which("redis-cli")
needs_cli = pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed "
                               "(Debian package redis-tools; .ci/run installs it)")






def cli(server, *args, raw=True, stdin=None, timeout=30, check=True):
    """Run redis-cli without a terminal; return CompletedProcess (text)."""
    cmd = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(server.port)]
    if not raw:
        cmd.append("--no-raw")
    cmd += [str(a) for a in args]
    proc = subprocess.run(cmd, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, timeout=timeout)
    out = subprocess.CompletedProcess(proc.args, proc.returncode,
                                      proc.stdout.decode("utf-8", "replace"),
                                      proc.stderr.decode("utf-8", "replace"))
    if check:
        assert proc.returncode == 0, (out.stdout, out.stderr)
    return out


def pretty(server, *args):
    return cli(server, *args, raw=False).stdout


# ---------------------------------------------------------------------------
# redis-cli, one command at a time
# ---------------------------------------------------------------------------


@needs_cli
def test_cli_ping(server):
    assert cli(server, "PING").stdout == "PONG\n"
    assert pretty(server, "PING") == "PONG\n"                  # status: no quotes
    assert cli(server, "PING", "hello world").stdout == "hello world\n"
    assert pretty(server, "PING", "hello world") == '"hello world"\n'   # bulk: quoted


@needs_cli
def test_cli_addjob_prints_a_status_reply(server):
    out = pretty(server, "ADDJOB", "cli-q", "hello world", "0")
    # a status reply is printed bare; a bulk string would be printed in quotes
    assert re.fullmatch(ID_TEXT + "\n", out), out
    raw = cli(server, "ADDJOB", "cli-q", "second", "0").stdout
    assert re.fullmatch(ID_TEXT + "\n", raw), raw
    assert pretty(server, "QLEN", "cli-q") == "(integer) 2\n"
    assert cli(server, "QLEN", "cli-q").stdout == "2\n"


@needs_cli
def test_cli_getjob_show_ackjob_qlen(server):
    queue = "cli-life"
    job_id = cli(server, "ADDJOB", queue, "the body", "0").stdout.strip()
    assert JOB_ID_RE.match(job_id.encode())
    node_id = server.execute("HELLO")[1].decode()

    show = pretty(server, "SHOW", job_id).splitlines()
    assert len(show) == 30, show
    expected = [
        r' 1\) "id"', rf' 2\) "{re.escape(job_id)}"', r' 3\) "queue"', rf' 4\) "{queue}"',
        r' 5\) "state"', r' 6\) "queued"', r' 7\) "repl"', r' 8\) \(integer\) 1',
        r' 9\) "ttl"', r'10\) \(integer\) (8639[0-9]|86400)', r'11\) "ctime"', r'12\) \(integer\) \d{19}',
        r'13\) "delay"', r'14\) \(integer\) 0', r'15\) "retry"', r'16\) \(integer\) 300',
        r'17\) "nacks"', r'18\) \(integer\) 0', r'19\) "additional-deliveries"',
        r'20\) \(integer\) 0', r'21\) "nodes-delivered"', rf'22\) 1\) "{node_id}"',
        r'23\) "nodes-confirmed"', rf'24\) {EMPTY_ARRAY}', r'25\) "next-requeue-within"',
        r'26\) \(integer\) \d+', r'27\) "next-awake-within"', r'28\) \(integer\) \d+',
        r'29\) "body"', r'30\) "the body"',
    ]
    for line, pattern in zip(show, expected):
        assert re.fullmatch(pattern, line), (line, pattern)
    raw_show = cli(server, "SHOW", job_id).stdout.splitlines()
    assert raw_show[:8] == ["id", job_id, "queue", queue, "state", "queued", "repl", "1"]
    assert raw_show[-2:] == ["body", "the body"]

    got = pretty(server, "GETJOB", "TIMEOUT", "1000", "FROM", queue)
    assert got == f'1) 1) "{queue}"\n   2) "{job_id}"\n   3) "the body"\n', got
    assert pretty(server, "QLEN", queue) == "(integer) 0\n"
    assert pretty(server, "GETJOB", "NOHANG", "FROM", queue) == "(nil)\n"     # *-1
    assert pretty(server, "ACKJOB", job_id) == "(integer) 1\n"
    assert pretty(server, "ACKJOB", job_id) == "(integer) 0\n"
    assert pretty(server, "SHOW", job_id) == "(nil)\n"                         # $-1
    assert re.fullmatch(EMPTY_ARRAY + "\n", pretty(server, "QPEEK", queue, "5"))


@needs_cli
def test_cli_getjob_withcounters_across_workers(server):
    queues = queues_on_distinct_workers("cli-multi")
    ids = [cli(server, "ADDJOB", q, f"b{n}", "0").stdout.strip() for n, q in enumerate(queues)]
    out = pretty(server, "GETJOB", "COUNT", "3", "WITHCOUNTERS", "FROM", *queues).splitlines()
    assert len(out) == 21, out
    for n, q in enumerate(queues):
        block = out[7 * n:7 * n + 7]
        assert block == [f'{n + 1}) 1) "{q}"', f'   2) "{ids[n]}"', f'   3) "b{n}"',
                         '   4) "nacks"', '   5) (integer) 0',
                         '   6) "additional-deliveries"', '   7) (integer) 0'], block
    assert pretty(server, "ACKJOB", *ids) == "(integer) 3\n"


@needs_cli
def test_cli_hello_and_info(server):
    node_id = server.execute("HELLO")[1].decode()
    assert pretty(server, "HELLO") == (
        f'1) (integer) 1\n2) "{node_id}"\n3) 1) "{node_id}"\n   2) "127.0.0.1"\n'
        f'   3) "{server.port}"\n   4) "1"\n')
    info = cli(server, "INFO").stdout
    assert info.startswith("# Server\r\n"), info[:80]
    assert "\r\ndisque_version:1.0-rc1\r\n" in info
    assert f"\r\ntcp_port:{server.port}\r\n" in info
    for section in ("Clients", "Memory", "Jobs", "Queues", "Persistence", "Stats", "CPU"):
        assert f"\r\n# {section}\r\n" in info, section
    server_only = cli(server, "INFO", "server").stdout
    assert server_only.startswith("# Server\r\n") and "# Clients" not in server_only
    assert cli(server, "INFO", "nosuchsection").stdout.strip() == ""


@needs_cli
def test_cli_errors(server):
    assert pretty(server, "FOO", "bar") == "(error) ERR unknown command 'FOO'\n"
    assert pretty(server, "qlen") == "(error) ERR wrong number of arguments for 'qlen' command\n"
    assert pretty(server, "SHOW", "nope") == "(error) BADID Invalid Job ID format.\n"
    assert pretty(server, "ADDJOB", "q", "b", "0", "REPLICATE", "3") == (
        "(error) NOREPL Not enough reachable nodes for the requested replication level\n")
    assert pretty(server, "ADDJOB", "q", "b", "0", "TTL", "0") == (
        "(error) ERR TTL must be a number > 0\n")
    assert pretty(server, "GETJOB", "FROM") == "(error) ERR syntax error\n"
    # the raw (no terminal) format: just the error line
    raw = cli(server, "FOO", "bar").stdout
    assert raw.splitlines()[0] == "ERR unknown command 'FOO'", raw
    raw = cli(server, "SHOW", "nope").stdout
    assert raw.splitlines()[0] == "BADID Invalid Job ID format.", raw
    assert pretty(server, "PING") == "PONG\n"        # the server is fine afterwards


@needs_cli
def test_cli_repeat_mode(server):
    out = cli(server, "-r", "100", "ADDJOB", "cli-repeat", "x", "0").stdout.splitlines()
    assert len(out) == 100
    assert all(re.fullmatch(ID_TEXT, line) for line in out), out[:3]
    assert len(set(out)) == 100
    assert server.execute("QLEN", "cli-repeat") == 100
    out = cli(server, "-r", "3", "QLEN", "cli-repeat", raw=False).stdout
    assert out == "(integer) 100\n" * 3


def _pipe_input(commands):
    return b"".join(encode(*c) for c in commands)


def _pipe_hint(summary):
    if "unknown command 'ECHO'" in summary:
        return ("\nredis-cli --pipe ends its input with ECHO <20 random bytes> and waits for "
                "that echo; the server has no ECHO, so redis-cli waits for --pipe-timeout "
                "(30 s by default) and exits 1")
    return ""


@needs_cli
def test_cli_pipe_mode(server):
    """``redis-cli --pipe``: mass insertion of ADDJOBs in RESP form.

    redis-cli appends ``ECHO <20 random bytes>`` to the data and waits for that echo to
    know that the last reply arrived; its summary then counts the other replies."""
    queues = queues_on_distinct_workers("cli-pipe")
    n = 3000
    commands = [("ADDJOB", queues[i % 3], f"job-{i}", "0") for i in range(n)]
    proc = cli(server, "--pipe", "--pipe-timeout", "3", stdin=_pipe_input(commands),
               timeout=60, check=False)
    summary = proc.stdout + proc.stderr
    assert "All data transferred" in summary, summary
    assert f"errors: 0, replies: {n}" in summary, summary + _pipe_hint(summary)
    assert proc.returncode == 0, summary
    assert sum(server.execute("QLEN", q) for q in queues) == n


@needs_cli
def test_cli_pipe_mode_counts_errors(server):
    queue = "cli-pipe-err"
    good = [("ADDJOB", queue, f"job-{i}", "0") for i in range(500)]
    bad = [("ADDJOB", queue, "x", "0", "TTL", "0")] * 7 + [("NOSUCHCMD",)] * 3
    commands = good[:250] + bad + good[250:]
    proc = cli(server, "--pipe", "--pipe-timeout", "3", stdin=_pipe_input(commands),
               timeout=60, check=False)
    summary = proc.stdout + proc.stderr
    assert "errors: 10, replies: 510" in summary, summary + _pipe_hint(summary)
    assert summary.count("ERR TTL must be a number > 0") == 7, summary
    assert summary.count("ERR unknown command 'NOSUCHCMD'") == 3, summary
    assert proc.returncode == 1, summary             # redis-cli: errors -> exit 1
    assert server.execute("QLEN", queue) == 500


# ---------------------------------------------------------------------------
# hiredis: exact reply types for a pipelined mix routed to different workers
# ---------------------------------------------------------------------------


def type_tree(value):
    """The strict parse -> nested type tags."""
    if type(value) is Status:
        return "status"
    if type(value) is Err:
        return "error"
    if value is NULL_ARRAY:
        return "nil-array"
    if value is None:
        return "nil-bulk"
    if isinstance(value, int):
        return "int"
    if isinstance(value, bytes):
        return "bulk"
    assert isinstance(value, list), value
    return [type_tree(v) for v in value]


def plain(value):
    """The strict parse with the tags dropped, comparable with hiredis' values."""
    if value is NULL_ARRAY:
        return None
    if type(value) in (Status, Err):
        return bytes(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def read_with_hiredis(conn, count, timeout=10.0):
    """Read exactly ``count`` replies, parsed by hiredis; bytes are fed one at a time so
    each reply's exact extent is known. Returns [(hiredis value, raw bytes)]."""
    reader = hiredis.Reader()
    out = []
    start = 0
    stream = b""
    while len(out) < count:
        chunk = conn.read_exact(1, timeout=timeout)
        stream += chunk
        reader.feed(chunk)
        value = reader.gets()
        if value is not False:
            out.append((value, stream[start:]))
            start = len(stream)
    assert not reader.has_data() and not conn.has_data(0.05), "unexpected extra reply bytes"
    return out


def check(reply, kind, value=None):
    """``kind`` is the expected type tree; ``value`` (optional) the expected hiredis value."""
    got, raw = reply
    tagged, end = parse_resp2(raw, 0)
    assert end == len(raw), raw
    assert type_tree(tagged) == kind, (raw, kind)
    if kind == "error":
        assert isinstance(got, hiredis.ReplyError), got
        assert got.args[0].encode() == bytes(tagged)
    else:
        assert got == plain(tagged), (got, raw)
    if value is not None:
        if kind == "error":
            assert got.args[0] == value, got
        else:
            assert got == value, (got, raw)
    return got


def test_hiredis_pipelined_mix_exact_types(server):
    q0, q1, q2 = queues_on_distinct_workers("hr")
    unknown_id = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
    conn = server.raw()
    phase1 = [
        ("ADDJOB", q0, "a", 0), ("ADDJOB", q1, "b", 0), ("ADDJOB", q2, "c", 0),
        ("ADDJOB", q1, "", 0, "RETRY", 5),
        ("PING",), ("PING", "hello"), ("PING", ""),
        ("QLEN", q0), ("QLEN", q1), ("QLEN", "hr-missing"),
        ("GETJOB", "NOHANG", "FROM", "hr-missing"),
        ("SHOW", unknown_id), ("SHOW", "bad"),
        ("QSTAT", "hr-never-used"), ("QPEEK", "hr-missing", 3),
        ("ADDJOB", q2, "x", 0, "REPLICATE", 3),
        ("FOO", "bar"),
        ("HELLO",), ("TIME",),
        ("DEBUG", "ERROR", "custom failure"),
        ("ACKJOB",),
    ]
    conn.send(b"".join(encode(*c) for c in phase1))
    r = read_with_hiredis(conn, len(phase1))
    ids = [check(r[i], "status") for i in range(4)]
    assert all(JOB_ID_RE.match(i) for i in ids), ids
    check(r[4], "status", b"PONG")
    check(r[5], "bulk", b"hello")
    check(r[6], "bulk", b"")
    check(r[7], "int", 1)
    check(r[8], "int", 2)
    check(r[9], "int", 0)
    check(r[10], "nil-array")
    check(r[11], "nil-bulk")
    check(r[12], "error", "BADID Invalid Job ID format.")
    check(r[13], "nil-array")
    check(r[14], [], [])
    check(r[15], "error", "NOREPL Not enough reachable nodes for the requested replication level")
    check(r[16], "error", "ERR unknown command 'FOO'")
    hello = check(r[17], ["int", "bulk", ["bulk"] * 4])
    assert hello[0] == 1 and hello[2][2] == str(server.port).encode()
    check(r[18], ["bulk", "bulk"])
    check(r[19], "error", "custom failure")
    check(r[20], "int", 0)

    if server.workers == 3:
        workers = info_sections(server.execute("INFO", "workers"))["Workers"]
        jobs = [int(re.search(r"jobs=(\d+)", w).group(1)) for w in workers]
        assert jobs == [1, 2, 1], workers     # one queue per worker; q1 holds two jobs

    a, b, c, e = ids
    phase2 = [
        ("SHOW", a),
        ("GETJOB", "COUNT", 3, "FROM", q0, q1, q2),
        ("QLEN", q1),
        ("WORKING", a),
        ("ACKJOB", a, b, c),
        ("ACKJOB", a),
        ("QPEEK", q1, 1),
        ("DEQUEUE", e), ("ENQUEUE", e), ("NACK", e),
        ("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", q1, q2),
        ("SHOW", e),
        ("DELJOB", e, unknown_id),
        ("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", q0, q1, q2),
        ("WORKING", e),
        ("INFO", "jobs"),
    ]
    conn.send(b"".join(encode(*cmd) for cmd in phase2))
    r = read_with_hiredis(conn, len(phase2))
    show_types = ["bulk", "bulk", "bulk", "bulk", "bulk", "bulk", "bulk", "int",
                  "bulk", "int", "bulk", "int", "bulk", "int", "bulk", "int", "bulk", "int",
                  "bulk", "int", "bulk", ["bulk"], "bulk", [], "bulk", "int", "bulk", "int",
                  "bulk", "bulk"]
    shown = check(r[0], show_types)
    assert shown[:6] == [b"id", a, b"queue", q0.encode(), b"state", b"queued"]
    got = check(r[1], [["bulk"] * 3] * 3)
    assert got == [[q0.encode(), a, b"a"], [q1.encode(), b, b"b"], [q2.encode(), c, b"c"]]
    check(r[2], "int", 1)
    check(r[3], "int", 300)
    check(r[4], "int", 3)
    check(r[5], "int", 0)
    check(r[6], [["bulk"] * 3], [[q1.encode(), e, b""]])
    check(r[7], "int", 1)
    check(r[8], "int", 1)
    check(r[9], "int", 0)          # NACK only requeues active jobs: e is queued
    got = check(r[10], [["bulk", "bulk", "bulk", "bulk", "int", "bulk", "int"]])
    # DEQUEUE + ENQUEUE queued e a second time: one additional delivery (SPEC 7.2)
    assert got == [[q1.encode(), e, b"", b"nacks", 0, b"additional-deliveries", 1]]
    shown = check(r[11], show_types)
    assert shown[4:6] == [b"state", b"active"] and shown[15] == 5   # retry
    check(r[12], "int", 1)
    check(r[13], "nil-array")
    check(r[14], "error", "NOJOB Job not known in the context of this node.")
    info = check(r[15], "bulk")
    assert b"registered_jobs:0\r\n" in info, info
