"""TLS connections of the client port, run by this worker (docs/design.md, "TLS on the client
port").

A TLS connection's state (keys, sequence numbers) lives in the OpenSSL object that made its
handshake and cannot move to another process: this kernel has no kernel TLS to hand it to.
So the worker the front-end picked when it accepted the connection (TLS_ACCEPT) runs its
TLS for as long as it lives, and the connection takes the usual two places:

* **pumped**: while the front-end serves the connection (a new one, one handed back for a
  node command, every one with connection-affinity no) the worker carries its plaintext
  to and from the front-end over a socketpair, whose other end the front-end serves like
  any accepted socket (TLS_CONN, then HANDOFF / HANDBACK as for a plaintext connection);
* **served**: when the front-end hands it over (a HANDOFF naming this worker's pump), the
  worker serves it like a plaintext connection (ServedClient.tls set: the Cython loop reads
  and writes through the ssl.SSLSocket), with no process in between. Commands of another
  worker's queues go there over a peer link: the connection cannot follow its queue.
"""
import logging
import select
import socket
import ssl
import time

from disque.contracts import connection_handover as H
from disque.tls_context import (HANDSHAKE_TIMEOUT, WRITE_CHUNK, TlsConfigError, reason,
                                server_context)

log = logging.getLogger("disque.worker")

EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
CHUNK = 64 * 1024               # bytes per read
LIMIT = 1 << 20                 # bytes held one way before that way stops reading
CLOSE_TIMEOUT = 10.0            # a closing connection's last replies get this long to leave
LOG_BURST = 20                  # handshake failures logged per LOG_WINDOW, the rest counted
LOG_WINDOW = 10.0
PLAINTEXT_HINTS = ("wrong version number", "http request", "unknown protocol",
                   "record layer failure", "packet length too long")


def drain(sock):
    """Everything readable on a non-blocking socket now."""
    chunks = []
    while True:
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


class Pump:
    """One TLS connection of this worker (handshaking, pumped or served)."""
    __slots__ = ("id", "tls", "fd", "addr", "plain", "to_tls", "to_plain", "since", "closing",
                 "retry")

    def __init__(self, pid, tls, addr):
        self.id = pid
        self.tls = tls
        self.fd = tls.fileno()
        self.addr = addr                # "host:port", for the log
        self.plain = None               # our end of the socketpair while pumped
        self.to_tls = bytearray()       # plaintext for the client, not yet taken by OpenSSL
        self.to_plain = bytearray()     # the client's plaintext, not yet taken by the front-end
        self.since = time.monotonic()   # accepted (handshake deadline) or closing since
        self.closing = False            # the front-end closed: the last replies, then close
        self.retry = 0                  # bytes of the write OpenSSL could not finish


