"""A small HTTP/1.1 server for the metrics endpoint, run by the front-end's event loop.

Only what a scraper, a browser and curl need: GET and HEAD, no request bodies, keep-alive
and pipelining (answered in order). It must never hurt the node, so everything is bounded:
the request head (HEADER_LIMIT bytes, else 431 and close), the time to send a complete head
once it started (HEAD_TIMEOUT, else 408 and close), the answer (RESPONSE_TIMEOUT, else
503), an idle keep-alive connection (IDLE_TIMEOUT), the number of connections
(MAX_CONNECTIONS, else 503), and the output a client leaves unread (reading pauses above
WRITE_HIGH). Anything not well-formed gets 400 and the connection is closed.
"""
import asyncio
import logging
import os
import re
import time

log = logging.getLogger("disque.metrics")

HEADER_LIMIT = 8192
MAX_HEADERS = 64
HEAD_TIMEOUT = float(os.environ.get("DISQUE_METRICS_HEAD_TIMEOUT", "5"))
IDLE_TIMEOUT = float(os.environ.get("DISQUE_METRICS_IDLE_TIMEOUT", "60"))
# the workers answer in milliseconds; past this, 503 and close
RESPONSE_TIMEOUT = float(os.environ.get("DISQUE_METRICS_RESPONSE_TIMEOUT", "10"))
MAX_CONNECTIONS = 64
WRITE_HIGH = 1 << 20

_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_TARGET = re.compile(rb"^/[\x21-\x7e]*$")
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 413: "Payload Too Large",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}


class BadRequest(Exception):
    def __init__(self, status, why):
        super().__init__(why)
        self.status = status


class Request:
    __slots__ = ("method", "target", "path", "query", "version", "headers", "keep_alive")

    def __init__(self, method, target, version, headers):
        self.method = method
        self.target = target
        path, _, query = target.partition("?")
        self.path = path
        self.query = dict(p.partition("=")[::2] for p in query.split("&") if p)
        self.version = version
        self.headers = headers
        conn = headers.get("connection", "").lower()
        if version == "HTTP/1.1":
            self.keep_alive = "close" not in conn
        else:
            self.keep_alive = "keep-alive" in conn


