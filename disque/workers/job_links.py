"""Direct job links: a worker's job messages for another node go straight to the worker
there that owns them, over TCP, instead of worker -> front-end -> bus -> front-end ->
worker (docs/design.md, "Direct job links").

Each worker listens on a TCP port its front-end opened and keeps across worker restarts
(`--job-links FD`). The front-end tells the other nodes its workers' ports (bus message
LINKS) and pushes to its workers where the other nodes' workers listen (`links` in the
membership state). A worker connects to every worker of every node that has ports, and
sends on its own connections only: each direction of a pair of workers has its own
connection, so nothing needs matching.

The messages are disque/contracts/job_link.py's. The first frame on a connection is the
Hello (sender node id, receiver node id, receiver worker); the receiver refuses a hello
meant for another node or worker (a port reused after a restart). Every later one is a list
of [type, flags, payload] (bus_messages.JobMessage), as a JOBS bus frame carries. The receiver
checks each entry as its front-end checks a bus frame (disque/_fast/busrelay.pyx,
route_job_messages) and keeps what it owns.

A message with no link up (still connecting, refused, the node has no ports, DEBUG BUS)
goes on the bus through the front-end as before. The bus protocol already lives with lost
and reordered messages (a producer adds nodes, copies are confirmed, acks are resent), so
switching between the two paths needs no handshake.

On a secured cluster (`cluster-secret`) every link is TLS 1.3, both ends presenting the
certificate derived from the secret and requiring the peer's to be one derived from a secret
this node accepts (disque/contracts/job_link_tls.py; the front-end hands the derived files
over with `--job-links-tls DIR`, never the secret). Each TLS end is a TlsPump
(disque/workers/tls_pump.py, the client port's too): the socket stays a plain non-blocking
one, read with one recv per epoll event, decrypted until nothing whole is left and split
by the same C splitter (split_more); what is encrypted leaves by the same C write path as
plaintext (send_or_keep / send_kept, the unsent tail kept). The handshake runs from the same epoll
callbacks, then the same hello and frames. A peer whose handshake fails (no secret, another
one, plaintext) is closed before any byte of it is read as a frame, counted as refused and
logged once per address.
"""
import errno
import logging
import select
import socket

from disque._fast.joblinkpath import (TLS_READ_SIZE, InEvent, InLink, JobLinkPath, OutLink,
                                     monotonic_ms)
# the <u32 length><payload> frames, read and written in C (disque/_fast/frames.pyx)
from disque._fast.frames import frame, send_kept
from disque._fast.msgframe import Packer
from disque.contracts.job_link import HELLO  # noqa: F401  (for the tests' hand-made hellos)
from disque.contracts.job_link import VERSION, Hello
from disque.contracts.job_link_tls import contexts as tls_contexts
from disque.workers.tls_pump import TLS_ERRORS, TlsPump

log = logging.getLogger("disque.worker")

MAX_INBOUND = 1024              # connections accepted at once (each costs an fd)
RETRY_MS = 1000                 # a failed link is tried again after this
HELLO_MS = 5000                 # an inbound connection without a hello by then is closed
MAX_WARNED = 4096               # addresses whose refused TLS handshake was logged
EPOLLIN = select.EPOLLIN
EPOLLOUT = select.EPOLLOUT
packb = Packer().pack