class TlsClients:
    """Needs the served loop (ServedClients: ep, extra_fds, channel, adopt, dirty). Offers:
    configure (the settings, from the front-end's tls_config control), accept (TLS_ACCEPT),
    serve (a HANDOFF naming a pump), pump_again (a served one handed back), cron, close_all."""

    def __init__(self, served):
        self.served = served
        self.ep = served.ep
        self.extra_fds = served.extra_fds
        self.ctx = None
        self.pumps = {}                 # id -> Pump, handshaking and pumped (not served)
        self.masks = {}                 # fd -> the epoll mask it is registered with
        self.next_id = 0
        self.handshakes = self.failures = 0
        self.logged = 0                 # failures logged in this window
        self.window = 0.0

    def configure(self, settings):
        try:
            self.ctx = server_context(settings)
        except TlsConfigError as e:
            return {"error": str(e)}
        return True

    # ---- epoll bookkeeping -----------------------------------------------------------------

    def watch(self, fd, mask, on_event):
        old = self.masks.get(fd)
        if old is None:
            self.ep.register(fd, mask)
        elif old != mask:
            self.ep.modify(fd, mask)
        self.extra_fds[fd] = on_event
        self.masks[fd] = mask

    def unwatch(self, fd):
        if self.masks.pop(fd, None) is not None:
            try:
                self.ep.unregister(fd)
            except (OSError, ValueError):
                pass
        self.extra_fds.pop(fd, None)

    # ---- the handshake ---------------------------------------------------------------------

    def accept(self, msg, fd):
        sock = socket.socket(fileno=fd)
        addr = ("[%s]:%d" if ":" in msg.host else "%s:%d") % (msg.host, msg.port)
        if self.ctx is None:
            log.warning("TLS connection from %s closed: this worker has no TLS settings yet", addr)
            sock.close()
            return
        sock.setblocking(False)
        try:
            tls = self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (ssl.SSLError, OSError) as e:
            log.warning("TLS connection from %s closed: %s", addr, reason(e))
            sock.close()
            return
        self.next_id += 1
        p = self.pumps[self.next_id] = Pump(self.next_id, tls, addr)
        self.watch(p.fd, EPOLLIN, lambda ev: self.shake(p))
        self.shake(p)

    def shake(self, p):
        try:
            p.tls.do_handshake()
        except ssl.SSLWantReadError:
            self.watch(p.fd, EPOLLIN, lambda ev: self.shake(p))
            return
        except ssl.SSLWantWriteError:
            self.watch(p.fd, EPOLLOUT, lambda ev: self.shake(p))
            return
        except (ssl.SSLError, OSError, ValueError) as e:
            self.handshake_failed(p, e)
            return
        self.handshakes += 1
        log.debug("TLS connection from %s: %s, %s", p.addr, p.tls.version(), p.tls.cipher()[0])
        self.to_front_end(p)

    def handshake_failed(self, p, e):
        self.failures += 1
        why = reason(e) if not isinstance(e, ssl.SSLEOFError) else "the client closed it"
        if isinstance(e, OSError) and not isinstance(e, ssl.SSLError) and not why:
            why = "connection reset"
        if any(h in why for h in PLAINTEXT_HINTS):
            why += " (plaintext on the TLS port?)"
        now = time.monotonic()
        if now - self.window > LOG_WINDOW:
            if self.logged > LOG_BURST:
                log.warning("... and %d more TLS handshake failures", self.logged - LOG_BURST)
            self.window, self.logged = now, 0
        self.logged += 1
        if self.logged <= LOG_BURST:
            log.warning("TLS handshake with %s failed: %s", p.addr, why)
        self.close(p)

    # ---- pumped: the front-end serves it ---------------------------------------------------

    def to_front_end(self, p):
        """Give the front-end the plaintext end of a socketpair and pump between the two."""
        plain, theirs = socket.socketpair()
        plain.setblocking(False)
        p.plain = plain
        host, _, port = p.addr.rpartition(":")
        try:
            self.served.channel.send(H.TlsConn.encode(p.id, host.strip("[]"), int(port)),
                                     theirs.fileno())
        except OSError:
            self.close(p)
            return
        finally:
            theirs.close()
        self.pumps[p.id] = p
        self.watch(p.fd, EPOLLIN, lambda ev: self.on_tls(p, ev))
        self.watch(plain.fileno(), EPOLLIN, lambda ev: self.on_plain(p, ev))
        self.read_tls(p)        # the first command may have come with the handshake's end

    def on_tls(self, p, ev):
        if ev & EPOLLOUT:
            self.flush_tls(p)
        if ev & ~EPOLLOUT and p.plain is not None:
            self.read_tls(p)

    def read_tls(self, p):
        while len(p.to_plain) < LIMIT and not p.closing:
            try:
                data = p.tls.recv(CHUNK)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except (OSError, ValueError):
                data = b""
            if not data:
                self.flush_plain(p)
                self.close(p)           # the front-end sees its end close: client gone
                return
            p.to_plain += data
            if len(data) < CHUNK and not p.tls.pending():
                break
        self.flush_plain(p)

    def flush_plain(self, p):
        if p.plain is None:
            return
        if p.to_plain:
            try:
                n = p.plain.send(p.to_plain)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self.close(p)
                return
            del p.to_plain[:n]
        self.set_masks(p)

    def on_plain(self, p, ev):
        if ev & EPOLLOUT:
            self.flush_plain(p)
        if ev & ~EPOLLOUT and p.plain is not None:
            while len(p.to_tls) < max(LIMIT, p.retry):
                try:
                    data = p.plain.recv(CHUNK)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:            # the front-end closed it: the last replies, then close
                    p.closing = True
                    p.since = time.monotonic()
                    break
                p.to_tls += data
                if len(data) < CHUNK:
                    break
            self.flush_tls(p)

    def flush_tls(self, p):
        # a retry needs the bytes of the write that did not finish (tls_context.WRITE_CHUNK)
        while p.to_tls and len(p.to_tls) >= p.retry:
            chunk = bytes(p.to_tls[:WRITE_CHUNK])
            try:
                n = p.tls.send(chunk)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                p.retry = len(chunk)
                break
            except (OSError, ValueError):
                self.close(p)
                return
            p.retry = 0
            del p.to_tls[:n]
        if p.closing and not p.to_tls:
            self.close(p)
            return
        self.set_masks(p)

    def set_masks(self, p):
        if p.plain is None:
            return
        tls_mask = (EPOLLIN if len(p.to_plain) < LIMIT and not p.closing else 0) | \
            (EPOLLOUT if p.to_tls and len(p.to_tls) >= p.retry else 0)
        plain_mask = (EPOLLIN if len(p.to_tls) < max(LIMIT, p.retry) and not p.closing else 0) | \
            (EPOLLOUT if p.to_plain else 0)
        self.watch(p.fd, tls_mask, self.extra_fds[p.fd])
        self.watch(p.plain.fileno(), plain_mask, self.extra_fds[p.plain.fileno()])

    def close(self, p):
        self.pumps.pop(p.id, None)
        self.unwatch(p.fd)
        if p.plain is not None:
            self.unwatch(p.plain.fileno())
            p.plain.close()
            p.plain = None
        try:
            p.tls.close()
        except OSError:
            pass

    # ---- served: this worker serves it -----------------------------------------------------

    def serve(self, h, fd):
        """HANDOFF of pump h.pump (`fd`: the front-end's end of its socketpair): serve it here."""
        theirs = socket.socket(fileno=fd)
        p = self.pumps.get(h.pump)
        if p is None or p.plain is None or p.closing:
            theirs.close()      # it ended meanwhile: the front-end learns it from GONE
            self.served.channel.send(H.Gone.encode(h.client))
            return
        theirs.setblocking(False)
        # replies the front-end wrote before it let go, then input it did not read
        p.to_tls += drain(p.plain)
        unparsed = h.unparsed + drain(theirs) + bytes(p.to_plain)
        theirs.close()
        self.unwatch(p.plain.fileno())
        p.plain.close()
        p.plain = None
        self.unwatch(p.fd)
        del self.pumps[p.id]
        self.served.adopt(h.client, p.tls, h.resp3, unparsed, p.id, bytes(p.to_tls))

    def pump_again(self, c):
        """A served TLS connection goes back to the front-end: the socket it gets (the
        caller sends it with the HANDBACK and closes it)."""
        p = Pump(c.pump, c.sock, self.addr_of(c.sock))
        p.retry = c.tls_retry
        plain, theirs = socket.socketpair()
        plain.setblocking(False)
        p.plain = plain
        self.pumps[p.id] = p
        self.watch(p.fd, EPOLLIN, lambda ev: self.on_tls(p, ev))
        self.watch(plain.fileno(), EPOLLIN, lambda ev: self.on_plain(p, ev))
        return theirs

    @staticmethod
    def addr_of(sock):
        try:
            host, port = sock.getpeername()[:2]
        except OSError:
            return "?"
        return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)

    # ---- housekeeping ----------------------------------------------------------------------

    def cron(self):
        """Every 100 ms: handshakes too slow, closing connections whose client reads nothing."""
        now = time.monotonic()
        for p in list(self.pumps.values()):
            if p.plain is None and now - p.since > HANDSHAKE_TIMEOUT:
                self.handshake_failed(p, TimeoutError("no handshake within %ds" % HANDSHAKE_TIMEOUT))
            elif p.closing and now - p.since > CLOSE_TIMEOUT:
                self.close(p)

    def close_all(self):
        for p in list(self.pumps.values()):
            self.close(p)

    def info(self):
        return {"tls_handshakes": self.handshakes, "tls_handshake_failures": self.failures,
                "tls_pumped": sum(1 for p in self.pumps.values() if p.plain is not None)}
