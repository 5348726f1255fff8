"""`worker-link zmq`: the front-end <-> worker link over ZeroMQ (disque/workers/link.py
has the default, Unix socketpairs, and what both carry). A module of its own so that a node
on the default link never imports ZeroMQ before it forks its workers."""
import zmq

from disque.contracts import worker_link as link_msg
from disque.workers.link_base import HeldSends, poll_waiter


class ZmqLinks(HeldSends):
    """Front-end ROUTER; each worker connects a DEALER with identity b"w<k>"."""
    kind = "zmq"

    def __init__(self, nworkers, ipc_dir):
        super().__init__(nworkers)
        self.ctx = zmq.Context(1)
        self.endpoint = "ipc://%s/workers" % ipc_dir
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.setsockopt(zmq.RCVHWM, 0)
        self.router.bind(self.endpoint)
        self.idents = [b"w%d" % w for w in range(nworkers)]
        self.deliver = None

    def worker_args(self, w):
        return "zmq:" + self.endpoint, "", ()

    def after_spawn(self, w):
        pass

    def wait_ready(self, timeout_ms):
        ready = []
        if self.router.poll(timeout_ms):
            while True:
                try:
                    ident, msg = self.router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if msg == link_msg.READY and ident in self.idents:
                    ready.append(self.idents.index(ident))
        return ready

    def start(self, loop, deliver, flush_replies, lost):
        self.deliver = deliver
        self.flush_replies = flush_replies
        loop.add_reader(self.router.getsockopt(zmq.FD), self.readable)

    def readable(self):
        router = self.router
        deliver = self.deliver
        while True:
            try:
                frames = router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 2:
                if frames[1] == link_msg.READY:
                    w = self.idents.index(frames[0]) if frames[0] in self.idents else -1
                    if w >= 0 and self.starting[w]:
                        self.starting[w] = False
                        self.on_ready(w)
                    continue
                deliver(frames[1])
        self.flush_replies()

    def send_now(self, w, payload):
        self.router.send_multipart([self.idents[w], payload])

    def hold(self, w):
        self.start_holding(w)

    def poll_now(self):
        # ZeroMQ's FD is edge-triggered: after sending, replies may already be waiting
        self.readable()

    def close(self):
        self.router.close(linger=0)
        self.ctx.term()


class WorkerZmqLink:
    def __init__(self, endpoint, index):
        self.ctx = zmq.Context(1)
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, b"w%d" % index)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.connect(endpoint)
        self.closed = False
        self.channel = None         # no hand-over over ZeroMQ: connections stay in the front-end

    def waiter(self, timer_fd):
        """As WorkerUnixLink.waiter, over a ZeroMQ poller (it reports the socket itself)."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(timer_fd, zmq.POLLIN)
        return poll_waiter(poller, self.sock)

    def recv_all(self):
        out = []
        while True:
            try:
                out.append(self.sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                return out

    def send(self, payload):
        self.sock.send(payload)

    def close(self):
        self.sock.close(linger=500)
        self.ctx.term()
