"""Bounded, deterministic fuzzing of the client protocol of a 3-worker node.

One thread throws random input at the server: random command lines (known command
names in random case, with random arguments: integers small / negative / huge /
malformed, job-ID-shaped strings, option words, binary queue names and bodies; sent as
multibulk or inline, whole or dribbled in pieces), and random bytes (garbage, mutated
commands, truncated multibulk, huge announced lengths, over-long lines, partial writes
followed by a close or a reset).  Meanwhile a "valid" client runs an
ADDJOB / GETJOB / ACKJOB loop on its own queues (one per worker, and cross-worker
GETJOBs) and checks every reply byte for byte.

At the end: the front-end and all 3 workers are the processes that started, the valid
client never saw a wrong reply, every reply to fuzz input parsed as well-formed RESP2
(with hiredis, cross-checked by a strict RESP2 parser) and came in
request order, no connection was closed except after QUIT or a protocol error, and the
server logged no traceback.

Deterministic: everything comes from one seeded ``random.Random``; the number of
rounds is fixed (``DISQUE_FUZZ_SEED`` / ``DISQUE_FUZZ_ROUNDS`` change them for a longer
local run).  A wall-clock cap stops early only as a safety net (reported in the output).
Commands that would change the node for everyone (SHUTDOWN, DEBUG FLUSHALL/SLEEP,
CONFIG SET, CLIENT KILL/PAUSE/REPLY, CLUSTER MEET/RESET/LEAVING, MONITOR) are never
sent: they would legitimately break the valid client (and MEET would send traffic
beyond loopback).

The generator is tests/support/fuzz_gen.py, the reply checks tests/support/fuzz_replies.py.
"""

import os
import re
import socket
import threading
import time

import pytest

from support.slots import queues_on_distinct_workers
from support.jobs import JOB_ID_RE
from support.resp_client import Err, RawConn, Status, encode_command
from support.waits import wait_until
from support.fuzz_gen import Gen
from support.fuzz_replies import REPLY_TIMEOUT, FuzzConn, check_reply

encode = encode_command

SEED = int(os.environ.get("DISQUE_FUZZ_SEED", "7711"))
ROUNDS = int(os.environ.get("DISQUE_FUZZ_ROUNDS", "1200"))
WALL_CAP = float(os.environ.get("DISQUE_FUZZ_WALL_CAP", "40"))


# ---------------------------------------------------------------------------
# the valid client
# ---------------------------------------------------------------------------


class ValidClient(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.errors = []
        self.ops = 0
        self.iterations = 0
        self.queues = queues_on_distinct_workers("valid")

    def run(self):
        try:
            conn = RawConn(self.port, timeout=REPLY_TIMEOUT)
            try:
                self.loop(conn)
            finally:
                conn.close()
        except Exception as exc:      # any exception is a failure of the valid client
            self.errors.append(f"iteration {self.iterations}: {exc!r}")

    def expect(self, what, got, want):
        self.ops += 1
        if got != want:
            raise AssertionError(f"{what}: got {got!r}, want {want!r}")

    @staticmethod
    def job_reply(jobs):
        return b"*%d\r\n" % len(jobs) + b"".join(
            b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in job) for job in jobs)

    def add(self, conn, queue, body):
        reply = conn.call("ADDJOB", queue, body, 0)
        self.ops += 1
        m = re.fullmatch(rb"\+(D-[^\r\n]{38})\r\n", reply)
        if not m or not JOB_ID_RE.match(m.group(1)):
            raise AssertionError(f"ADDJOB {queue}: {reply!r}")
        return m.group(1)

    def loop(self, conn):
        qs = [q.encode() for q in self.queues]
        i = 0
        while not self.stop.is_set():
            i += 1
            self.iterations = i
            if i % 4:
                q = qs[i % 3]
                body = b"valid-%d" % i
                jid = self.add(conn, q, body)
                self.expect("GETJOB", conn.call("GETJOB", "TIMEOUT", 10000, "FROM", q),
                            self.job_reply([(q, jid, body)]))
                self.expect("ACKJOB", conn.call("ACKJOB", jid), b":1\r\n")
            else:
                # one job per worker, fetched by one cross-worker GETJOB (one per queue
                # per sweep, left to right), acknowledged by one multi-worker ACKJOB;
                # the three ADDJOBs are pipelined
                bodies = [b"multi-%d-%d" % (i, n) for n in range(3)]
                conn.send(b"".join(encode("ADDJOB", q, b, 0) for q, b in zip(qs, bodies)))
                ids = []
                for q in qs:
                    reply = conn.read_reply()
                    self.ops += 1
                    if not reply.startswith(b"+D-") or not JOB_ID_RE.match(reply[1:-2]):
                        raise AssertionError(f"pipelined ADDJOB {q}: {reply!r}")
                    ids.append(reply[1:-2])
                self.expect("GETJOB x3", conn.call("GETJOB", "COUNT", 3, "TIMEOUT", 10000, "FROM", *qs),
                            self.job_reply(list(zip(qs, ids, bodies))))
                self.expect("ACKJOB x3", conn.call("ACKJOB", *ids), b":3\r\n")
                self.expect("SHOW acked", conn.call("SHOW", ids[0]), b"$-1\r\n")
        for q in qs:
            self.expect("final QLEN", conn.call("QLEN", q), b":0\r\n")


