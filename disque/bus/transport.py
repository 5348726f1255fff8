"""ZeroMQ transport of the cluster bus (port + 10000).

Each node binds one ROUTER; to talk to a peer it connects one DEALER whose identity is its
own node ID, so the receiving ROUTER knows the sender of every frame. DEALERs use
ZMQ_IMMEDIATE: a message for a peer without a live connection is dropped, never queued
(bus messages are best effort, SPEC 10.4); ZeroMQ reconnects by itself.

With a cluster secret (disque.bus.secret, docs/security.md) every socket speaks CURVE: the
ROUTER serves with the secret's keypair and asks the ZAP handler (disque.bus.guard) about
each client key; a DEALER expects the same keypair on the other side. With a previous
secret too, each link holds one DEALER per secret and sends on the one whose handshake
completed (ZMQ_IMMEDIATE makes the others refuse with EAGAIN): peers serving either secret
stay reachable while a rotation restarts nodes one by one.
"""
import time

import zmq

from disque.bus.guard import BusGuard

RECONNECT_IVL_MS = 100
JOBS_TYPE_BYTE = b"\x10"    # msgpack [16, ...]: a JOBS frame (disque.contracts.bus_messages.JOBS)
RECONNECT_IVL_MAX_MS = 1000


SPARE_RECONNECT_IVL_MS = 1000  # a DEALER with the other secret retries slower: it is the fallback


class Link:
    """The outgoing link to one node: `sock` is the DEALER last seen working, `spares` the
    DEALERs holding the other secrets' keys (only while a previous secret is configured)."""
    __slots__ = ("sock", "endpoint", "spares", "created", "sent_at")

    def __init__(self, sock, endpoint, spares):
        self.sock = sock
        self.endpoint = endpoint
        self.spares = spares
        self.created = self.sent_at = time.monotonic()

    def send_spare(self, data):
        """The chosen DEALER has no completed connection: try the others, keep what works."""
        for i, spare in enumerate(self.spares):
            try:
                spare.send(data, zmq.NOBLOCK)
            except zmq.Again:
                continue
            self.spares[i], self.sock = self.sock, spare
            return True
        return False

    def close(self, linger_ms=0):
        self.sock.close(linger=linger_ms)
        for spare in self.spares:
            spare.close(linger=0)


