"""The HTTP/1.1 server of the metrics port (and the operations console), on aiohttp's
low-level server, run by the front-end's own event loop (no thread, no second loop).

aiohttp parses the requests (llhttp), keeps connections alive, answers pipelined requests in
order and writes the answers. What it has no setting for is done here, so the port keeps the
bounds it always had (docs/metrics.md, "How it works"): the time to send a complete request
head once its first byte came (HEAD_TIMEOUT, else 408 and close), the connection limit
(MAX_CONNECTIONS, else 503 and close at once), the whole head's size (HEADER_LIMIT, else 431
and close; aiohttp bounds a line and a field), reading that stops while a client leaves more
than WRITE_HIGH bytes of answers unread, the answer (RESPONSE_TIMEOUT, else 503), the methods
(GET, HEAD, POST, else 405) and bodies (POST only, at most BODY_LIMIT, else 413 and close;
a GET or HEAD with a body gets 400 and close). Anything malformed: 400 and close.

`handler(request, respond)` answers each request by calling
`respond(status, content_type, body, headers=())` once, now or later.
"""
import asyncio
import logging
import os
import time

from aiohttp import web
from aiohttp.http import HttpVersion11, RawRequestMessage
from aiohttp.http_exceptions import BadStatusLine, HttpProcessingError, LineTooLong
from aiohttp.streams import EmptyStreamReader
from aiohttp.web_protocol import ERROR, RequestHandler
from multidict import CIMultiDict

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
WRITE_HIGH = 1 << 20
LINGER = 1.0        # after an error with a body unread: read and drop it this long, then close
METHODS = frozenset(("GET", "HEAD", "POST"))
ALLOW = "GET, HEAD, POST"
COMMON_HEADERS = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                  ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
                  ("Server", "disque"))     # else aiohttp names itself and its version
ERRORS = {431: "request head over %d bytes" % HEADER_LIMIT, 505: "HTTP/1.x only"}
REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large",
           503: "Service Unavailable"}


