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
"""

import os
import random
import re
import socket
import threading
import time

import hiredis
import pytest


from support.slots import queues_on_distinct_workers
from support.jobs import JOB_ID_RE
from support.resp_client import (Err, Incomplete, Malformed, NULL_ARRAY, RawConn, Status,
                                 encode_command, parse_resp2)
from support.waits import wait_until
encode = encode_command

SEED = int(os.environ.get("DISQUE_FUZZ_SEED", "7711"))
ROUNDS = int(os.environ.get("DISQUE_FUZZ_ROUNDS", "1200"))
WALL_CAP = float(os.environ.get("DISQUE_FUZZ_WALL_CAP", "40"))
BLOCK_GRACE = 0.25          # a GETJOB with no reply after this long is taken as blocked
REPLY_TIMEOUT = 10.0        # any other missing reply after this long is a failure






# ---------------------------------------------------------------------------
# reply checking: hiredis + a strict RESP2 parser over the same bytes
# ---------------------------------------------------------------------------


def _same(h, typed):
    if type(typed) is Err:
        # hiredis hands error text over as str, decoded with replacement characters
        return (isinstance(h, hiredis.ReplyError)
                and h.args[0] == bytes(typed).decode("utf-8", "replace"))
    if typed is NULL_ARRAY:
        return h is None
    if isinstance(typed, list):
        return isinstance(h, list) and len(h) == len(typed) and all(map(_same, h, typed))
    if type(typed) is Status:
        return h == bytes(typed)
    return type(h) is type(typed) and h == typed


class ReplyStream:
    """Incremental reply parser for one connection."""

    def __init__(self):
        self.reader = hiredis.Reader()
        self.raw = b""
        self.pos = 0
        self.replies = []

    def feed(self, data: bytes):
        self.reader.feed(data)
        self.raw += data
        while True:
            try:
                h = self.reader.gets()
            except hiredis.ProtocolError as exc:
                raise Malformed(f"hiredis: {exc}; bytes: {self.raw[self.pos:self.pos + 200]!r}")
            if h is False:
                break
            try:
                typed, end = parse_resp2(self.raw, self.pos)
            except Incomplete:
                raise Malformed(f"hiredis took a reply the strict parser finds incomplete: "
                                f"{self.raw[self.pos:self.pos + 200]!r}")
            if not _same(h, typed):
                raise Malformed(f"hiredis {h!r} != typed {typed!r}")
            if type(typed) is Err:
                text = bytes(typed)
                if not re.match(rb"[A-Z]+( |$)", text) or b"\n" in text or b"\r" in text:
                    raise Malformed(f"odd error reply {text!r}")
                if b"internal error" in text:
                    raise Malformed(f"server-side exception: {text!r}")
            self.replies.append(typed)
            self.pos = end
        if self.pos > 1 << 20:
            self.raw = self.raw[self.pos:]
            self.pos = 0

    @property
    def partial(self) -> bytes:
        return self.raw[self.pos:]


class FuzzConn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stream = ReplyStream()
        self.closed = False          # EOF / reset seen from the server

    def send(self, data: bytes, rng=None, dribble=False):
        """Send, optionally in random pieces with tiny pauses. False if the peer closed."""
        try:
            if not dribble:
                self.sock.sendall(data)
                return True
            i = 0
            while i < len(data):
                n = rng.choice((1, 1, 2, 3, 7, 64, 1000))
                self.sock.sendall(data[i:i + n])
                i += n
                if rng.random() < 0.2:
                    time.sleep(0.0005)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def pump(self, timeout) -> bool:
        """Read what arrives within ``timeout``; False when nothing did."""
        if self.closed:
            return False
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return True
        self.stream.feed(data)
        return True

    def wait_replies(self, n, block_at=()):
        """Wait for ``n`` replies in total on this connection.

        ``block_at`` holds reply indexes whose command may legitimately block (GETJOB):
        when the next missing reply is one of them, BLOCK_GRACE of silence means
        "blocked". Returns "ok", "blocked" or "closed"."""
        while len(self.stream.replies) < n:
            if self.closed:
                return "closed"
            nxt = len(self.stream.replies)
            grace = BLOCK_GRACE if nxt in block_at else REPLY_TIMEOUT
            got = self.pump(grace)
            if not got:
                if nxt in block_at:
                    return "blocked"
                raise AssertionError(
                    f"no reply #{nxt} within {REPLY_TIMEOUT}s (have {nxt}/{n}); "
                    f"partial bytes {self.stream.partial[:200]!r}")
        return "ok"

    def drain_until_closed(self, timeout=5.0):
        end = time.monotonic() + timeout
        while not self.closed:
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.pump(left)
        return True

    def close(self, reset=False):
        try:
            if reset:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------
# what a reply to a well-formed command may be (SPEC sections 1.3, 2, 3, 4)
# ---------------------------------------------------------------------------

ARITY = {b"ping": -1, b"info": -1, b"time": 1, b"addjob": -4, b"getjob": -2, b"ackjob": -1,
         b"fastack": -1, b"deljob": -1, b"show": 2, b"loadjob": 2, b"qlen": 2, b"qpeek": 3,
         b"qstat": 2, b"qscan": -1, b"jscan": -1, b"enqueue": -1, b"nack": -1, b"dequeue": -1,
         b"working": 2, b"pause": -3, b"auth": 2, b"debug": -2, b"config": -2, b"cluster": -2,
         b"client": -2, b"slowlog": -2, b"latency": -2}
ID_COMMANDS = (b"ackjob", b"fastack", b"deljob", b"enqueue", b"nack", b"dequeue")
ADDJOB_ERRORS = (b"ERR ", b"NOREPL ", b"MAXLEN ", b"PAUSED ", b"OOM ")
NOT_INTEGER = b"ERR value is not an integer or out of range"


def valid_id_shape(jid: bytes) -> bool:
    """SPEC 5: length 40, 'D', '-', and '-' at offsets 10 and 35; nothing else checked."""
    return len(jid) == 40 and jid[:2] == b"D-" and jid[10:11] == b"-" and jid[35:36] == b"-"


def is_job(item, queues, n=3):
    return (isinstance(item, list) and len(item) == n and all(type(x) is bytes for x in item[:3])
            and item[0] in queues and JOB_ID_RE.match(item[1]))


def check_reply(argv, reply):
    """Raise AssertionError when ``reply`` cannot be the answer to ``argv``."""
    name = argv[0].lower()
    what = f"{[a[:40] for a in argv[:8]]!r} -> {reply!r:.300}"
    is_err = type(reply) is Err
    if name not in ARITY and name not in (b"quit", b"hello", b"command", b"shutdown", b"monitor",
                                          b"bgrewriteaof"):
        if name.startswith(b"z"):       # the fuzzer's unknown names all start with 'z'
            # upstream's addReplyErrorFormat turns CR and LF into spaces: an error
            # reply is one line whatever the client sent
            shown = argv[0].replace(b"\r", b" ").replace(b"\n", b" ")
            assert reply == Err(b"ERR unknown command '" + shown + b"'"), what
        return
    arity = ARITY.get(name)
    if arity is not None and ((arity > 0 and len(argv) != arity) or (arity < 0 and len(argv) < -arity)):
        assert reply == Err(b"ERR wrong number of arguments for '%s' command" % name), what
        return
    if is_err and b" is not available in this version" in reply:
        return
    if name == b"ping":
        if len(argv) == 1:
            assert reply == Status(b"PONG") and type(reply) is Status, what
        elif len(argv) == 2:
            assert type(reply) is bytes and reply == argv[1], what
        else:
            assert reply == Err(b"ERR wrong number of arguments for 'ping' command"), what
    elif name == b"time":
        assert isinstance(reply, list) and len(reply) == 2 and all(x.isdigit() for x in reply), what
    elif name == b"qlen":
        assert type(reply) is int and reply >= 0, what
    elif name in (b"show", b"working") or name in ID_COMMANDS:
        ids = argv[1:]
        if not all(valid_id_shape(j) for j in ids):
            assert reply == Err(b"BADID Invalid Job ID format."), what
        elif name == b"show":
            assert reply is None or (isinstance(reply, list) and len(reply) == 30
                                     and reply[1] == argv[1]), what
        elif name == b"working":
            assert (type(reply) is int and reply >= 0) or (
                is_err and (reply.startswith(b"NOJOB ") or reply.startswith(b"TOOLATE "))), what
        else:
            assert type(reply) is int and 0 <= reply <= len(ids), what
    elif name == b"qpeek":
        count = _c_parse_int(argv[2])
        if count is None:
            assert reply == Err(NOT_INTEGER), what
        else:
            assert isinstance(reply, list) and len(reply) <= abs(count), what
            assert all(is_job(j, (argv[1],)) for j in reply), what
    elif name == b"qstat":
        assert reply is NULL_ARRAY or (isinstance(reply, list) and len(reply) == 20
                                       and reply[1] == argv[1]), what
    elif name == b"addjob":
        if type(reply) is Status:
            assert JOB_ID_RE.match(reply), what
        else:
            assert is_err and reply.startswith(ADDJOB_ERRORS), what
    elif name == b"getjob":
        if is_err:
            assert reply.startswith(b"ERR "), what
        elif reply is not NULL_ARRAY:
            lower = [a.lower() for a in argv]
            assert b"from" in lower, what
            queues = argv[lower.index(b"from") + 1:]
            n = 7 if b"withcounters" in lower[:lower.index(b"from")] else 3
            assert isinstance(reply, list) and reply and all(is_job(j, queues, n) for j in reply), what
    elif name in (b"qscan", b"jscan"):
        assert is_err or (isinstance(reply, list) and len(reply) == 2 and type(reply[0]) is bytes
                          and reply[0].isdigit() and isinstance(reply[1], list)), what
    elif name == b"pause":
        assert is_err or (type(reply) is Status and reply in (b"none", b"in", b"out", b"all")), what
    elif name == b"info":
        assert type(reply) is bytes or reply == Err(b"ERR syntax error"), what


def _c_parse_int(s: bytes):
    """SPEC 1.3 integers: strtoll base 10, whole string, leading +/0 fine, "" -> 0."""
    if s == b"":
        return 0
    if not re.fullmatch(rb"[+-]?[0-9]+", s):
        return None
    v = int(s)
    return v if -2 ** 63 <= v < 2 ** 63 else None


# ---------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------

B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
HEX = b"0123456789abcdef"
FUZZ_QUEUES = queues_on_distinct_workers("fz", per_worker=3)
# never sent by the fuzzer (see the module docstring); garbage containing them is redrawn
DANGER = (b"shutdown", b"flushall", b"monitor", b"debug", b"client", b"cluster", b"config",
          b"hello", b"sleep")


class Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.ids = []            # job IDs the fuzzer itself created

    # -- atoms ------------------------------------------------------------------------

    def case(self, word: str) -> bytes:
        r = self.rng.random()
        if r < 0.5:
            return word.upper().encode()
        if r < 0.75:
            return word.lower().encode()
        return "".join(ch.upper() if self.rng.random() < 0.5 else ch.lower() for ch in word).encode()

    def junk(self, maxlen=12) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, maxlen)))
        if r < 0.7:
            return rng.randbytes(rng.randint(0, maxlen))
        if r < 0.85:
            return b""
        return rng.choice([b" ", b"\r\n", b"\n", b"\x00", b'"', b"'", b"\\", b"*1", b"$5", b"-", b"+OK"])

    def integer(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            return str(rng.randint(0, 20)).encode()
        if r < 0.45:
            return str(rng.randint(-5, -1)).encode()
        if r < 0.55:
            return str(rng.randint(21, 100000)).encode()
        if r < 0.75:
            return rng.choice([b"0", b"-0", b"+5", b"007", b"", b" 5", b"5 ", b"1e3", b"0x10", b"1.5",
                               b"abc", b"9223372036854775807", b"-9223372036854775808",
                               b"9223372036854775808", b"-9223372036854775809", b"4294967295",
                               b"4294967296", b"2147483648", b"65535", b"65536", b"536870912",
                               b"99999999999999999999999999", b"-99999999999999999999", b"\x00",
                               b"18446744073709551616", b"1" * 200])
        return str(rng.choice([2 ** 31, 2 ** 32, 2 ** 53, 2 ** 63 - 1, 2 ** 64, -2 ** 63, 10 ** 12,
                               rng.randint(-2 ** 70, 2 ** 70)])).encode()

    def small_timeout(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.7:
            return str(rng.randint(1, 80)).encode()
        return self.integer()

    def queue(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.75:
            return rng.choice(FUZZ_QUEUES).encode()
        if r < 0.9:
            return b"fzr-" + rng.randbytes(rng.randint(0, 20))
        return rng.choice([b"", b"fz-" + b"q" * 5000, b"fz-\x00\xff", b"fz \r\n x"])

    def body(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.8:
            return rng.randbytes(rng.randint(0, 64))
        if r < 0.95:
            return rng.randbytes(rng.randint(65, 4000))
        return rng.randbytes(rng.randint(10000, 120000))

    def job_id(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if self.ids and r < 0.35:
            return rng.choice(self.ids)
        if self.ids and r < 0.45:
            jid = bytearray(rng.choice(self.ids))
            jid[rng.randrange(len(jid))] = rng.randrange(256)
            return bytes(jid)
        node = bytes(rng.choice(HEX) for _ in range(8))
        mid = bytes(rng.choice(B64) for _ in range(24))
        ttl = bytes(rng.choice(HEX) for _ in range(4))
        if r < 0.75:
            return b"D-" + node + b"-" + mid + b"-" + ttl
        mutations = [
            lambda: b"D-" + node + b"-" + rng.randbytes(24) + b"-" + ttl,      # any bytes inside
            lambda: b"D-" + node + b"-" + mid + b"-" + rng.choice([b"zzzz", b"05A1", b"\xff\xff\xff\xff"]),
            lambda: b"D-" + node + b"-" + mid + b"-" + ttl + b"x",             # 41 chars
            lambda: b"D-" + node + b"-" + mid[:-1] + b"-" + ttl,               # 39 chars
            lambda: b"d-" + node + b"-" + mid + b"-" + ttl,
            lambda: b"D_" + node + b"-" + mid + b"-" + ttl,
            lambda: b"D-" + node + b"+" + mid + b"-" + ttl,
            lambda: b"D-" + node + b"-" + mid + b"+" + ttl,
            lambda: rng.randbytes(40),
            lambda: self.junk(45),
        ]
        return rng.choice(mutations)()

    def ids_list(self, lo=0, hi=6):
        return [self.job_id() for _ in range(self.rng.randint(lo, hi))]

    # -- commands -----------------------------------------------------------------------

    def addjob(self):
        rng = self.rng
        argv = [self.case("addjob"), self.queue(), self.body(),
                self.small_timeout() if rng.random() < 0.2 else b"0"]
        opts = ["replicate", "delay", "retry", "ttl", "maxlen", "async"]
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 5))):
            if rng.random() < 0.1:
                argv.append(self.junk())
                continue
            o = rng.choice(opts)
            argv.append(self.case(o))
            if o != "async" and rng.random() < 0.93:
                if o == "replicate" and rng.random() < 0.5:
                    argv.append(b"1")
                else:
                    argv.append(self.integer())
        return argv

    def getjob(self):
        """-> (argv, may_block)"""
        rng = self.rng
        argv = [self.case("getjob")]
        nohang = rng.random() < 0.6
        opts = []
        if nohang:
            opts.append([self.case("nohang")])
        if rng.random() < 0.5 or not nohang:
            opts.append([self.case("timeout"), self.small_timeout()])
        if rng.random() < 0.5:
            opts.append([self.case("count"), self.integer() if rng.random() < 0.4 else str(rng.randint(1, 5)).encode()])
        if rng.random() < 0.3:
            opts.append([self.case("withcounters")])
        if rng.random() < 0.1:
            opts.append([self.junk()])
        rng.shuffle(opts)
        for o in opts:
            argv += o
        if rng.random() < 0.95:
            argv.append(self.case("from"))
            argv += [self.queue() for _ in range(rng.choice((0, 1, 1, 1, 2, 3, 5)))]
        return argv, not nohang

    def scan(self, name):
        rng = self.rng
        argv = [self.case(name)]
        words = (["count", "busyloop", "minlen", "maxlen", "importrate"] if name == "qscan"
                 else ["count", "busyloop", "queue", "state", "reply"])
        if rng.random() < 0.6:
            argv.append(self.integer() if rng.random() < 0.5 else b"0")
        for _ in range(rng.randint(0, 4)):
            w = rng.choice(words)
            argv.append(self.case(w))
            if w == "busyloop" or rng.random() < 0.07:
                continue
            if w == "queue":
                argv.append(self.queue())
            elif w == "state":
                argv.append(rng.choice([self.case(s) for s in ("queued", "active", "acked", "wait-repl")]
                                       + [self.junk()]))
            elif w == "reply":
                argv.append(rng.choice([self.case("all"), self.case("id"), self.junk()]))
            else:
                argv.append(self.integer())
        return argv

    def command(self):
        """-> (argv, may_block, is_quit)"""
        rng = self.rng
        kind = rng.choices(
            ["addjob", "getjob", "ids", "show", "working", "qlen", "qpeek", "qstat", "qscan",
             "jscan", "pause", "ping", "info", "time", "command", "misc", "unknown", "arity",
             "quit"],
            weights=[16, 12, 12, 5, 3, 4, 4, 3, 2, 2, 3, 4, 2, 1, 2, 3, 4, 4, 0.3])[0]
        if kind == "addjob":
            return self.addjob(), False, False
        if kind == "getjob":
            argv, may_block = self.getjob()
            return argv, may_block, False
        if kind == "ids":
            name = rng.choice(["ackjob", "fastack", "deljob", "enqueue", "nack", "dequeue"])
            return [self.case(name)] + self.ids_list(), False, False
        if kind == "show":
            return [self.case("show"), self.job_id()], False, False
        if kind == "working":
            return [self.case("working"), self.job_id()], False, False
        if kind == "qlen":
            return [self.case("qlen"), self.queue()], False, False
        if kind == "qpeek":
            return [self.case("qpeek"), self.queue(), self.integer()], False, False
        if kind == "qstat":
            return [self.case("qstat"), self.queue()], False, False
        if kind in ("qscan", "jscan"):
            return self.scan(kind), False, False
        if kind == "pause":
            opts = [rng.choice([self.case(o) for o in ("in", "out", "all", "none", "state", "bcast")]
                               + [self.junk()]) for _ in range(rng.randint(0, 4))]
            return [self.case("pause"), self.queue()] + opts, False, False
        if kind == "ping":
            return [self.case("ping")] + [self.body() for _ in range(rng.choice((0, 1, 1, 2)))], False, False
        if kind == "info":
            args = rng.choice([[], [b"all"], [b"default"], [b"workers"], [b"jobs"], [b"SERVER"],
                               [self.junk()], [b"a", b"b"], [b"commandstats"]])
            return [self.case("info")] + args, False, False
        if kind == "time":
            return [self.case("time")] + ([self.junk()] if rng.random() < 0.3 else []), False, False
        if kind == "command":
            args = rng.choice([[], [b"count"], [b"info", b"addjob", b"nosuch", b"GETJOB"],
                               [b"info"], [self.junk()], [b"count", b"x"]])
            return [self.case("command")] + args, False, False
        if kind == "misc":
            argv = rng.choice([
                [self.case("hello")],
                [self.case("hello"), rng.choice([b"2", b"4", b"-1", b"abc", b"99999999999999999999", b""])],
                [self.case("auth"), self.junk()],
                [self.case("auth")],
                [self.case("loadjob"), self.body()],
                [self.case("config"), self.case("get"), rng.choice([b"*", b"port", b"max*", self.junk()])],
                [self.case("config"), self.case("resetstat")],
                [self.case("config"), self.junk()],
                [self.case("config"), self.case("get")],
                [self.case("config"), self.case("set"), b"fuzz-" + self.junk(), self.junk()],
                [self.case("debug"), self.case("error"), b"FUZZ " + self.junk(30)],
                [self.case("debug"), self.case("sleep"), b"0"],
                [self.case("debug"), rng.choice([b"nosuch", b"structsize", b"", b"error"])],
                [self.case("cluster"), rng.choice([self.case("info"), self.case("myid"), self.case("nodes"),
                                                   b"nosuch", b""])],
                [self.case("cluster"), self.case("forget"), self.junk(45)],
                [self.case("client"), rng.choice([self.case("list"), self.case("getname"), b"nosuch", b""])],
                [self.case("client"), self.case("setname"), self.junk()],
                [self.case("slowlog"), rng.choice([self.case("get"), self.case("len"), self.case("reset"), b"x"])],
                [self.case("latency"), rng.choice([self.case("latest"), self.case("doctor"), self.case("reset"),
                                                   b"x"])],
                [self.case("bgrewriteaof"), b"extra"],
            ])
            return argv, False, False
        if kind == "unknown":
            name = b"z" + bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(0, 11)))
            if rng.random() < 0.25:      # binary names: the error reply echoes them
                name = b"z" + self.junk(10) + rng.choice([b"\r\n", b"\n", b"\r", b"'", b"\x00"]) + self.junk(5)
            return [name] + [self.junk() for _ in range(rng.randint(0, 3))], False, False
        if kind == "arity":
            name = rng.choice(["show", "qlen", "qpeek", "qstat", "working", "addjob", "getjob", "time",
                               "hello", "pause", "ping", "auth", "loadjob"])
            return [self.case(name)] + [self.junk() for _ in range(rng.choice((0, 1, 4, 7)))], False, False
        return [self.case("quit")] + [self.junk() for _ in range(rng.randint(0, 2))], False, True

    # -- wire forms ----------------------------------------------------------------------

    def inline_form(self, argv):
        """A line the inline parser splits back into ``argv`` minus empty arguments; None
        when that would leave nothing (such a line gets no reply)."""
        if not argv[0]:
            return None
        parts = []
        for a in argv:
            if re.fullmatch(rb"[A-Za-z0-9_.:+/=-]+", a):
                parts.append(a)
            else:
                out = bytearray(b'"')
                for ch in a:
                    c = bytes([ch])
                    if c in b'"\\':
                        out += b"\\" + c
                    elif c == b"\n":
                        out += b"\\n"
                    elif c == b"\r":
                        out += b"\\r"
                    elif c == b"\t":
                        out += b"\\t"
                    elif 32 <= ch < 127:
                        out += c
                    else:
                        out += b"\\x%02x" % ch
                out += b'"'
                parts.append(bytes(out))
        line = b" ".join(parts)
        if len(line) > 60000:
            return None
        return line + self.rng.choice([b"\r\n", b"\n"])

    def garbage(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            data = rng.randbytes(rng.randint(1, 3000))
        elif r < 0.55:
            vocab = [b"ADDJOB", b"GETJOB", b"FROM", b"NOHANG", b"ackjob", b"QLEN", b"PING", b"show",
                     b"fz-0", b"0", b"-1", b"\"", b"'", b"\\x4", b"\\", b"*3", b"$4", b"\r\n", b"\n",
                     b" ", b"\t", b"TIMEOUT", b"COUNT", b"99999999999999999999", b"D-"]
            data = b" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 300)))
        elif r < 0.75:
            # a valid pipeline with random byte mutations
            data = bytearray(b"".join(encode(*self.addjob()) if rng.random() < 0.5
                                      else encode(self.case("qlen"), self.queue())
                                      for _ in range(rng.randint(1, 6))))
            for _ in range(rng.randint(1, 8)):
                op = rng.random()
                i = rng.randrange(len(data) + 1)
                if op < 0.4 and i < len(data):
                    data[i] = rng.randrange(256)
                elif op < 0.7:
                    data[i:i] = rng.randbytes(rng.randint(1, 4))
                elif i < len(data):
                    del data[i:i + rng.randint(1, 6)]
            data = bytes(data)
        else:
            data = rng.choice([b"*", b"$", b"*1\r\n", b"*2\r\n$", b"*1\r\n$-1\r\n", b"*1\r\n$0\r\n\r\n",
                               b"*3\r\n$1\r\nx\r\n:5\r\n", b"*1\r\n$3\r\nabc", b"*-7\r\n", b"*0\r\n",
                               b"*1\r\n$4\r\nPING\n", b"*1\r\r\n", b"\r\n\r\n\r\n", b"$5\r\nhello\r\n",
                               b"+PING\r\n", b"-ERR\r\n", b":1\r\n", b"*+1\r\n", b"*1\r\n$+4\r\nPING\r\n",
                               b"*01\r\n$04\r\nPING\r\n", b"*1\r\n$ 4\r\nPING\r\n",
                               b"*1\r\n$4\r\nPINGXX\r\n"]) + rng.randbytes(rng.randint(0, 20))
        low = data.lower()
        if any(w in low for w in DANGER) or b"quit" in low:
            return self.garbage()
        return data


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