class JobLinks(JobLinkPath):
    """Needs: the shard (its replication's on_bus and known nodes) and the served loop's
    epoll set and fd table (ServedCore.ep / extra_fds); on a secured cluster the directory
    of the TLS files. Offers: set_cluster, send (what has no link up comes back, for the
    bus), flush (after the AOF write), cron, info."""

    def __init__(self, index, nworkers, listener_fd, shard, ep, extra_fds, tls_dir=None):
        super().__init__(index, nworkers, shard, ep, extra_fds)
        self.listener = socket.socket(fileno=listener_fd)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        ep.register(listener_fd, EPOLLIN)
        extra_fds[listener_fd] = self.on_accept
        self.server_tls = self.client_tls = None
        self.warned = set()         # addresses whose failed TLS handshake was logged
        if tls_dir is not None:
            self.server_tls, self.client_tls = tls_contexts(tls_dir)
            self.rbuf = bytearray(TLS_READ_SIZE)
            self.secured = True

    # ---- membership ------------------------------------------------------------------

    def set_cluster(self, state):
        myid = state["myid"]
        if myid != self.myid:                   # CLUSTER RESET HARD: hellos carry the id
            self.myid = myid
            for link in list(self.links.values()):
                self.close_out(link)
            self.links = {}
        self.everyone = tuple(n for n in state["known"] if n != myid)
        self.drop = bool(state.get("drop"))
        endpoints = {node: (ip, tuple(ports), relinks)
                     for node, (ip, ports, relinks) in state.get("links", {}).items()}
        for key, link in list(self.links.items()):
            ep = endpoints.get(key[0])
            if ep is None or key[1] >= len(ep[1]) or (ep[0], ep[1][key[1]]) != link.addr:
                self.close_out(link)
                del self.links[key]
            elif ep[2] != link.relinks:
                # the bus made its link to that node again (its PONG was late, SPEC 10.5):
                # this connection may be stalled the same way; cron makes it again
                self.close_out(link)
                link.relinks = ep[2]
                link.failed_at = None
        self.boxes = {}
        if self.drop:
            return                              # every message to the bus, which drops it
        for node, (ip, ports, relinks) in endpoints.items():
            slots = self.boxes[node] = [None] * len(ports)
            for w, port in enumerate(ports):
                link = self.links.get((node, w))
                if link is None:
                    link = self.links[(node, w)] = OutLink(node, w, (ip, port), relinks)
                    self.connect(link)
                elif link.up:
                    slots[w] = link.box

    # ---- sending (send, flush, write_raw: JobLinkPath) ----------------------------

    def busy(self, node):
        """A link to `node` still holds output the socket has not taken: a copy sent there
        has not even left, and sending it again would queue a duplicate behind it."""
        per = self.boxes.get(node)
        if not per:
            return False
        for w in range(len(per)):
            link = self.links.get((node, w))
            if link is not None and link.up and link.out:
                return True
        return False

    # ---- outgoing connections --------------------------------------------------------

    def connect(self, link):
        ip, port = link.addr
        sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
        # the kernel gives it a source port from the ephemeral range, where a node's bus
        # port can be (port 25000: bus port 35000); with SO_REUSEADDR that node can still
        # open its bus on that port when it restarts (its listener sets it too)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setblocking(False)
        err = sock.connect_ex((ip, port))
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            link.failed_at = monotonic_ms()
            return
        link.sock = sock
        link.fd = sock.fileno()
        self.ep.register(link.fd, EPOLLOUT)
        self.extra_fds[link.fd] = lambda ev, link=link: self.on_out_event(link, ev)

    def on_out_event(self, link, ev):
        if not link.up and not link.shaking:
            if link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self.fail(link)
                return
            link.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.client_tls is not None:
                link.tls = TlsPump(self.client_tls, False)
                link.shaking = True
                self.ep.modify(link.fd, EPOLLIN)
                if not self.handshake_out(link):
                    self.fail(link)
                return
            self.link_up(link)
            return
        if ev & EPOLLOUT and link.out:
            if not self.drain(link):
                return
        if ev & ~EPOLLOUT:
            if self.client_tls is not None and self.read_out_tls(link):
                return
            # the peer never writes on this connection: readable means closed or broken
            self.fail(link)

    def link_up(self, link):
        link.up = True
        link.failed_at = None
        # a TLS handshake's last bytes may still wait to be sent (EPOLLOUT kept)
        self.ep.modify(link.fd, EPOLLIN | EPOLLOUT if link.out else EPOLLIN)
        slots = self.boxes.get(link.node)
        if slots is not None and link.w < len(slots):
            slots[link.w] = link.box
        self.write_frame(link, frame(packb(Hello.encode(VERSION, self.myid, link.node, link.w))))

    def drain(self, link):
        """EPOLLOUT: send what the socket did not take; False when the link failed."""
        before = len(link.out)
        left = send_kept(link.fd, link.out)
        if left < 0:
            self.fail(link)
            return False
        if left < before:
            link.moved_at = monotonic_ms()
        if not left:
            self.ep.modify(link.fd, EPOLLIN)
        return True

    def unwatch(self, fd):
        """Out of the worker's poll: before its socket closes."""
        self.extra_fds.pop(fd, None)
        try:
            self.ep.unregister(fd)
        except OSError:
            pass

    def close_out(self, link):
        if link.sock is not None:
            self.unwatch(link.fd)
            link.sock.close()
            link.sock = None
            link.fd = -1
        link.up = link.shaking = False
        link.tls = None
        link.out = bytearray()
        del link.box[:]
        slots = self.boxes.get(link.node)
        if slots is not None and link.w < len(slots):
            slots[link.w] = None

    def fail(self, link):
        """Lost or refused: what it held is lost (as on the bus); messages go to the bus
        until cron connects again."""
        self.close_out(link)
        link.failed_at = monotonic_ms()

    def cron(self):
        """Every 100 ms: links that failed RETRY_MS ago are tried again; connections that
        sent no hello within HELLO_MS are closed (idle ones must not use up MAX_INBOUND)."""
        now = monotonic_ms()
        for link in self.links.values():
            if link.sock is None and (link.failed_at is None or now - link.failed_at >= RETRY_MS):
                if not self.drop:
                    self.connect(link)
        for link in list(self.inbound.values()):
            if link.sender is None and now - link.since >= HELLO_MS:
                self.refuse(link, "no hello within %d ms" % HELLO_MS)

    # ---- incoming connections --------------------------------------------------------

    def on_accept(self, ev):
        for _ in range(64):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("Job link accept failed: %s", e)
                return
            if len(self.inbound) >= MAX_INBOUND:
                sock.close()
                continue
            sock.setblocking(False)
            if self.server_tls is None:
                link = InLink(sock, addr)
            else:
                link = InLink(sock, addr, shaking=True)
                link.tls = TlsPump(self.server_tls, True)
            self.inbound[link.fd] = link
            self.ep.register(link.fd, EPOLLIN)
            self.extra_fds[link.fd] = InEvent(self, link)

    # on_in_event, on_frames: JobLinkPath

    def refuse(self, link, what):
        self.refused += 1
        log.warning("Job link from %s closed: %s", peer_name(link.sock), what)
        self.close_in(link)

    # ---- TLS (a secured cluster) -----------------------------------------------------

    def handshake_out(self, link):
        """A step of the connecting end's handshake; False: it failed (the caller fails
        the link)."""
        try:
            done = link.tls.handshake()
        except TLS_ERRORS as e:
            self.tls_refused("to", link.addr, e)
            return False
        data = link.tls.take()
        if data:
            self.write_raw(link, data)
            if link.sock is None:       # write_raw failed it
                return True
        if done:
            link.shaking = False
            self.link_up(link)
        return True

    def read_out_tls(self, link):
        """Readable on the connecting end: the handshake's answers, then nothing but a
        refusal (TLS 1.3 tells a client that its certificate was refused after its own
        handshake is over) or the close. True: the link stays."""
        try:
            n = link.sock.recv_into(self.rbuf)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not n:
            return False
        link.tls.feed(memoryview(self.rbuf)[:n])
        if link.shaking:
            return self.handshake_out(link)
        try:
            while True:
                m = link.tls.read(TLS_READ_SIZE, self.rbuf)
                if m is None:
                    return True         # nothing whole: the link stays
                if not m:
                    return False        # close_notify
                # anything else is not meant to come: dropped
        except TLS_ERRORS as e:
            self.tls_refused("to", link.addr, e)
        return False

    # write_frame, on_in_event_tls: JobLinkPath

    def answer_handshake(self, link):
        """The accepting end's handshake flight: a few KB a fresh socket takes at once.
        False when it did not."""
        data = link.tls.take()
        if not data:
            return True
        try:
            return link.sock.send(data) == len(data)
        except OSError:
            return False

    def tls_refused(self, direction, addr, error):
        """A failed TLS handshake: a warning once per address, then debug lines."""
        ip = addr[0]
        reason = getattr(error, "reason", None) or str(error)
        line = ("Job link %s %s:%d refused: TLS handshake failed (%s): the peer has no "
                "cluster secret or another one" % (direction, ip, addr[1], reason))
        if ip in self.warned:
            log.debug(line)
            return
        if len(self.warned) >= MAX_WARNED:
            self.warned.clear()
        self.warned.add(ip)
        log.warning(line)

    def close_in(self, link):
        self.inbound.pop(link.fd, None)
        self.unwatch(link.fd)
        link.sock.close()

    def close_all(self):
        for link in self.links.values():
            self.close_out(link)
        for link in list(self.inbound.values()):
            self.close_in(link)

    def info(self):
        return {"port": self.port, "out_up": sum(1 for l in self.links.values() if l.up),
                "out": len(self.links), "in": len(self.inbound),
                "sent_msgs": self.sent_msgs, "sent_frames": self.sent_frames,
                "received_msgs": self.received_msgs, "received_frames": self.received_frames,
                "relayed_msgs": self.relayed_msgs, "refused": self.refused,
                "misrouted": self.misrouted, "tls": self.server_tls is not None}


def peer_name(sock):
    try:
        return "%s:%d" % sock.getpeername()[:2]
    except OSError:
        return "?"