def raw_response(status, body):
    """A complete closing answer, for the cases written without a request (connection
    limit, head timeout, an over-long head still arriving)."""
    lines = ["HTTP/1.1 %d %s" % (status, REASONS[status]), "Content-Type: text/plain",
             "Content-Length: %d" % len(body),
             "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())]
    lines.extend("%s: %s" % h for h in COMMON_HEADERS)
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def error_status(exc, status):
    """The status for a request aiohttp's parser refused (it says 400 for all)."""
    if isinstance(exc, LineTooLong) or "Too many headers" in str(exc):
        return 431
    if isinstance(exc, BadStatusLine) and "Invalid HTTP version" in str(exc):
        return 505
    return status


class SentRequest(web.BaseRequest):
    """aiohttp's request, with the HTTP version the client sent."""
    ATTRS = web.BaseRequest.ATTRS | frozenset(["sent_version"])
    sent_version = HttpVersion11


class Request:
    """What the handler sees of a request: method, path (percent-decoded), query (dict,
    url-decoded, the last value wins), headers (case-insensitive), body, remote ("ip:port"),
    keep_alive, cookies and secure (it came over HTTPS)."""
    __slots__ = ("_r", "body", "headers", "keep_alive", "method", "path", "remote")

    def __init__(self, r, body):
        self._r = r
        self.method = r.method
        self.path = r.path
        self.headers = r.headers
        self.body = body
        self.keep_alive = r.keep_alive
        self.remote = getattr(r.protocol, "remote", "")

    @property
    def query(self):
        return {k: v for k, v in self._r.query.items()}

    @property
    def cookies(self):
        return dict(self._r.cookies)

    @property
    def secure(self):
        return self._r.transport is not None and \
            self._r.transport.get_extra_info("sslcontext") is not None


def head_size(r):
    """Bytes of the request head as sent, give or take optional whitespace."""
    size = len(r.method) + len(r.raw_path) + 14        # "M /p HTTP/1.1\r\n" + final CRLF
    for name, value in r.raw_headers:
        size += len(name) + len(value) + 4
    return size


class HttpServer:
    """Owns the listeners and the connections; `stats` counts requests, bad_requests,
    timeouts and rejected connections."""

    def __init__(self, loop, handler):
        self.loop = loop
        self.handler = handler
        self.connections = set()
        self.stats = {"requests": 0, "bad_requests": 0, "timeouts": 0, "rejected": 0}
        self.servers = []
        # aiohttp's Server is the protocols' manager; handler_cancellation: a lost
        # connection ends its request at once (a late respond() is then ignored)
        self.manager = web.Server(self.serve, request_factory=self.make_request,
                                  handler_cancellation=True, loop=loop)

    def protocol(self):
        return Connection(self, self.manager, loop=self.loop, keepalive_timeout=IDLE_TIMEOUT,
                          logger=log, access_log=None, max_line_size=HEADER_LIMIT,
                          max_field_size=HEADER_LIMIT, max_headers=MAX_HEADERS,
                          lingering_time=LINGER, auto_decompress=False)

    async def listen(self, socks, ssl=None):
        """`ssl`: an SSLContext for HTTPS (metrics-tls yes), else plain HTTP."""
        tls = dict(ssl=ssl, ssl_handshake_timeout=HANDSHAKE_TIMEOUT) if ssl is not None else {}
        for sock in socks:
            self.servers.append(await self.loop.create_server(self.protocol, sock=sock, **tls))

    def close(self):
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.abort()

    def make_request(self, message, payload, protocol, writer, task):
        # every answer is HTTP/1.1 (aiohttp would echo the request's version): a refused
        # request, or one of another version, which gets 505 and close
        version = message.version
        if message is ERROR or version.major != 1:
            message = message._replace(version=HttpVersion11, should_close=True)
        r = SentRequest(message, payload, protocol, writer, task, self.loop,
                        client_max_size=BODY_LIMIT)
        r.sent_version = version
        return r

    # ---- one request ----------------------------------------------------------------

    async def serve(self, r):
        conn = r.protocol
        conn.entered()
        resp = None
        try:
            resp = await self.answer(r, conn)
            return resp
        finally:
            conn.left(resp is None or resp.keep_alive is False or not r.keep_alive)

    async def answer(self, r, conn):
        self.stats["requests"] += 1
        if r.sent_version.major != 1:
            return self.refuse(r, 505, "HTTP/1.x only")
        if head_size(r) > HEADER_LIMIT:
            return self.refuse(r, 431, "request head over %d bytes" % HEADER_LIMIT)
        method = r.method
        if method not in METHODS:
            return self.response(405, "text/plain", b"only GET, HEAD and POST\n",
                                 (("Allow", ALLOW),))
        body = b""
        if method == "POST":
            if (r.content_length or 0) > BODY_LIMIT:
                return self.refuse(r, 413, "request body over %d bytes" % BODY_LIMIT)
            if r.body_exists:
                if r.headers.get("expect", "").lower() == "100-continue":
                    await r.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                conn.reading_body = True
                try:
                    body = await asyncio.wait_for(r.read(), HEAD_TIMEOUT)
                except web.HTTPRequestEntityTooLarge:
                    return self.refuse(r, 413, "request body over %d bytes" % BODY_LIMIT)
                except asyncio.TimeoutError:
                    self.stats["timeouts"] += 1
                    return self.refuse(r, 408, "request body not complete within %gs" % HEAD_TIMEOUT)
                except HttpProcessingError as e:
                    return self.refuse(r, 400, "malformed body: %s" % e.message)
                finally:
                    conn.reading_body = False
        elif r.body_exists:
            return self.refuse(r, 400, "a %s request has no body" % method)
        return await self.dispatch(Request(r, body))

    async def dispatch(self, req):
        done = self.loop.create_future()

        def respond(status, content_type, body, headers=()):
            if not done.done():
                done.set_result((status, content_type, body, headers))

        def too_late():
            if not done.done():
                self.stats["timeouts"] += 1
                respond(503, "text/plain", b"no answer from the workers in time\n")

        timer = self.loop.call_later(RESPONSE_TIMEOUT, too_late)
        try:
            try:
                self.handler(req, respond)
            except Exception:
                log.exception("metrics endpoint: error answering %s", req.path)
                respond(500, "text/plain", b"internal error\n")
            status, content_type, body, headers = await done
        finally:
            timer.cancel()
        return self.response(status, content_type, body, headers)

    def refuse(self, r, status, why):
        """A bad request: log it at debug level, answer `status` and close."""
        self.stats["bad_requests"] += 1
        log.debug("metrics endpoint: %d from %s: %s", status, r.protocol.remote, why)
        return self.response(status, "text/plain", (why + "\n").encode(), close=True)

    @staticmethod
    def response(status, content_type, body, headers=(), close=False):
        h = CIMultiDict(COMMON_HEADERS)
        h["Content-Type"] = content_type
        for name, value in headers:
            h.add(name, value)
        resp = web.Response(status=status, body=body, headers=h)
        if close or status >= 400:
            resp.force_close()
        return resp


class Connection(RequestHandler):
    """aiohttp's protocol plus the bounds it has no setting for."""

    def __init__(self, server, manager, **kw):
        super().__init__(manager, **kw)
        self.server = server
        self.rejected = False
        self.remote = ""                # the client's "ip:port"
        self.closing = False            # the answer being sent is the last
        self.head_timer = None          # see data_received
        self.partial = False            # the parser holds the start of a head
        self.head_bytes = 0             # of that head
        self.stall_timer = None         # the client reads none of its answers
        self.in_request = False         # the handler runs
        self.reading_body = False

    # ---- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport):
        srv = self.server
        if len(srv.connections) >= MAX_CONNECTIONS:
            srv.stats["rejected"] += 1
            self.rejected = True
            transport.write(raw_response(503, b"too many connections\n"))
            transport.close()
            return
        srv.connections.add(self)
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote = ("[%s]:%d" if ":" in peer[0] else "%s:%d") % peer[:2]
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        super().connection_made(transport)

    def connection_lost(self, exc):
        if self.rejected:
            return
        self.server.connections.discard(self)
        self.disarm()
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None
        super().connection_lost(exc)

    def data_received(self, data):
        """aiohttp parses; we keep track of a head it holds incomplete, which gets
        HEAD_TIMEOUT to complete (from its first byte, or from the end of the answer being
        sent when it came during one) and HEADER_LIMIT bytes."""
        if self.rejected:
            return
        if not data or self.closing:    # aiohttp resuming its parser, or a body it drops
            super().data_received(data)
            return
        messages = self._messages
        queued = len(messages)
        in_body = self.reading_body or (queued and not messages[-1][1].is_eof())
        super().data_received(data)
        if self.transport is None or self.closing:
            return
        if len(messages) > queued:      # complete requests: what follows the last one?
            msg, payload = messages[-1]
            if isinstance(msg, RawRequestMessage) and isinstance(payload, EmptyStreamReader):
                end = data.rfind(b"\r\n\r\n")
                end = end + 4 if end >= 0 else data.find(b"\n") + 1
                self.head_bytes = len(data[end:].lstrip(b"\r\n"))
            else:                       # a body, or an error that closes: not known
                self.head_bytes = 0
            self.partial = self.head_bytes > 0
        elif not in_body:
            self.partial = True
            self.head_bytes += len(data)
        if self.partial and not self.in_request and not messages:
            if self.head_bytes > HEADER_LIMIT:  # aiohttp bounds each line, not their sum
                self.fail(431, "request head over %d bytes" % HEADER_LIMIT)
            elif self.head_timer is None:
                self.arm()

    def pause_writing(self):
        # the client leaves WRITE_HIGH bytes unread: read none of its further requests,
        # and drop it if that lasts IDLE_TIMEOUT
        super().pause_writing()
        if self.transport is not None:
            self.transport.pause_reading()
        self.stall_timer = self._loop.call_later(IDLE_TIMEOUT, self.abort)

    def resume_writing(self):
        super().resume_writing()
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None
        # unless aiohttp holds reading for its own reasons (a full queue, a full body buffer)
        if self.transport is not None and not getattr(self, "_reading_paused", False) \
                and not getattr(self, "_buffer_paused", False):
            self.transport.resume_reading()

    # ---- aiohttp ------------------------------------------------------------------------

    def handle_error(self, request, status=500, exc=None, message=None):
        """A request aiohttp's parser refused (or a handler error): our status and headers,
        logged at debug level for a client's error."""
        self.closing = True
        self.disarm()
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already sent")
        if isinstance(exc, HttpProcessingError):
            status = error_status(exc, status)
            self.server.stats["bad_requests"] += 1
            why = ERRORS.get(status, "malformed request")     # no echo of what was sent
            log.debug("metrics endpoint: %d from %s: %s", status, self.remote,
                      " ".join(line.strip() for line in str(exc.message).splitlines()[:2]))
        else:
            why = "internal error"
            log.error("metrics endpoint: error answering a request", exc_info=exc)
        return HttpServer.response(status, "text/plain", (why + "\n").encode(), close=True)

    # ---- the head timer -------------------------------------------------------------

    def entered(self):
        """The handler runs: its head is complete."""
        self.disarm()
        self.in_request = True

    def left(self, closing):
        self.in_request = False
        if closing:
            self.closing = True
            self.disarm()
        elif self.partial and not self._messages and self.transport is not None:
            self.arm()                  # a next head started during this request

    def arm(self):
        self.disarm()
        self.head_timer = self._loop.call_later(HEAD_TIMEOUT, self.head_timed_out)

    def disarm(self):
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_timed_out(self):
        self.head_timer = None
        if self.in_request or self.closing or self._messages or not self.partial \
                or self.transport is None:
            return
        self.server.stats["timeouts"] += 1
        self.fail(408, "request head not complete within %gs" % HEAD_TIMEOUT)

    def fail(self, status, why):
        """Answer `status` and close, with no request to answer (see raw_response)."""
        self.server.stats["bad_requests"] += 1
        log.debug("metrics endpoint: %d: %s", status, why)
        self.closing = True
        self.disarm()
        self.transport.write(raw_response(status, (why + "\n").encode()))
        self.force_close()

    def abort(self):
        self.disarm()
        transport = self.transport
        self.force_close()
        if transport is not None:
            transport.abort()
