# cython: language_level=3
"""RESP request parsing and reply encoding (SPEC 1.1-1.2).

The parser keeps Redis' limits and error strings exactly; it is incremental, so a huge
bulk argument arriving in many reads is scanned once.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.string cimport memchr, memcpy, memmove

DEF INLINE_MAX = 64 * 1024
DEF MBULK_MAX = 1024 * 1024
DEF BULK_MAX = 512 * 1024 * 1024
DEF QUERYBUF_MAX = 1024 * 1024 * 1024
# a bulk argument this big that is still arriving is read straight into the bytes object
# that becomes the argument (Redis' PROTO_MBULK_BIG_ARG): one copy of it, not two
DEF BIG_ARG = 32 * 1024
# the input buffer keeps its allocation from read to read (resizing it at each one was a
# malloc search of a fragmented heap per 64 KB read); once all parsed after a read shorter
# than this, the client waits for replies and the buffer goes (an idle connection holds none)
DEF KEEP_AFTER_READ = 16 * 1024

PROTO_INLINE_TOO_BIG = "Protocol error: too big inline request"
PROTO_UNBALANCED = "Protocol error: unbalanced quotes in request"
PROTO_MBULK_TOO_BIG = "Protocol error: too big mbulk count string"
PROTO_MBULK_INVALID = "Protocol error: invalid multibulk length"
PROTO_BULK_TOO_BIG = "Protocol error: too big bulk count string"
PROTO_BULK_INVALID = "Protocol error: invalid bulk length"


class ProtocolError(Exception):
    """Raised by RequestParser.commands(); the connection must be answered and closed."""


class QueryBufferOverflow(Exception):
    """The client's unprocessed input passed 1 GiB: close without a reply."""


cdef inline int hexval(unsigned char c) noexcept:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline bint is_space(unsigned char c) noexcept:
    return c == b' ' or c == b'\n' or c == b'\r' or c == b'\t' or c == b'\v' or c == b'\f'


