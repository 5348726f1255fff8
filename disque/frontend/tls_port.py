"""The TLS client port, front-end half (docs/design.md, "TLS on the client port";
docs/security.md, "TLS on the client port").

The front-end accepts on `tls-port` and gives each connection, before any byte of it is
read, to a worker that has the TLS settings (the one its host's last connection settled
on, else the next in turn): that worker runs the connection's TLS for as long as it lives
(disque/workers/tls_clients.py). After the
handshake the worker sends back the plaintext end of a socketpair (TLS_CONN), which the
front-end serves as it serves an accepted socket; handing the connection over names the
worker's pump (Handoff.pump), so the worker serves it itself, with no process in between.
"""
import logging
import socket
from collections import OrderedDict

from disque.contracts import connection_handover as handover_msg
from disque.contracts.tls_settings import (SETTINGS, TlsConfigError, https_context,
                                           server_context, settings_of)

log = logging.getLogger("disque.frontend")

ACCEPTS_PER_WAKE = 64
MAX_HINTS = 4096                # client addresses whose connections' worker is remembered


class TlsOrigin:
    """Client.tls of a TLS connection: the worker running its TLS and its pump there."""
    __slots__ = ("worker", "pump", "host", "addr")

    def __init__(self, worker, pump, host, addr):
        self.worker = worker
        self.pump = pump
        self.host = host
        self.addr = addr


class TlsPort:
    """Needs from the node (`fe`): cfg, loop, links (unix: channel(w), held, starting),
    nworkers, restarts.control, new_client, handover.push. Offers: start (the listening
    sockets), stop, connected (TLS_CONN), settled (the hand-over hook's hint), worker_ready,
    worker_lost, config_changed (CONFIG SET tls-*), info_fields; `https`, the metrics
    port's context, reloaded with the rest."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.settings = settings_of(cfg)       # the last that loaded (CONFIG SET restores them)
        self.enabled = bool(cfg.tls_port)
        self.https = None                       # the metrics port's context (metrics-tls yes)
        self.ready = [False] * fe.nworkers      # w has the settings: it may take connections
        self.next = 0
        # client host -> the worker its last TLS connection's commands went to: the next
        # connection from that host starts there (a producer host usually keeps its queues)
        self.hints = OrderedDict()
        self.hinted = 0                 # connections given to the worker of their hint
        self.listeners = []
        self.listening = False
        self.accepted = 0

    def start(self, socks):
        """Listen (the sockets were bound at start-up) once the workers have the settings."""
        if not self.enabled:
            return
        self.listeners = socks
        for w in range(self.fe.nworkers):
            self.worker_ready(w)

    def listen(self):
        """Accept once a worker can take connections (they wait in the backlog until then)."""
        if not self.listening and self.listeners:
            self.listening = True
            for s in self.listeners:
                self.fe.loop.add_reader(s.fileno(), self.accept, s)

    def stop(self):
        for s in self.listeners:
            if self.listening:
                self.fe.loop.remove_reader(s.fileno())
            s.close()
        self.listeners = []
        self.listening = False

    def worker_ready(self, w):
        """A worker (new or restarted) gets the settings, then connections."""
        if not self.enabled:
            return
        self.ready[w] = False

        def done(value):
            if value is True:
                self.ready[w] = True
                self.listen()
            else:
                log.warning("Worker %d cannot run TLS connections: %s", w, value)
        self.fe.restarts.control(w, "tls_config", self.settings, done)

    def worker_lost(self, w):
        if self.enabled:
            self.ready[w] = False

    def usable(self, w):
        links = self.fe.links
        return self.ready[w] and links.held[w] is None and not links.starting[w]

    def pick(self, host):
        """The worker of the host's hint, else the next in turn that can take it."""
        w = self.hints.get(host)
        if w is not None and self.usable(w):
            self.hinted += 1
            return w
        n = self.fe.nworkers
        for i in range(n):
            w = (self.next + i) % n
            if self.usable(w):
                self.next = w + 1
                return w
        return None

    def settled(self, origin, w):
        """A TLS connection's commands all went to worker w (the hand-over hook)."""
        hints = self.hints
        hints[origin.host] = w
        hints.move_to_end(origin.host)
        if len(hints) > MAX_HINTS:
            hints.popitem(last=False)

    def accept(self, listener):
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("Accepting a TLS connection: %s", e.strerror or e)
                return
            try:
                self.give(conn, peer)
            finally:
                conn.close()            # the worker holds its own copy

    def give(self, conn, peer):
        host, port = peer[0], peer[1]
        w = self.pick(host)
        if w is None:
            log.warning("TLS connection from %s closed: no worker can take it now",
                        handover_msg.peer_text(host, port))
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.cfg.tcp_keepalive:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        try:
            self.fe.links.post(w, handover_msg.TlsAccept.encode(host, port), conn.fileno())
            self.accepted += 1
        except OSError:
            pass

    def connected(self, w, msg, fd):
        """TLS_CONN: the handshake is done; serve the plaintext end like an accepted socket."""
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            return
        fe = self.fe
        origin = TlsOrigin(w, msg.pump, msg.host, handover_msg.peer_text(msg.host, msg.port))

        def client():
            c = fe.new_client()
            c.tls = origin
            return c
        loop = fe.loop

        async def adopt():
            try:
                await loop.connect_accepted_socket(client, sock)
            except Exception:
                log.exception("Cannot serve the TLS connection from %s", origin.addr)
                sock.close()
        loop.create_task(adopt())

    def config_changed(self, name):
        """CONFIG SET tls-*: a new context for the connections after the OK (an error keeps
        the old settings, which the caller's values are put back to); the metrics port's
        certificate is reloaded in place."""
        if name not in SETTINGS or not (self.enabled or self.https):
            return None
        settings = settings_of(self.cfg)
        try:
            if self.enabled:
                server_context(settings)
            if self.https is not None:
                https_context(settings)
        except TlsConfigError as e:
            for key, value in self.settings.items():
                setattr(self.cfg, key.replace("-", "_"), value)
            return b"-ERR %s\r\n" % str(e).encode()
        self.settings = settings
        log.info("TLS settings changed (%s): new connections use them", name)
        if self.https is not None:
            self.https.load_cert_chain(settings["tls-cert-file"], settings["tls-key-file"],
                                       password=settings["tls-key-file-pass"] or None)
        if self.enabled:
            self.fe.handover.push("tls_config", settings)
        return None

    def info_fields(self):
        """INFO server, on a node with a TLS port."""
        if not self.enabled:
            return []
        return [("tls_port", self.cfg.tls_port), ("tls_connections_accepted", self.accepted),
                ("tls_connections_hinted", self.hinted)]
