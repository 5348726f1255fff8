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
  and writes the records itself), with no process in between. Commands of another worker's
  queues go there over a peer link: the connection cannot follow its queue.

Each connection's TLS is a TlsPump (disque/workers/tls_pump.py, the job links' too): a
read is one recv, as for plaintext, then every whole record is decrypted; a write makes
records, sent by us, so OpenSSL never has a write to retry and records made but not sent
move with the connection between the two places.
"""
import logging
import select
import socket
import time

from disque.contracts import connection_handover as handover_msg
from disque.contracts.tls_settings import HANDSHAKE_TIMEOUT, TlsConfigError, reason, server_context
from disque.workers.tls_pump import TLS_ERRORS, TlsPump

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
        except OSError:             # BlockingIOError included: nothing more now
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


class Pump:
    """One TLS connection of this worker while it is not served here (handshaking or pumped)."""
    __slots__ = ("id", "sock", "fd", "tls", "addr", "plain", "to_sock", "to_plain", "since",
                 "closing", "shaken")

    def __init__(self, pid, sock, tls, addr):
        self.id = pid
        self.sock = sock                # the plain TCP socket
        self.fd = sock.fileno()
        self.tls = tls                  # its TlsPump
        self.addr = addr                # "host:port", for the log
        self.plain = None               # our end of the socketpair while pumped
        self.to_sock = bytearray()      # records for the client the socket did not take yet
        self.to_plain = bytearray()     # the client's plaintext, not yet taken by the front-end
        self.since = time.monotonic()   # accepted (handshake deadline) or closing since
        self.closing = False            # the front-end closed: the last replies, then close
        self.shaken = False


class TlsClients:
    """Needs the served loop (ServedClients: ep, extra_fds, channel, adopt). Offers:
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
        addr = handover_msg.peer_text(msg.host, msg.port)
        if self.ctx is None:
            log.warning("TLS connection from %s closed: this worker has no TLS settings yet", addr)
            sock.close()
            return
        sock.setblocking(False)
        self.next_id += 1
        p = self.pumps[self.next_id] = Pump(self.next_id, sock, TlsPump(self.ctx, True), addr)
        self.watch(p.fd, EPOLLIN, lambda ev: self.on_sock(p, ev))

    def shake(self, p):
        try:
            done = p.tls.handshake()
        except TLS_ERRORS as e:
            self.flush_sock(p)          # the alert that says why, when there is one
            self.handshake_failed(p, e)
            return
        if not done:
            self.flush_sock(p)
            return
        p.shaken = True
        self.handshakes += 1
        log.debug("TLS connection from %s: %s, %s", p.addr, p.tls.version(), p.tls.cipher_name())
        self.to_front_end(p)

    def handshake_failed(self, p, e):
        self.failures += 1
        why = reason(e)
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
            self.served.channel.send(handover_msg.TlsConn.encode(p.id, host.strip("[]"), int(port)),
                                     theirs.fileno())
        except OSError:
            self.close(p)
            return
        finally:
            theirs.close()
        self.watch(plain.fileno(), EPOLLIN, lambda ev: self.on_plain(p, ev))
        self.decrypt(p)         # the first command may have come with the handshake's end

    def on_sock(self, p, ev):
        if ev & EPOLLOUT:
            self.flush_sock(p)
        if ev & ~EPOLLOUT and p.id in self.pumps:
            if len(p.to_plain) >= LIMIT:
                return
            try:
                data = p.sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                if not p.shaken:
                    self.handshake_failed(p, ConnectionError("the client closed it"))
                    return
                self.flush_plain(p)
                self.close(p)           # the front-end sees its end close: client gone
                return
            p.tls.feed(data)
            if p.shaken:
                self.decrypt(p)
            else:
                self.shake(p)

    def decrypt(self, p):
        while p.tls.has_input():
            try:
                data = p.tls.read(CHUNK)
            except TLS_ERRORS:          # a bad record
                data = b""
            if data is None:
                break                   # the rest of a record is still on its way
            if not data:                # close_notify
                self.flush_plain(p)
                self.close(p)
                return
            p.to_plain += data
        self.flush_plain(p)
        self.flush_sock(p)              # anything OpenSSL wrote back (a key update)

    def flush_plain(self, p):
        if p.plain is None:
            return
        if self.send_kept(p, p.plain, p.to_plain):
            self.set_masks(p)

    def send_kept(self, p, sock, buf):
        """Send what `buf` holds and keep the rest; False: the socket is broken, p closed."""
        if buf:
            try:
                n = sock.send(buf)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self.close(p)
                return False
            del buf[:n]
        return True

    def on_plain(self, p, ev):
        if ev & EPOLLOUT:
            self.flush_plain(p)
        if ev & ~EPOLLOUT and p.plain is not None:
            while len(p.to_sock) < LIMIT:
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
                try:
                    p.to_sock += p.tls.encrypt(data)
                except TLS_ERRORS:
                    self.close(p)
                    return
                if len(data) < CHUNK:
                    break
            self.flush_sock(p)

    def flush_sock(self, p):
        p.to_sock += p.tls.take()
        if not self.send_kept(p, p.sock, p.to_sock):
            return
        if p.closing and not p.to_sock:
            self.close(p)
            return
        self.set_masks(p)

    def set_masks(self, p):
        if p.id not in self.pumps:
            return
        sock_mask = (EPOLLIN if len(p.to_plain) < LIMIT and not p.closing else 0) | \
            (EPOLLOUT if p.to_sock else 0)
        self.watch(p.fd, sock_mask, self.extra_fds[p.fd])
        if p.plain is not None:
            plain_mask = (EPOLLIN if len(p.to_sock) < LIMIT and not p.closing else 0) | \
                (EPOLLOUT if p.to_plain else 0)
            self.watch(p.plain.fileno(), plain_mask, self.extra_fds[p.plain.fileno()])

    def close(self, p):
        self.pumps.pop(p.id, None)
        self.unwatch(p.fd)
        if p.plain is not None:
            self.unwatch(p.plain.fileno())
            p.plain.close()
            p.plain = None
        p.sock.close()

    # ---- served: this worker serves it -----------------------------------------------------

    def serve(self, h, fd):
        """HANDOFF of pump h.pump (`fd`: the front-end's end of its socketpair): serve it here."""
        theirs = socket.socket(fileno=fd)
        p = self.pumps.get(h.pump)
        if p is None or p.plain is None or p.closing:
            theirs.close()      # it ended meanwhile: the front-end forgets it
            self.served.channel.send(handover_msg.Gone.encode(h.client))
            return
        theirs.setblocking(False)
        # replies the front-end wrote before it let go, then input it did not read
        replies = drain(p.plain)
        unparsed = h.unparsed + drain(theirs) + bytes(p.to_plain)
        theirs.close()
        try:
            cipher = p.tls.encrypt(replies) if replies else p.tls.take()
        except TLS_ERRORS:
            self.close(p)
            self.served.channel.send(handover_msg.Gone.encode(h.client))
            return
        pending = bytes(p.to_sock + cipher)
        self.unwatch(p.plain.fileno())
        p.plain.close()
        p.plain = None
        self.unwatch(p.fd)
        del self.pumps[p.id]
        self.served.adopt(h.client, p.sock, h.resp3, unparsed, (p.tls, p.id, pending or None))

    def pump_again(self, c):
        """A served TLS connection goes back to the front-end: the socket it gets (the
        caller sends it with the HANDBACK and closes it). Records not yet sent go first."""
        p = Pump(c.pump, c.sock, c.tls_pump, self.addr_of(c.sock))
        p.shaken = True
        if c.tls_pending:
            p.to_sock += c.tls_pending
        plain, theirs = socket.socketpair()
        plain.setblocking(False)
        p.plain = plain
        self.pumps[p.id] = p
        self.watch(p.fd, EPOLLIN, lambda ev: self.on_sock(p, ev))
        self.watch(plain.fileno(), EPOLLIN, lambda ev: self.on_plain(p, ev))
        self.flush_sock(p)
        return theirs

    @staticmethod
    def addr_of(sock):
        try:
            host, port = sock.getpeername()[:2]
        except OSError:
            return "?"
        return handover_msg.peer_text(host, port)

    # ---- housekeeping ----------------------------------------------------------------------

    def cron(self):
        """Every 100 ms: handshakes too slow, closing connections whose client reads nothing."""
        now = time.monotonic()
        for p in list(self.pumps.values()):
            if not p.shaken and now - p.since > HANDSHAKE_TIMEOUT:
                self.handshake_failed(p, TimeoutError("no handshake within %ds" % HANDSHAKE_TIMEOUT))
            elif p.closing and now - p.since > CLOSE_TIMEOUT:
                self.close(p)

    def close_all(self):
        for p in list(self.pumps.values()):
            self.close(p)
