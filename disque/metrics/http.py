"""The HTTP/1.1 server of the metrics port (and the operations console): asyncio protocols run
by the front-end's own event loop (no thread, no second loop), each request parsed by
httptools (llhttp, the parser aiohttp and uvicorn use) through its public callback API.

What is ours is the connection: the bounds it keeps (docs/metrics.md, "How it works"), each
a line of this file: the time to send a complete request head once its first byte came
(HEAD_TIMEOUT, else 408 and close), the connection limit (MAX_CONNECTIONS, else 503 and
close at once), the whole head's size and field count (HEADER_LIMIT, MAX_HEADERS, else 431
and close), reading that stops while a client leaves more than WRITE_HIGH bytes of answers
unread or MAX_QUEUED pipelined requests wait, the answer (RESPONSE_TIMEOUT, else 503), the
methods (GET, HEAD, POST, else 405) and bodies (POST only, at most BODY_LIMIT, else 413
and close; a GET or HEAD with a body gets 400 and close; a body not complete within
HEAD_TIMEOUT of its head gets 408). Anything llhttp refuses: 400 and close (505 for another
HTTP version). Pipelined requests are answered in order, one at a time.

`handler(request, respond)` answers each request by calling
`respond(status, content_type, body, headers=())` once, now or later.
"""
import asyncio
import http.cookies
import logging
import os
import time
from collections import deque
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

import httptools

from disque.contracts.tls_settings import HANDSHAKE_TIMEOUT

log = logging.getLogger("disque.metrics")

HEADER_LIMIT = 8192
MAX_HEADERS = 64
BODY_LIMIT = 65536
HEAD_TIMEOUT = float(os.environ.get("DISQUE_METRICS_HEAD_TIMEOUT", "5"))
IDLE_TIMEOUT = float(os.environ.get("DISQUE_METRICS_IDLE_TIMEOUT", "60"))
# the workers answer in milliseconds; past this, 503 and close
RESPONSE_TIMEOUT = float(os.environ.get("DISQUE_METRICS_RESPONSE_TIMEOUT", "10"))
MAX_CONNECTIONS = 64
MAX_QUEUED = 16         # pipelined requests read ahead of their answers
LINGER = 1.0            # after a refusal: what the client still sends is read and dropped this long
WRITE_HIGH = 1 << 20
METHODS = frozenset(("GET", "HEAD", "POST"))
ALLOW = "GET, HEAD, POST"
COMMON_HEADERS = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                  ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
                  ("Server", "disque"))


def cancelled(timer):
    """Cancel an asyncio timer handle if there is one; None, to store in its place."""
    if timer is not None:
        timer.cancel()
    return None


class Refused(Exception):
    """A request this server answers with an error and closes: (status, why)."""

    def __init__(self, status, why):
        super().__init__(why)
        self.status = status
        self.why = why


