"""`RawConn`: a raw socket speaking RESP that returns exact reply bytes or a type-preserving
parse (status vs bulk vs error vs null bulk vs null array), for byte-exact protocol tests."""
from __future__ import annotations

import re
import socket
import time



class Status(bytes):
    """A RESP simple string (``+...``)."""

    def __repr__(self):
        return f"Status({bytes(self)!r})"


class Err(bytes):
    """A RESP error (``-...``), returned, not raised."""

    def __repr__(self):
        return f"Err({bytes(self)!r})"


class _NullArray:
    def __repr__(self):
        return "NULL_ARRAY"

    def __bool__(self):
        return False


NULL_ARRAY = _NullArray()  # ``*-1``; a null bulk (``$-1``) parses as None


class Incomplete(Exception):
    pass


class ProtocolViolation(Exception):
    pass


def parse_resp(buf: bytes, pos: int = 0):
    """Parse one RESP2 (or RESP3) reply at ``buf[pos:]``; return (value, new_pos).

    Raises Incomplete if more bytes are needed."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        raise Incomplete
    kind = buf[pos:pos + 1]
    line = buf[pos + 1:nl]
    pos = nl + 2
    if kind == b"+":
        return Status(line), pos
    if kind == b"-":
        return Err(line), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise Incomplete
        if buf[pos + n:pos + n + 2] != b"\r\n":
            raise ProtocolViolation(f"bulk not terminated by CRLF: {buf[pos:pos + n + 2]!r}")
        return bytes(buf[pos:pos + n]), pos + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return NULL_ARRAY, pos
        items = []
        for _ in range(n):
            item, pos = parse_resp(buf, pos)
            items.append(item)
        return items, pos
    # RESP3 (after HELLO 3): null, map, set, boolean, double
    if kind == b"_":
        return None, pos
    if kind == b"%":
        out = {}
        for _ in range(int(line)):
            key, pos = parse_resp(buf, pos)
            out[key], pos = parse_resp(buf, pos)
        return out, pos
    if kind == b"~":
        items = []
        for _ in range(int(line)):
            item, pos = parse_resp(buf, pos)
            items.append(item)
        return items, pos
    if kind == b"#":
        return line == b"t", pos
    if kind == b",":
        return float(line), pos
    raise ProtocolViolation(f"unexpected reply type byte {kind!r} in {bytes(buf[pos - 1:pos + 40])!r}")


class Malformed(AssertionError):
    """Bytes no RESP2 reply may hold (parse_resp2)."""


def parse_resp2(buf: bytes, pos: int = 0):
    """One strict RESP2 reply at ``buf[pos:]`` -> (value, end), typed like parse_resp
    (Status / Err / int / bytes / None / NULL_ARRAY / list). Anything a RESP2 connection
    must never carry (other type bytes, bad integers, a bulk without its CRLF) raises
    Malformed; a reply still arriving raises Incomplete."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        raise Incomplete
    kind, line, pos = buf[pos:pos + 1], buf[pos + 1:nl], nl + 2
    if kind == b"+":
        return Status(line), pos
    if kind == b"-":
        return Err(line), pos
    if kind in (b":", b"$", b"*"):
        if not re.fullmatch(rb"-?[0-9]+", line):
            raise Malformed(f"bad number in {kind + line!r}")
        n = int(line)
        if kind == b":":
            return n, pos
        if kind == b"$":
            if n < 0:
                if n != -1:
                    raise Malformed(f"bulk length {n}")
                return None, pos
            if len(buf) < pos + n + 2:
                raise Incomplete
            if buf[pos + n:pos + n + 2] != b"\r\n":
                raise Malformed(f"bulk not followed by CRLF: {buf[pos:pos + n + 2][:200]!r}")
            return bytes(buf[pos:pos + n]), pos + n + 2
        if n < 0:
            if n != -1:
                raise Malformed(f"array length {n}")
            return NULL_ARRAY, pos
        items = []
        for _ in range(n):
            item, pos = parse_resp2(buf, pos)
            items.append(item)
        return items, pos
    raise Malformed(f"type byte {kind!r} is not RESP2: {bytes(buf[pos - len(line) - 3:pos + 40])!r}")


def encode_command(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawConn:
    """Raw TCP connection: exact bytes in, exact reply bytes out."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""

    # -- low level ------------------------------------------------------
    def send(self, data: bytes):
        self.sock.sendall(data)

    def _recv_some(self, timeout):
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return None
        except ConnectionResetError:
            return b""
        return chunk

    def read_reply(self, timeout=None) -> bytes:
        """Read exactly one complete RESP reply and return its raw bytes."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if self.buf:
                try:
                    _, end = parse_resp(self.buf, 0)
                except Incomplete:
                    pass
                else:
                    raw, self.buf = self.buf[:end], self.buf[end:]
                    return raw
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete reply within {timeout}s; buffered={self.buf[:200]!r}")
            chunk = self._recv_some(left)
            if chunk is None:
                continue
            if chunk == b"":
                raise ConnectionError(f"connection closed; buffered={self.buf[:200]!r}")
            self.buf += chunk

    def read_parsed(self, timeout=None):
        return parse_resp(self.read_reply(timeout), 0)[0]

    def read_exact(self, n: int, timeout=None) -> bytes:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"wanted {n} bytes, have {self.buf!r}")
            chunk = self._recv_some(left)
            if chunk is None:
                continue
            if chunk == b"":
                raise ConnectionError(f"closed after {self.buf!r}")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until_closed(self, timeout=5.0):
        """Return (all bytes received until EOF, closed?)."""
        deadline = time.monotonic() + timeout
        data = self.buf
        self.buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, False
            chunk = self._recv_some(left)
            if chunk is None:
                continue
            if chunk == b"":
                return data, True
            data += chunk

    def has_data(self, timeout=0.0) -> bool:
        """True if a reply byte (or EOF) is available within ``timeout``."""
        if self.buf:
            return True
        chunk = self._recv_some(timeout) if timeout > 0 else self._peek_nonblocking()
        if chunk is None:
            return False
        if chunk == b"":
            return True
        self.buf += chunk
        return True

    def _peek_nonblocking(self):
        self.sock.setblocking(False)
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return None
        except ConnectionResetError:
            return b""
        finally:
            self.sock.setblocking(True)
        return chunk

    # -- command helpers -------------------------------------------------
    def call(self, *args, timeout=None) -> bytes:
        """Send one multibulk command, return the exact raw reply bytes."""
        self.send(encode_command(*args))
        return self.read_reply(timeout)

    def execute(self, *args, timeout=None):
        """Send one multibulk command, return the type-preserving parsed reply."""
        return parse_resp(self.call(*args, timeout=timeout), 0)[0]

    def inline(self, line: bytes, timeout=None) -> bytes:
        self.send(line)
        return self.read_reply(timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def abort(self):
        """Close with RST (SO_LINGER 0) to simulate an abrupt client death."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