# ---------------------------------------------------------------------------
# the test
# ---------------------------------------------------------------------------


class Stats:
    def __init__(self):
        self.sessions = {}
        self.commands = 0
        self.bytes = 0
        self.replies = 0
        self.blocked = 0
        self.protocol_closes = 0
        self.quits = 0


def run_command_session(port, gen, stats, conn):
    """A batch of random commands on ``conn`` (or a new connection). Returns the
    connection to reuse, or None."""
    rng = gen.rng
    if conn is None or conn.closed:
        conn = FuzzConn(port)
    base = len(conn.stream.replies)
    payload = []
    expect = []            # per reply: (kind, data) for the checks below
    block_at = set()
    quit_at = None
    inline_ratio = rng.choice((0.0, 0.0, 0.2, 1.0))
    for _ in range(rng.randint(1, 24)):
        r = rng.random()
        if r < 0.08:
            marker = b"mark-%d" % rng.randrange(10 ** 9)
            payload.append(encode("PING", marker))
            expect.append(("marker", marker))
            continue
        if r < 0.1:
            payload.append(rng.choice([b"*0\r\n", b"*-1\r\n", b"\r\n", b"\n"]))   # no reply
            continue
        argv, may_block, is_quit = gen.command()
        wire = None
        if rng.random() < inline_ratio:
            wire = gen.inline_form(argv)
            if wire is not None:
                argv = [a for a in argv if a]     # the inline parser drops empty arguments
        if wire is None:
            wire = encode(*argv)
        payload.append(wire)
        if may_block:
            block_at.add(base + len(expect))
        expect.append(("command", argv))
        stats.commands += 1
        if is_quit:
            quit_at = base + len(expect) - 1
            stats.quits += 1
            break
    data = b"".join(payload)
    stats.bytes += len(data)
    dribble = rng.random() < 0.15 and len(data) < 20000
    sent = conn.send(data, rng, dribble)
    outcome = conn.wait_replies(base + len(expect), block_at) if sent else "closed"
    if outcome == "ok" and quit_at is None:
        conn.pump(0.002)             # one reply per command: nothing more may follow
        assert len(conn.stream.replies) == base + len(expect), (
            f"{len(conn.stream.replies) - base - len(expect)} more replies than commands; "
            f"payload {data[:300]!r}; replies {conn.stream.replies[base:][-4:]!r}")
    got = conn.stream.replies[base:]
    stats.replies += len(got)
    for (kind, want), reply in zip(expect, got):
        if kind == "marker":
            assert type(reply) is bytes and reply == want, (
                f"reply out of order: expected marker {want!r}, got {reply!r}")
        else:
            check_reply(want, reply)
            if want[0].lower() == b"addjob" and type(reply) is Status and len(gen.ids) < 500:
                gen.ids.append(bytes(reply))
    if quit_at is not None and len(conn.stream.replies) > quit_at:
        assert conn.stream.replies[quit_at] == b"OK", conn.stream.replies[quit_at]
        assert conn.drain_until_closed(), "no close after QUIT"
        assert len(conn.stream.replies) == quit_at + 1, "replies after QUIT"
        assert not conn.stream.partial, conn.stream.partial
        conn.close()
        return None
    if outcome == "closed" or conn.closed:
        raise AssertionError(
            f"server closed the connection without QUIT or protocol error after "
            f"{len(got)}/{len(expect)} replies; last replies {got[-3:]!r}; "
            f"partial {conn.stream.partial[:200]!r}")
    if outcome == "blocked":
        stats.blocked += 1
        assert not conn.stream.partial, conn.stream.partial
        conn.close(reset=rng.random() < 0.5)
        return None
    assert not conn.stream.partial, conn.stream.partial
    return conn


