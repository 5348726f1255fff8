"""The protocol fuzzer's reply checks (tests/test_fuzz_protocol.py): every reply read with
hiredis and a strict RESP2 parser over the same bytes, and what a reply to a well-formed
command may be (SPEC sections 1.3, 2, 3, 4)."""

import re
import socket
import time

import hiredis

from support.jobs import JOB_ID_RE
from support.resp_client import Err, Incomplete, Malformed, NULL_ARRAY, Status, parse_resp2

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