cdef inline bint closes_argument(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """A closing quote at p[i] must be followed by a space or the end of the line."""
    return i + 1 >= n or is_space(p[i + 1])


cpdef list split_args(bytes line):
    """sdssplitargs(): shell-like splitting; None on unbalanced quotes."""
    cdef const unsigned char *p = line
    cdef Py_ssize_t n = len(line), i = 0
    cdef list out = []
    cdef bytearray cur
    cdef bint inq, insq
    cdef unsigned char c
    while True:
        while i < n and is_space(p[i]):
            i += 1
        if i >= n:
            return out
        cur = bytearray()
        inq = False
        insq = False
        while True:
            if inq:
                if i >= n:
                    return None
                c = p[i]
                if c == b'\\' and i + 3 < n and p[i + 1] == b'x' and hexval(p[i + 2]) >= 0 and hexval(p[i + 3]) >= 0:
                    cur.append(hexval(p[i + 2]) * 16 + hexval(p[i + 3]))
                    i += 3
                elif c == b'\\' and i + 1 < n:
                    i += 1
                    c = p[i]
                    if c == b'n':
                        c = b'\n'
                    elif c == b'r':
                        c = b'\r'
                    elif c == b't':
                        c = b'\t'
                    elif c == b'b':
                        c = b'\b'
                    elif c == b'a':
                        c = b'\a'
                    cur.append(c)
                elif c == b'"':
                    if not closes_argument(p, i, n):
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif insq:
                if i >= n:
                    return None
                c = p[i]
                if c == b'\\' and i + 1 < n and p[i + 1] == b"'":
                    i += 1
                    cur.append(b"'")
                elif c == b"'":
                    if not closes_argument(p, i, n):
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = p[i]
                if is_space(c):
                    break
                elif c == b'"':
                    inq = True
                elif c == b"'":
                    insq = True
                else:
                    cur.append(c)
            i += 1
        out.append(bytes(cur))


cdef inline long long parse_len(const char *p, Py_ssize_t n, bint *ok) noexcept:
    """string2ll-like strict parse of a length line (optional '-', digits)."""
    cdef long long v = 0
    cdef Py_ssize_t i = 0
    cdef bint neg = False
    ok[0] = False
    if n == 0:
        return 0
    if p[0] == b'-':
        neg = True
        i = 1
        if n == 1:
            return 0
    while i < n:
        if p[i] < b'0' or p[i] > b'9':
            return 0
        if v > 100000000000000000:
            return 0
        v = v * 10 + (p[i] - 48)
        i += 1
    ok[0] = True
    return -v if neg else v


cdef class RequestParser:
    """Incremental parser of client requests (multibulk and inline)."""

    def __cinit__(self):
        self.data = NULL
        self.size = self.cap = self.pos = self.last_read = 0
        self.mb_left = 0
        self.bulk_len = -1
        self.args = None
        self.big = None
        self.big_got = 0

    def __dealloc__(self):
        PyMem_Free(self.data)

    cdef void drop_buffer(self) noexcept:
        PyMem_Free(self.data)
        self.data = NULL
        self.size = self.cap = self.pos = 0

    def feed(self, data):
        cdef bytes b = data if type(data) is bytes else bytes(data)
        self.feed_raw(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))

    cdef int feed_raw(self, const char *data, Py_ssize_t n) except -1:
        """Append received bytes (feed(), or a worker's C read buffer:
        disque/_fast/servedcore.pyx), dropping what was already parsed; the first bytes go
        to a big argument being read, if one is (start_big)."""
        cdef Py_ssize_t take
        if self.big is not None:
            take = self.big_room()
            if take > n:
                take = n
            memcpy(PyBytes_AS_STRING(self.big) + self.big_got, data, take)
            self.big_got += take
            data += take
            n -= take
            if n == 0:
                return 0
        cdef char *grown
        cdef Py_ssize_t cap
        if self.pos:
            self.size -= self.pos
            memmove(self.data, self.data + self.pos, self.size)
            self.pos = 0
        if self.size + n > QUERYBUF_MAX:
            raise QueryBufferOverflow()
        if self.size + n > self.cap:
            cap = min(max(self.size + n, 2 * self.cap), QUERYBUF_MAX)
            grown = <char *>PyMem_Realloc(self.data, cap)
            if grown == NULL:
                raise MemoryError()
            self.data, self.cap = grown, cap
        memcpy(self.data + self.size, data, n)
        self.size += n
        self.last_read = n
        return 0

    cdef Py_ssize_t big_room(self) noexcept:
        """What a big argument being read still lacks (0 when none is): the caller may
        read that much straight into big_end()."""
        if self.big is None:
            return 0
        return self.bulk_len - self.big_got

    cdef char *big_end(self) noexcept:
        return PyBytes_AS_STRING(self.big) + self.big_got

    @property
    def pending(self):
        """Bytes received but not yet consumed (client_biggest_input_buf)."""
        return self.size - self.pos + self.big_got

    def take_unparsed(self):
        """The input not yet returned as commands, as the bytes a client would send (a
        multibulk parsed in part is re-encoded), and an empty parser: the connection is
        moving to another process (disque/contracts/connection_handover.py)."""
        parts = []
        if self.args is not None:
            parts.append(b"*%d\r\n" % (len(self.args) + self.mb_left))
            for a in self.args:
                parts.append(b"$%d\r\n%b\r\n" % (len(a), a))
            if self.bulk_len >= 0:
                parts.append(b"$%d\r\n" % self.bulk_len)
            if self.big is not None:
                parts.append(self.big[:self.big_got])
        parts.append(PyBytes_FromStringAndSize(self.data + self.pos, self.size - self.pos))
        self.drop_buffer()
        self.mb_left = 0
        self.bulk_len = -1
        self.args = None
        self.big = None
        self.big_got = 0
        return b"".join(parts)

    cpdef list commands(self):
        """Return every complete command in the buffer as a list of argument lists.

        Raises ProtocolError (after which nothing more can be parsed) with the exact
        upstream message; commands completed before the error are returned first by
        a previous call, so callers loop: a returned list may be followed by an error.
        """
        cdef list out = []
        cdef list cmd
        while True:
            try:
                cmd = self.next_command()
            except ProtocolError:
                if out:
                    # answer what came before the error first; the error repeats next call
                    return out
                raise
            if cmd is None:
                return out
            if len(cmd):
                out.append(cmd)

    cdef list next_command(self):
        cdef char *base = self.data
        cdef Py_ssize_t size = self.size
        if self.pos >= size:
            if self.data != NULL and self.last_read < KEEP_AFTER_READ:
                self.drop_buffer()
            return None
        if self.args is None:
            if base[self.pos] == b'*':
                return self.parse_multibulk_header(base, size)
            return self.parse_inline(base, size)
        return self.parse_bulks(base, size)

    cdef list parse_inline(self, char *base, Py_ssize_t size):
        cdef char *start = base + self.pos
        cdef char *nl = <char*>memchr(start, b'\n', size - self.pos)
        if nl == NULL:
            if size - self.pos > INLINE_MAX:
                raise ProtocolError(PROTO_INLINE_TOO_BIG)
            return None
        cdef Py_ssize_t linelen = nl - start
        cdef Py_ssize_t end = linelen
        if end > 0 and start[end - 1] == b'\r':
            end -= 1
        cdef bytes line = PyBytes_FromStringAndSize(start, end)
        argv = split_args(line)
        if argv is None:
            # the line stays unconsumed: the error repeats on the next call, after the
            # commands parsed before it were answered (commands())
            raise ProtocolError(PROTO_UNBALANCED)
        self.pos += linelen + 1
        return [a for a in argv if len(a)]

    cdef list parse_multibulk_header(self, char *base, Py_ssize_t size):
        cdef char *start = base + self.pos
        cdef char *cr = <char*>memchr(start, b'\r', size - self.pos)
        if cr == NULL or cr + 1 >= base + size:
            if size - self.pos > INLINE_MAX:
                raise ProtocolError(PROTO_MBULK_TOO_BIG)
            return None
        cdef bint ok
        cdef long long n = parse_len(start + 1, cr - start - 1, &ok)
        if not ok or n > MBULK_MAX:
            raise ProtocolError(PROTO_MBULK_INVALID)
        self.pos = (cr - base) + 2
        if n <= 0:
            return []           # *0 / *-1: consumed silently
        self.mb_left = n
        self.bulk_len = -1
        self.args = []
        return self.parse_bulks(base, size)

    cdef list parse_bulks(self, char *base, Py_ssize_t size):
        cdef char *start
        cdef char *cr
        cdef bint ok
        cdef long long n
        cdef list done
        while self.mb_left > 0:
            if self.bulk_len < 0:
                if self.pos >= size:
                    return None
                start = base + self.pos
                cr = <char*>memchr(start, b'\r', size - self.pos)
                if cr == NULL or cr + 1 >= base + size:
                    if size - self.pos > INLINE_MAX:
                        raise ProtocolError(PROTO_BULK_TOO_BIG)
                    return None
                if start[0] != b'$':
                    raise ProtocolError("Protocol error: expected '$', got '%s'" % chr(<unsigned char>start[0]))
                n = parse_len(start + 1, cr - start - 1, &ok)
                if not ok or n < 0 or n > BULK_MAX:
                    raise ProtocolError(PROTO_BULK_INVALID)
                self.pos = (cr - base) + 2
                self.bulk_len = n
                if n >= BIG_ARG and size - self.pos < n + 2:
                    self.start_big(base, size)
            if self.big is not None:
                # the argument is complete once its bytes are in and its CRLF follows
                if self.big_got < self.bulk_len or size - self.pos < 2:
                    return None
                self.args.append(self.big)
                self.big = None
                self.big_got = 0
                self.pos += 2
            else:
                if size - self.pos < self.bulk_len + 2:
                    return None
                self.args.append(PyBytes_FromStringAndSize(base + self.pos, self.bulk_len))
                self.pos += self.bulk_len + 2
            self.bulk_len = -1
            self.mb_left -= 1
        done = self.args
        self.args = None
        return done

    cdef int start_big(self, char *base, Py_ssize_t size) except -1:
        """The bulk whose header was just read is big and not all in: its object now, with
        what the buffer holds of it; the rest is copied (feed_raw) or read (big_end) in."""
        cdef Py_ssize_t have = size - self.pos
        if have > self.bulk_len:
            have = self.bulk_len        # all of it in but its CRLF: that stays in the buffer
        try:
            self.big = PyBytes_FromStringAndSize(NULL, self.bulk_len)
        except MemoryError:
            return 0                    # a header alone gets no memory: the buffer's way
        memcpy(PyBytes_AS_STRING(self.big), base + self.pos, have)
        self.big_got = have
        self.pos += have
        return 0