def run_bytes_session(port, gen, stats):
    """Random bytes on a fresh connection, then a close (FIN/RST) or a half-close."""
    rng = gen.rng
    conn = FuzzConn(port)
    kind = rng.choices(["garbage", "truncated", "huge", "protocol-error", "long-line"],
                       weights=[45, 20, 10, 15, 3])[0]
    stats.sessions[kind] = stats.sessions.get(kind, 0) + 1
    expected_error = None
    prefix_replies = 0
    if kind == "garbage":
        data = gen.garbage()
    elif kind == "truncated":
        full = b"".join(encode(*gen.addjob()) for _ in range(rng.randint(1, 4)))
        data = full[:rng.randrange(1, len(full))]
    elif kind == "huge":
        data = rng.choice([
            b"*1048576\r\n$536870912\r\n" + rng.randbytes(rng.randint(0, 5000)),
            b"*3\r\n$6\r\nADDJOB\r\n$536870912\r\n" + rng.randbytes(rng.randint(0, 70000)),
            b"*1048576\r\n" + encode("PING")[4:] * rng.randint(1, 50),
            b"*2\r\n$4\r\nPING\r\n$100000\r\n" + rng.randbytes(99999),
        ])
    elif kind == "protocol-error":
        # well-formed commands (some answered by workers) and then a protocol error:
        # every earlier reply must arrive, in order, then the error, then the close
        prefix = [gen.addjob() if rng.random() < 0.5 else [b"QLEN", gen.queue()]
                  for _ in range(rng.randint(0, 6))]
        prefix_replies = len(prefix)
        bad, expected_error = rng.choice([
            (b"*1048577\r\n", b"Protocol error: invalid multibulk length"),
            (b"*abc\r\n", b"Protocol error: invalid multibulk length"),
            (b"*2\r\n$4\r\nPING\r\nX\r\n", b"Protocol error: expected '$', got 'X'"),
            (b"*1\r\n$536870913\r\n", b"Protocol error: invalid bulk length"),
            (b"*1\r\n$-1\r\n", b"Protocol error: invalid bulk length"),
            (b"*1\r\n$x\r\n", b"Protocol error: invalid bulk length"),
            (b'PING "unbalanced\r\n', b"Protocol error: unbalanced quotes in request"),
            (b"*" + b"1" * rng.randint(65536, 66000), b"Protocol error: too big mbulk count string"),
            (b"*1\r\n$" + b"1" * rng.randint(65536, 66000), b"Protocol error: too big bulk count string"),
        ])
        data = b"".join(encode(*a) for a in prefix) + bad
    else:
        data = b"PING " + b"x" * rng.randint(65532, 66000)
        expected_error = b"Protocol error: too big inline request"
    stats.bytes += len(data)
    conn.send(data, rng, dribble=rng.random() < 0.1 and len(data) < 5000)

    if expected_error is not None:
        assert conn.drain_until_closed(REPLY_TIMEOUT), (
            f"no close after a protocol error ({kind}, expected {expected_error!r}); input tail "
            f"{data[-120:]!r}; replies {conn.stream.replies[-3:]!r}")
        got = conn.stream.replies
        assert len(got) == prefix_replies + 1, (len(got), prefix_replies, got[-3:])
        assert got[-1] == Err(b"ERR " + expected_error), got[-1]
        assert not conn.stream.partial
        stats.protocol_closes += 1
        stats.replies += len(got)
        conn.close()
        return

    ending = rng.choice(["fin", "rst", "halfclose", "wait-fin"])
    if ending == "wait-fin":
        while conn.pump(0.05):
            pass
    if ending == "halfclose":
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.drain_until_closed(REPLY_TIMEOUT)
    elif not conn.closed:
        # anything already sent must still parse
        conn.pump(0.01)
    got = conn.stream.replies
    stats.replies += len(got)
    if conn.closed and ending != "halfclose":
        # the server hung up on its own: only after a protocol error
        assert got and type(got[-1]) is Err and got[-1].startswith(b"ERR Protocol error"), (
            f"connection closed by the server without a protocol error; input {data[:200]!r}; "
            f"replies {got[-3:]!r}")
        stats.protocol_closes += 1
    elif conn.closed and got and type(got[-1]) is Err and got[-1].startswith(b"ERR Protocol error"):
        stats.protocol_closes += 1
    assert not conn.stream.partial or not conn.closed, (
        f"truncated reply before close: {conn.stream.partial[:200]!r}")
    conn.close(reset=ending == "rst")