def parse_head(head):
    """A request from its head (bytes before the blank line); raises BadRequest."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "non-ASCII request head")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.match(method.encode()) or not _TARGET.match(target.encode()):
        raise BadRequest(400, "malformed request line")
    if not version.startswith("HTTP/1."):
        raise BadRequest(505 if version.startswith("HTTP/") else 400, "unsupported version")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(505, "unsupported version")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, "too many header fields")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not _TOKEN.match(name.encode()):
            raise BadRequest(400, "malformed header field")   # also obsolete line folding
        if any(c < " " and c != "\t" for c in value):
            raise BadRequest(400, "control character in a header value")
        headers[name.lower()] = value.strip(" \t")
    if "transfer-encoding" in headers:
        raise BadRequest(400, "request bodies are not accepted")
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise BadRequest(400, "malformed Content-Length")
    if int(length):
        raise BadRequest(413, "request bodies are not accepted")
    return Request(method, target, version, headers)


class HttpServer:
    """Owns the connections; `handler(request, respond)` answers each request by calling
    `respond(status, content_type, body, headers=())` once, now or later."""

    def __init__(self, loop, handler):
        self.loop = loop
        self.handler = handler
        self.connections = set()
        self.stats = {"requests": 0, "bad_requests": 0, "timeouts": 0, "rejected": 0}
        self.servers = []

    def protocol(self):
        return HttpConnection(self)

    async def listen(self, socks):
        for sock in socks:
            self.servers.append(await self.loop.create_server(self.protocol, sock=sock))

    def close(self):
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections):
            conn.abort()


class HttpConnection(asyncio.Protocol):
    def __init__(self, server):
        self.server = server
        self.transport = None
        self.buf = b""
        self.busy = False           # a request is being answered; later ones wait in buf
        self.closing = False
        self.write_paused = False
        self.timer = None
        self.request = None

    # ---- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        srv = self.server
        if len(srv.connections) >= MAX_CONNECTIONS:
            srv.stats["rejected"] += 1
            self.closing = True
            transport.write(self.response_bytes(503, "text/plain", b"too many connections\n",
                                                close=True))
            transport.close()
            return
        srv.connections.add(self)
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.arm(IDLE_TIMEOUT)

    def connection_lost(self, exc):
        self.closing = True
        self.server.connections.discard(self)
        self.disarm()

    def data_received(self, data):
        if self.closing:
            return
        if not self.buf and not self.busy:
            self.arm(HEAD_TIMEOUT)          # a request started: it has HEAD_TIMEOUT to finish
        self.buf += data
        self.advance()

    def pause_writing(self):
        self.write_paused = True

    def resume_writing(self):
        self.write_paused = False
        self.advance()

    # ---- requests ---------------------------------------------------------------------

    def advance(self):
        """Parse and dispatch the next complete request, if we may."""
        if self.closing or self.busy or self.write_paused:
            if len(self.buf) > HEADER_LIMIT + 4 and not self.closing:
                self.transport.pause_reading()      # pipelining faster than we answer
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > HEADER_LIMIT:
                self.fail(431, "request head over %d bytes" % HEADER_LIMIT)
            return
        if end > HEADER_LIMIT:
            self.fail(431, "request head over %d bytes" % HEADER_LIMIT)
            return
        head, self.buf = self.buf[:end], self.buf[end + 4:]
        try:
            req = parse_head(head)
        except BadRequest as e:
            self.fail(e.status, str(e))
            return
        self.arm(RESPONSE_TIMEOUT)
        self.busy = True
        self.request = req
        self.server.stats["requests"] += 1
        if req.method not in ("GET", "HEAD"):
            self.respond(405, "text/plain", b"only GET and HEAD\n", (("Allow", "GET, HEAD"),))
            return
        try:
            self.server.handler(req, self.respond)
        except Exception:
            log.exception("metrics endpoint: error answering %s", req.target)
            self.respond(500, "text/plain", b"internal error\n")

    def respond(self, status, content_type, body, headers=()):
        if self.closing or not self.busy:
            return
        req = self.request
        keep = req.keep_alive and status < 400
        data = self.response_bytes(status, content_type, body, headers, close=not keep,
                                   head_only=req.method == "HEAD")
        self.busy = False
        self.request = None
        self.disarm()
        self.transport.write(data)
        if not keep:
            self.closing = True
            self.transport.close()
            return
        self.transport.resume_reading()
        self.arm(HEAD_TIMEOUT if self.buf else IDLE_TIMEOUT)
        if self.buf:
            self.advance()

    def fail(self, status, why):
        """Bad request: answer with `status` and close."""
        self.server.stats["bad_requests"] += 1
        log.debug("metrics endpoint: %s: %s", status, why)
        self.closing = True
        self.disarm()
        self.transport.write(self.response_bytes(status, "text/plain", (why + "\n").encode(),
                                                 close=True))
        self.transport.close()

    @staticmethod
    def response_bytes(status, content_type, body, headers=(), close=False, head_only=False):
        lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Status")),
                 "Content-Type: " + content_type, "Content-Length: %d" % len(body),
                 "Cache-Control: no-store", "Date: " + time.strftime(
                     "%a, %d %b %Y %H:%M:%S GMT", time.gmtime())]
        lines.extend("%s: %s" % h for h in headers)
        if close:
            lines.append("Connection: close")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return out if head_only else out + body

    # ---- timers -------------------------------------------------------------------------

    def arm(self, seconds):
        self.disarm()
        self.timer = self.server.loop.call_later(seconds, self.timed_out)

    def disarm(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def timed_out(self):
        self.timer = None
        if self.closing:
            return
        if self.busy:
            self.server.stats["timeouts"] += 1
            self.respond(503, "text/plain", b"no answer from the workers in time\n")
        elif self.buf:
            self.server.stats["timeouts"] += 1
            self.fail(408, "request head not complete within %gs" % HEAD_TIMEOUT)
        else:
            self.closing = True
            self.transport.close()          # idle keep-alive connection

    def abort(self):
        self.closing = True
        self.disarm()
        if self.transport is not None:
            self.transport.abort()