class Transport:
    def __init__(self, ctx, my_id, bind_addrs, bus_port, keys=None):
        self.ctx = ctx
        self.my_id = my_id
        self.keys = keys            # disque.bus.secret.BusKeys, None for an open bus
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)   # a restarted peer takes its identity back
        if keys is not None:
            self.router.setsockopt(zmq.CURVE_SERVER, 1)
            self.router.setsockopt(zmq.CURVE_SECRETKEY, keys.serving.secret)
        # before bind: the ZAP handler must exist when the first client arrives
        self.guard = BusGuard(ctx, self.router, bus_port, keys)
        try:
            for addr in bind_addrs:
                host = "[%s]" % addr if ":" in addr else addr
                if ":" in addr:
                    self.router.setsockopt(zmq.IPV6, 1)
                self.router.bind("tcp://%s:%d" % (host, bus_port))
        except zmq.ZMQError:
            # closed here: a socket left open would hold the context's term() forever, and
            # the node would hang instead of exiting with the reason (a busy bus port)
            self.guard.close()
            self.router.close(linger=0)
            raise
        self.links = {}            # node id -> (DEALER, "ip:port")
        self.sent = 0
        self.received = 0
        self.dropped = 0

    def fileno(self):
        return self.router.getsockopt(zmq.FD)

    def connect(self, node_id, ip, bus_port):
        """(Re)connect the outgoing link to a node; no-op when already linked there."""
        endpoint = "%s:%d" % (ip, bus_port)
        link = self.links.get(node_id)
        if link is not None:
            if link.endpoint == endpoint:
                return
            self.disconnect(node_id)
        pairs = self.keys.pairs if self.keys is not None else [None]
        socks = [self.dealer(ip, bus_port, pair, RECONNECT_IVL_MS if i == 0 else
                             SPARE_RECONNECT_IVL_MS) for i, pair in enumerate(pairs)]
        self.links[node_id] = Link(socks[0], endpoint, socks[1:])

    def dealer(self, ip, bus_port, keypair, reconnect_ivl):
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, self.my_id.encode())
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.IMMEDIATE, 1)
        s.setsockopt(zmq.SNDHWM, 10000)
        s.setsockopt(zmq.RECONNECT_IVL, reconnect_ivl)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, max(reconnect_ivl, RECONNECT_IVL_MAX_MS))
        if keypair is not None:
            # the same keypair on both ends: the server key we expect is our own public key
            s.setsockopt(zmq.CURVE_SERVERKEY, keypair.public)
            s.setsockopt(zmq.CURVE_PUBLICKEY, keypair.public)
            s.setsockopt(zmq.CURVE_SECRETKEY, keypair.secret)
        host = "[%s]" % ip if ":" in ip else ip
        if ":" in ip:
            s.setsockopt(zmq.IPV6, 1)
        s.connect("tcp://%s:%d" % (host, bus_port))
        return s

    def renew(self, node_id, older_than_ms):
        """Close the link to a node and make it again, when it is older than older_than_ms.
        A TCP connection whose packets were dropped stays open but stalled (retransmissions
        back off to minutes, and ZeroMQ sees no error): a new one works as soon as the path
        does. True when renewed."""
        link = self.links.get(node_id)
        if link is None or (time.monotonic() - link.created) * 1000 < older_than_ms:
            return False
        ip, port = link.endpoint.rsplit(":", 1)
        self.disconnect(node_id)
        self.connect(node_id, ip, int(port))
        return True

    def relink_stuck(self, node_id, stuck_ms):
        """Make the link to a node again when nothing could be sent on it for stuck_ms (it
        waits in ZeroMQ's reconnect back-off): not a link that is only full for a moment,
        whose queue would be thrown away with it. True when renewed."""
        link = self.links.get(node_id)
        if link is None or (time.monotonic() - link.sent_at) * 1000 < stuck_ms:
            return False
        return self.renew(node_id, 0)

    def rename(self, old_id, new_id):
        if old_id in self.links:
            self.links[new_id] = self.links.pop(old_id)

    def disconnect(self, node_id):
        link = self.links.pop(node_id, None)
        if link is not None:
            link.close()

    def send(self, node_id, data):
        link = self.links.get(node_id)
        if link is None:
            self.dropped += 1
            return False
        try:
            link.sock.send(data, zmq.NOBLOCK)
        except zmq.Again:
            if not (link.spares and link.send_spare(data)):
                self.dropped += 1
                return False
        self.sent += 1
        link.sent_at = time.monotonic()
        return True

    def recv_all(self, limit=10000):
        """[(sender identity, data, peer ip)] of everything readable now."""
        out = []
        router = self.router
        events = router.getsockopt
        # ask EVENTS instead of reading until zmq.Again: an exception per read burst cost
        # more than the read itself (profiled on the replication path)
        while len(out) < limit and events(zmq.EVENTS) & zmq.POLLIN:
            try:
                frames = router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if len(frames) != 2:
                continue
            peer = ""
            if frames[1].bytes[1:2] != JOBS_TYPE_BYTE:
                # the peer address teaches a node its own IP in MEET/PING handling; asking
                # for it costs a getpeername() per frame, skipped for job batches
                try:
                    peer = frames[1].get("Peer-Address")
                except (zmq.ZMQError, AttributeError):
                    peer = ""
            out.append((frames[0].bytes, frames[1].bytes, peer or ""))
        self.received += len(out)
        return out

    def close(self, linger_ms=0):
        """`linger_ms`: how long what is queued for each node may still take to leave."""
        for node_id in list(self.links):
            link = self.links.pop(node_id)
            link.close(linger_ms)
        self.guard.close()
        self.router.close(linger=0)