def test_fuzz_protocol(start_server, record_property):
    srv = start_server(workers=3)
    start_pids = set(srv.tracked_pids())
    assert len(srv.worker_pids()) == 3
    valid = ValidClient(srv.port)
    gen = Gen(SEED)
    stats = Stats()
    t0 = time.monotonic()
    valid.start()
    conn = None
    rounds = 0
    try:
        while rounds < ROUNDS:
            if time.monotonic() - t0 > WALL_CAP:
                print(f"fuzz: wall-clock cap {WALL_CAP}s reached after {rounds} rounds")
                break
            if gen.rng.random() < 0.7:
                stats.sessions["commands"] = stats.sessions.get("commands", 0) + 1
                conn = run_command_session(srv.port, gen, stats, conn)
            else:
                run_bytes_session(srv.port, gen, stats)
            rounds += 1
            if rounds % 100 == 0:
                assert srv.all_alive(), f"a server process died; log:\n{srv.log_tail()}"
                assert not valid.errors, valid.errors
    except AssertionError as exc:
        raise AssertionError(f"round {rounds + 1}: {exc}\n--- server log tail ---\n{srv.log_tail(30)}") from None
    finally:
        if conn is not None:
            conn.close()
        valid.stop.set()
        valid.join(REPLY_TIMEOUT + 5)
    elapsed = time.monotonic() - t0

    print(f"\nfuzz seed={SEED}: {rounds} rounds in {elapsed:.1f}s; sessions {stats.sessions}; "
          f"{stats.commands} commands, {stats.bytes} bytes thrown, {stats.replies} replies checked, "
          f"{stats.blocked} blocked GETJOBs dropped, {stats.protocol_closes} protocol-error closes, "
          f"{stats.quits} QUITs; valid client: {valid.iterations} iterations, {valid.ops} replies")
    for key, value in (("fuzz_seed", SEED), ("fuzz_rounds", rounds), ("fuzz_commands", stats.commands),
                       ("fuzz_bytes", stats.bytes), ("fuzz_replies", stats.replies),
                       ("valid_client_replies", valid.ops)):
        record_property(key, value)

    assert not valid.is_alive(), "valid client stuck"
    assert not valid.errors, valid.errors
    assert valid.iterations >= 20, valid.iterations

    # every process of the node is the one that started
    assert srv.all_alive(), f"a server process died; log:\n{srv.log_tail()}"
    assert set(srv.worker_pids()) | {srv.pid} == start_pids, (srv.worker_pids(), start_pids)

    # nothing left behind by the dropped connections
    def settled():
        info = srv.info_fields("clients")
        return info["connected_clients"] == "1" and info["blocked_clients"] == "0"
    wait_until(settled, timeout=10, message=f"clients not cleaned up: {srv.info_fields('clients')}")

    # still fully working on every worker
    with srv.raw() as r:
        assert r.call("PING") == b"+PONG\r\n"
        for q in queues_on_distinct_workers("after-fuzz"):
            jid = bytes(r.execute("ADDJOB", q, "ok", 0))
            assert JOB_ID_RE.match(jid)
            assert r.execute("GETJOB", "NOHANG", "FROM", q) == [[q.encode(), jid, b"ok"]]
            assert r.execute("ACKJOB", jid) == 1
        assert b"registered_jobs:" in r.execute("INFO")

    log = srv.log_text()
    bad = [line for line in log.splitlines()
           if "Traceback" in line or "Fatal error" in line or " error " in line]
    assert not bad, "server logged errors:\n" + "\n".join(bad[:20]) + "\n" + srv.log_tail(60)


# ---------------------------------------------------------------------------
# what the fuzzer found, one deterministic test each
# ---------------------------------------------------------------------------


