"""ZeroMQ transport of the cluster bus (port + 10000).

Each node binds one ROUTER; to talk to a peer it connects one DEALER whose identity is its
own node ID, so the receiving ROUTER knows the sender of every frame. DEALERs use
ZMQ_IMMEDIATE: a message for a peer without a live connection is dropped, never queued
(bus messages are best effort, SPEC 10.4); ZeroMQ reconnects by itself.
"""
import zmq

RECONNECT_IVL_MS = 100
JOBS_TYPE_BYTE = b"\x10"    # msgpack [16, ...]: a JOBS frame (disque.bus.messages.JOBS)
RECONNECT_IVL_MAX_MS = 1000


class Transport:
    def __init__(self, ctx, my_id, bind_addrs, bus_port):
        self.ctx = ctx
        self.my_id = my_id
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)   # a restarted peer takes its identity back
        for addr in bind_addrs:
            host = "[%s]" % addr if ":" in addr else addr
            if ":" in addr:
                self.router.setsockopt(zmq.IPV6, 1)
            self.router.bind("tcp://%s:%d" % (host, bus_port))
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
            if link[1] == endpoint:
                return
            self.disconnect(node_id)
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, self.my_id.encode())
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.IMMEDIATE, 1)
        s.setsockopt(zmq.SNDHWM, 10000)
        s.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        host = "[%s]" % ip if ":" in ip else ip
        if ":" in ip:
            s.setsockopt(zmq.IPV6, 1)
        s.connect("tcp://%s:%d" % (host, bus_port))
        self.links[node_id] = (s, endpoint)

    def rename(self, old_id, new_id):
        if old_id in self.links:
            self.links[new_id] = self.links.pop(old_id)

    def disconnect(self, node_id):
        link = self.links.pop(node_id, None)
        if link is not None:
            link[0].close(linger=0)

    def send(self, node_id, data):
        link = self.links.get(node_id)
        if link is None:
            self.dropped += 1
            return False
        try:
            link[0].send(data, zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1
            return False
        self.sent += 1
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

    def close(self):
        for node_id in list(self.links):
            self.disconnect(node_id)
        self.router.close(linger=0)