# ---- reply encoding -------------------------------------------------------------------

from disque.replies import OK    # the fixed replies live in disque/replies.py
NULL_BULK = b"$-1\r\n"
NULL_ARRAY = b"*-1\r\n"
EMPTY_ARRAY = b"*0\r\n"


cpdef bytes bulk(bytes s):
    return b"$%d\r\n%b\r\n" % (len(s), s)


cpdef bytes integer(long long n):
    return b":%d\r\n" % n


cpdef bytes status(bytes s):
    """+s CRLF in one allocation (ADDJOB's reply)."""
    cdef Py_ssize_t n = len(s)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + 3)
    cdef char *p = PyBytes_AS_STRING(out)
    p[0] = b'+'
    memcpy(p + 1, PyBytes_AS_STRING(s), n)
    p[n + 1] = 13
    p[n + 2] = 10
    return out


# Writing replies in place, for replies sized first and written into one bytes object
# (GETJOB's, disque/_fast/shardcore.pyx encode_jobs)

cdef Py_ssize_t int_size(long long v) noexcept:
    """Characters of v in decimal."""
    cdef Py_ssize_t n = 1
    if v < 0:
        n += 1
        v = -v
    while v >= 10:
        v //= 10
        n += 1
    return n


cdef Py_ssize_t bulk_size(Py_ssize_t n) noexcept:
    """Bytes of a bulk string of n bytes: $n CRLF payload CRLF."""
    return 3 + int_size(n) + n + 2