def test_error_replies_stay_on_one_line(server):
    """Errors that echo client input (unknown command, DEBUG subcommand, the protocol
    error's offending byte) must not carry CR/LF: upstream's addReplyErrorFormat turns
    them into spaces, otherwise the reply stream is corrupt (a client can forge replies)."""
    r = server.raw()
    r.send(encode(b"zfoo\r\n+OK") + encode("PING"))
    assert r.read_reply() == b"-ERR unknown command 'zfoo  +OK'\r\n"
    assert r.read_reply() == b"+PONG\r\n"
    r.send(encode("DEBUG", b"no\nsuch") + encode("PING"))
    assert r.read_reply() == (b"-ERR Unknown DEBUG subcommand or wrong number of arguments "
                              b"for 'no such'\r\n")
    assert r.read_reply() == b"+PONG\r\n"
    for bad in (b"\r", b"\n"):
        c = server.raw()
        c.send(b"*1\r\n" + bad + b"\r\n")
        data, closed = c.read_until_closed(5)
        assert data == b"-ERR Protocol error: expected '$', got ' '\r\n" and closed, data


def test_protocol_error_names_the_raw_byte(server):
    """``expected '$', got '<c>'`` carries the byte itself (C ``%c``), not its UTF-8 form."""
    r = server.raw()
    r.send(b"*1\r\n\xff\r\n")
    data, closed = r.read_until_closed(5)
    assert data == b"-ERR Protocol error: expected '$', got '\xff'\r\n" and closed, data


def test_unbalanced_quotes_after_a_pipelined_command(server):
    """The protocol error must not be lost when another command precedes it in the same
    read: the PING is answered, then the error, then the connection closes."""
    r = server.raw()
    r.send(b'*1\r\n$4\r\nPING\r\nPING "unbalanced\r\nPING after\r\n')
    data, closed = r.read_until_closed(2)
    assert data == b"+PONG\r\n-ERR Protocol error: unbalanced quotes in request\r\n", data
    assert closed


def test_qpeek_most_negative_count(server):
    r = server.raw()
    jid = bytes(r.execute("ADDJOB", "fz-peek", "x", 0))
    reply = r.execute("QPEEK", "fz-peek", "-9223372036854775808")
    # |count| does not fit in 64 bits: upstream's negation wraps and it answers *0;
    # "every job from the tail" would be as good. An error is not.
    assert reply in ([], [[b"fz-peek", jid, b"x"]]), reply
    assert r.execute("QPEEK", "fz-peek", "-9223372036854775807") == [[b"fz-peek", jid, b"x"]]


@pytest.mark.parametrize("second", ["one-worker", "cross-worker"])
def test_nohang_getjob_before_a_blocking_one(server, second):
    """A pipelined ``GETJOB NOHANG`` answered while the next GETJOB blocks must not
    "unblock" the client: later commands wait (SPEC 1.2), two blocking GETJOBs in a row
    both get their answer, and a disconnect releases the waiter."""
    if second == "cross-worker" and server.workers == 1:
        pytest.skip("needs queues on two workers")
    a, b, c = queues_on_distinct_workers("fz-nh")
    waitq = [b] if second == "one-worker" else [b, c]

    r = server.raw()
    t0 = time.monotonic()
    r.send(encode("GETJOB", "NOHANG", "FROM", a)
           + encode("GETJOB", "TIMEOUT", 300, "FROM", *waitq)
           + encode("ADDJOB", b, "late", 0))
    assert r.read_reply() == b"*-1\r\n"
    # the ADDJOB behind the blocked GETJOB runs only after the GETJOB timed out
    assert r.read_reply() == b"*-1\r\n"
    assert time.monotonic() - t0 >= 0.25
    assert r.read_reply().startswith(b"+D-")
    assert r.execute("QLEN", b) == 1
    r.execute("DEBUG", "FLUSHALL")

    r.send(encode("GETJOB", "NOHANG", "FROM", a)
           + encode("GETJOB", "TIMEOUT", 300, "FROM", *waitq)
           + encode("GETJOB", "TIMEOUT", 300, "FROM", *waitq)
           + encode("PING"))
    replies = [r.read_reply(timeout=5) for _ in range(4)]
    assert replies == [b"*-1\r\n", b"*-1\r\n", b"*-1\r\n", b"+PONG\r\n"], replies

    c2 = server.raw()
    c2.send(encode("GETJOB", "NOHANG", "FROM", a) + encode("GETJOB", "FROM", *waitq))
    assert c2.read_reply() == b"*-1\r\n"
    wait_until(lambda: server.info_fields("clients")["blocked_clients"] == "1", timeout=5)
    c2.close()
    wait_until(lambda: server.info_fields("clients")["blocked_clients"] == "0", timeout=5,
               message="the blocked GETJOB of a closed connection was never released")