class Headers(dict):
    """A request's headers by lower-case name (the first of repeated ones)."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name):
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name):
        return dict.__contains__(self, name.lower())


class Request:
    """What the handler sees of a request: method, path (percent-decoded), query (dict,
    url-decoded, the last value wins), headers (case-insensitive), body, remote ("ip:port"),
    keep_alive, cookies and secure (it came over HTTPS)."""
    __slots__ = ("method", "target", "path", "raw_query", "headers", "body", "remote",
                 "keep_alive", "secure", "version")

    def __init__(self):
        self.method = ""
        self.target = b""
        self.path = "/"
        self.raw_query = ""
        self.headers = Headers()
        self.body = b""
        self.remote = ""
        self.keep_alive = True
        self.secure = False
        self.version = "1.1"

    @property
    def query(self):
        return dict(parse_qsl(self.raw_query, keep_blank_values=True))

    @property
    def cookies(self):
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(self.headers.get("cookie", ""))
        except http.cookies.CookieError:
            return {}
        return {k: m.value for k, m in jar.items()}


def reason(status):
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def response_bytes(status, content_type, body, headers=(), close=False, head_only=False):
    """A whole answer: every one has Content-Type, Content-Length, Date and COMMON_HEADERS;
    a HEAD answer the headers of GET and no body."""
    lines = ["HTTP/1.1 %d %s" % (status, reason(status)), "Content-Type: " + content_type,
             "Content-Length: %d" % len(body),
             "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())]
    lines.extend("%s: %s" % h for h in COMMON_HEADERS)
    lines.extend("%s: %s" % h for h in headers)
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


class HttpServer:
    """Owns the listeners and the connections; `stats` counts requests, bad_requests,
    timeouts and rejected connections."""

    def __init__(self, loop, handler):
        self.loop = loop
        self.handler = handler
        self.connections = set()
        self.stats = {"requests": 0, "bad_requests": 0, "timeouts": 0, "rejected": 0}
        self.servers = []

    async def listen(self, socks, ssl=None):
        """`ssl`: an SSLContext for HTTPS (metrics-tls yes), else plain HTTP."""
        tls = dict(ssl=ssl, ssl_handshake_timeout=HANDSHAKE_TIMEOUT) if ssl is not None else {}
        for sock in socks:
            self.servers.append(await self.loop.create_server(
                lambda: Connection(self), sock=sock, **tls))

    def close(self):
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.abort()

    def dispatch(self, conn, req):
        """Run the handler; `conn.answered(...)` gets its answer, or 503 after RESPONSE_TIMEOUT."""
        done = []

        def respond(status, content_type, body, headers=()):
            if not done:
                done.append(True)
                timer.cancel()
                conn.answered(req, status, content_type, body, headers)

        def too_late():
            if not done:
                self.stats["timeouts"] += 1
                respond(503, "text/plain", b"no answer from the workers in time\n",
                        (("Connection", "close"),))

        timer = self.loop.call_later(RESPONSE_TIMEOUT, too_late)
        try:
            self.handler(req, respond)
        except Exception:
            log.exception("metrics endpoint: error answering %s", req.path)
            respond(500, "text/plain", b"internal error\n")


class Connection(asyncio.Protocol):
    """One client connection: llhttp's callbacks build each request, the queue holds the
    pipelined ones, one is answered at a time."""

    def __init__(self, server):
        self.server = server
        self.loop = server.loop
        self.transport = None
        self.parser = httptools.HttpRequestParser(self)
        self.remote = ""
        self.secure = False
        self.rejected = False
        self.queue = deque()        # complete requests waiting for their turn
        self.current = None         # the request being answered
        self.building = None        # the request whose head or body is being read
        self.url = []
        self.head_size = 0
        self.fields = 0             # header fields of the head being read
        self.in_head = False
        self.head_bytes = 0         # bytes received while a head is incomplete
        self.failure = None         # (status, why): answered after the earlier requests
        self.closing = False
        self.head_timer = self.body_timer = self.idle_timer = self.stall_timer = None
        self.head_waiting = False   # a head started while an answer was pending
        self.paused = set()         # why reading is paused: "write", "queue", "closing"
        self.eof = False            # the client closed its side: close ours once answered
        self.lingering = False

    # ---- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        srv = self.server
        if len(srv.connections) >= MAX_CONNECTIONS:
            srv.stats["rejected"] += 1
            self.rejected = True
            transport.write(response_bytes(503, "text/plain", b"too many connections\n",
                                           close=True))
            transport.close()
            return
        srv.connections.add(self)
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote = ("[%s]:%d" if ":" in peer[0] else "%s:%d") % peer[:2]
        self.secure = transport.get_extra_info("sslcontext") is not None
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.arm_idle()

    def connection_lost(self, exc):
        if self.rejected:
            return
        self.server.connections.discard(self)
        self.closing = True
        for timer in (self.head_timer, self.body_timer, self.idle_timer, self.stall_timer):
            if timer is not None:
                timer.cancel()
        self.transport = None

    def data_received(self, data):
        if self.rejected or self.closing or self.failure is not None:
            return                  # after a refusal nothing more is read (lingering: dropped)
        self.cancel_idle()
        try:
            self.parser.feed_data(data)
            if self.in_head:
                self.head_bytes += len(data)
                if self.head_bytes > HEADER_LIMIT:  # a head that never ends its lines
                    raise Refused(431, "request head over %d bytes" % HEADER_LIMIT)
        except Refused as e:
            self.fail(e.status, e.why)
        except httptools.HttpParserUpgrade:
            self.fail(400, "protocol upgrades are not served")
        except httptools.HttpParserError as e:
            cause = e.__context__ if isinstance(e.__context__, Refused) else None
            if cause is not None:
                self.fail(cause.status, cause.why)
            else:
                why = str(e)
                self.fail(505 if "HTTP version" in why else 400, "malformed request")
        self.next()

    def pause_writing(self):
        # the client leaves WRITE_HIGH bytes unread: read none of its further requests,
        # and drop it if that lasts IDLE_TIMEOUT
        self.pause("write")
        self.stall_timer = self.loop.call_later(IDLE_TIMEOUT, self.abort)

    def resume_writing(self):
        self.stall_timer = cancelled(self.stall_timer)
        self.resume("write")

    def eof_received(self):
        self.eof = True             # answer what came, then close (next)
        if self.lingering:
            return False
        self.next()
        return True

    # ---- llhttp's callbacks ------------------------------------------------------------

    def on_message_begin(self):
        req = self.building = Request()
        req.remote = self.remote
        req.secure = self.secure
        self.url = []
        self.head_size = 0
        self.fields = 0
        self.in_head = True
        self.head_bytes = 0
        if self.current is None and not self.queue:
            self.arm_head()
        else:
            self.head_waiting = True    # its time starts when the answers before it are out

    def on_url(self, url):
        self.url.append(url)
        self.grow_head(len(url) + 14)   # "M /p HTTP/1.1\r\n" and the final CRLF

    def on_header(self, name, value):
        req = self.building
        self.fields += 1
        if self.fields > MAX_HEADERS:
            raise Refused(431, "more than %d header fields" % MAX_HEADERS)
        self.grow_head(len(name) + len(value) + 4)
        key = name.decode("latin-1").lower()
        if key not in req.headers:
            dict.__setitem__(req.headers, key, value.decode("latin-1"))

    def grow_head(self, n):
        self.head_size += n
        if self.head_size > HEADER_LIMIT:
            raise Refused(431, "request head over %d bytes" % HEADER_LIMIT)

    def on_headers_complete(self):
        self.in_head = False
        self.head_waiting = False
        self.disarm_head()
        req = self.building
        parser = self.parser
        req.version = parser.get_http_version()
        req.method = parser.get_method().decode("latin-1")
        req.keep_alive = parser.should_keep_alive()
        if req.version not in ("1.0", "1.1"):
            raise Refused(505, "HTTP/1.x only")
        target = b"".join(self.url)
        if not target.startswith(b"/"):
            raise Refused(400, "a request target that is no path")
        path, _, query = target.partition(b"?")
        req.path = unquote(path.decode("latin-1"))
        req.raw_query = query.decode("latin-1")
        if req.version == "1.1" and "host" not in req.headers:
            raise Refused(400, "an HTTP/1.1 request without Host")
        has_body = "transfer-encoding" in req.headers or \
            req.headers.get("content-length", "0") not in ("", "0")
        if has_body:
            if req.method in ("GET", "HEAD"):
                raise Refused(400, "a %s request has no body" % req.method)
            if int(req.headers.get("content-length") or 0) > BODY_LIMIT:
                raise Refused(413, "request body over %d bytes" % BODY_LIMIT)
            self.body_timer = self.loop.call_later(HEAD_TIMEOUT, self.body_timed_out)
            if req.headers.get("expect", "").lower() == "100-continue" and self.transport \
                    and self.current is None and not self.queue:    # else it would come first
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk):
        req = self.building
        if len(req.body) + len(chunk) > BODY_LIMIT:
            raise Refused(413, "request body over %d bytes" % BODY_LIMIT)
        req.body += chunk

    def on_message_complete(self):
        self.body_timer = cancelled(self.body_timer)
        self.queue.append(self.building)
        self.building = None
        if len(self.queue) >= MAX_QUEUED:
            self.pause("queue")

    # ---- answering, in order ------------------------------------------------------------

    def next(self):
        """Answer the next request when none is being answered; after the last one, a
        refusal (then close), or wait for the next head."""
        if self.current is not None or self.transport is None:
            return
        if self.queue:
            req = self.current = self.queue.popleft()
            if len(self.queue) < MAX_QUEUED // 2:
                self.resume("queue")
            self.server.stats["requests"] += 1
            if req.method not in METHODS:
                self.answered(req, 405, "text/plain", b"only GET, HEAD and POST\n",
                              (("Allow", ALLOW),))
            else:
                self.server.dispatch(self, req)
            return
        if self.failure is not None:
            status, why = self.failure
            self.transport.write(response_bytes(status, "text/plain", (why + "\n").encode(),
                                                close=True))
            self.linger()
            return
        if self.eof:
            self.close()
            return
        if self.head_waiting and self.in_head:
            self.head_waiting = False
            self.arm_head()
        elif not self.in_head and self.building is None:
            self.arm_idle()

    def answered(self, req, status, content_type, body, headers=()):
        """The handler's answer to the current request (or a late one, ignored)."""
        if req is not self.current or self.transport is None:
            return
        self.current = None
        close = status >= 400 or not req.keep_alive or self.eof \
            or any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
        headers = [h for h in headers if h[0].lower() != "connection"]
        if req.version == "1.0" and req.keep_alive and not close:
            headers.append(("Connection", "keep-alive"))
        self.transport.write(response_bytes(status, content_type, body, headers, close,
                                            head_only=req.method == "HEAD"))
        if close:
            self.close()
            return
        self.next()

    # ---- refusals, timers, closing --------------------------------------------------------

    def fail(self, status, why):
        """A refusal: answered with `status` after the requests before it, then close."""
        if self.failure is None:
            self.server.stats["bad_requests"] += 1
            log.debug("metrics endpoint: %d from %s: %s", status, self.remote, why)
            self.failure = (status, why)
            self.building = None
            self.in_head = False
            self.disarm_head()
            self.pause("closing")

    def arm_head(self):
        self.disarm_head()
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT, self.head_timed_out)

    def disarm_head(self):
        self.head_timer = cancelled(self.head_timer)

    def head_timed_out(self):
        self.head_timer = None
        if self.in_head and self.current is None and not self.queue:
            self.server.stats["timeouts"] += 1
            self.fail(408, "request head not complete within %gs" % HEAD_TIMEOUT)
            self.next()

    def body_timed_out(self):
        self.body_timer = None
        if self.building is not None:
            self.server.stats["timeouts"] += 1
            self.fail(408, "request body not complete within %gs" % HEAD_TIMEOUT)
            self.next()

    def arm_idle(self):
        self.cancel_idle()
        self.idle_timer = self.loop.call_later(IDLE_TIMEOUT, self.close)

    def cancel_idle(self):
        self.idle_timer = cancelled(self.idle_timer)

    def pause(self, why):
        if not self.paused and self.transport is not None:
            self.transport.pause_reading()
        self.paused.add(why)

    def resume(self, why):
        if why in self.paused:
            self.paused.discard(why)
            if not self.paused and self.transport is not None:
                self.transport.resume_reading()

    def linger(self):
        """Close after a refusal: our side first, then what the client still sends is read
        and dropped for LINGER seconds, so the answer is not lost to a reset (a closed
        socket with unread input resets the connection)."""
        transport = self.transport
        if transport is None:
            return
        self.closing = True
        self.disarm_head()
        self.cancel_idle()
        if self.eof or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        transport.write_eof()
        self.paused.clear()
        transport.resume_reading()
        self.loop.call_later(LINGER, self.abort)

    def close(self):
        self.closing = True
        self.disarm_head()
        self.cancel_idle()
        if self.transport is not None:
            self.transport.close()

    def abort(self):
        self.closing = True
        if self.transport is not None:
            self.transport.abort()