cdef char *put_int(char *p, char kind, long long v) noexcept:
    """`kind` v CRLF (a RESP length or integer line); returns the end."""
    cdef char digits[24]
    cdef int k = 0
    p[0] = kind
    p += 1
    if v < 0:
        p[0] = b'-'
        p += 1
        v = -v
    while True:
        digits[k] = <char>(48 + v % 10)
        k += 1
        v //= 10
        if v == 0:
            break
    while k > 0:
        k -= 1
        p[0] = digits[k]
        p += 1
    p[0] = 13
    p[1] = 10
    return p + 2


cdef char *put_bulk(char *p, bytes b) noexcept:
    """A bulk string; returns the end."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    p = put_int(p, b'$', n)
    memcpy(p, PyBytes_AS_STRING(b), n)
    p[n] = 13
    p[n + 1] = 10
    return p + n + 2


cpdef bytes error(str s):
    return b"-" + s.encode() + b"\r\n"


cpdef bytes array_header(Py_ssize_t n):
    return b"*%d\r\n" % n


cpdef bytes bulk_array(list items):
    """Array of bulk strings; None items become null bulks."""
    cdef list parts = [b"*%d\r\n" % len(items)]
    for s in items:
        if s is None:
            parts.append(b"$-1\r\n")
        else:
            parts.append(b"$%d\r\n%b\r\n" % (len(<bytes>s), <bytes>s))
    return b"".join(parts)


cpdef bytes encode(object value):
    """Generic encoder for tests and rare replies: bytes->bulk, int->integer,
    None->null bulk, list/tuple->array."""
    if value is None:
        return NULL_BULK
    if isinstance(value, bytes):
        return bulk(value)
    if isinstance(value, str):
        return bulk((<str>value).encode())
    if isinstance(value, bool):
        return integer(1 if value else 0)
    if isinstance(value, int):
        return integer(value)
    if isinstance(value, (list, tuple)):
        return b"*%d\r\n" % len(value) + b"".join([encode(v) for v in value])
    raise TypeError("cannot encode %r" % type(value))


cpdef object parse_int(bytes s):
    """C strtoll base 10 with the whole string consumed (SPEC 1.3): a leading '+'/'-' and
    leading zeros are fine, whitespace is not, the empty string is 0. None when invalid
    or outside a signed 64-bit integer."""
    cdef const unsigned char *p = s
    cdef Py_ssize_t n = len(s), i = 0
    cdef bint neg = False
    cdef unsigned long long v = 0, limit
    if n == 0:
        return 0
    if p[0] == b'+' or p[0] == b'-':
        neg = p[0] == b'-'
        i = 1
        if n == 1:
            return None
    limit = 9223372036854775808ULL if neg else 9223372036854775807ULL
    while i < n:
        if p[i] < b'0' or p[i] > b'9':
            return None
        if v > (limit - (p[i] - 48)) // 10:
            return None
        v = v * 10 + (p[i] - 48)
        i += 1
    if neg:
        return -<long long>(v - 1) - 1 if v else 0
    return <long long>v


cdef bytes NULL3 = b"_\r\n"


cdef extern from "string.h":
    void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen)


# ---- RESP3 --------------------------------------------------------------------------

cdef bytes convert_nulls(bytes data):
    """Rewrite every RESP2 null (`$-1`, `*-1`) in one encoded reply as RESP3 `_`.

    A linear walk over the element headers: bulk payloads are skipped by their length,
    so a job body that happens to contain "$-1\r\n" is left alone. Malformed input is
    returned unchanged."""
    cdef const char *p = data
    cdef Py_ssize_t n = len(data), pos = 0, last = 0, cr, i
    cdef const char *crp
    cdef char t
    cdef long long blen
    cdef list out = None
    while pos < n:
        t = p[pos]
        crp = <const char*>memchr(p + pos, b'\r', n - pos)
        if crp == NULL:
            return data
        cr = crp - p
        if cr - pos == 3 and p[pos + 1] == b'-' and p[pos + 2] == b'1' and (
                t == b'$' or t == b'*' or t == b'%' or t == b'~'):
            if out is None:
                out = []
            out.append(data[last:pos])
            out.append(NULL3)
            pos = cr + 2
            last = pos
            continue
        if t == b'$' or t == b'=' or t == b'!':
            blen = 0
            if cr - pos < 2:
                return data
            for i in range(pos + 1, cr):
                if p[i] < b'0' or p[i] > b'9':
                    return data
                blen = blen * 10 + (p[i] - 48)
            pos = cr + 2 + blen + 2
        else:
            pos = cr + 2
    if out is None:
        return data
    out.append(data[last:])
    return b"".join(out)


cdef bytes to_resp3(bytes data):
    """convert_nulls, with the quick answers first (a lone null, no null at all)."""
    cdef const char *p = data
    cdef Py_ssize_t n = len(data)
    if n == 5 and p[1] == b'-' and p[2] == b'1' and (p[0] == b'$' or p[0] == b'*'):
        return NULL3
    if n < 5 or memmem(p, n, b"-1\r\n", 4) == NULL:
        return data
    return convert_nulls(data)


def resp3(bytes data):
    """The RESP3 form of an encoded RESP2 reply (nulls become `_`)."""
    return to_resp3(data)
