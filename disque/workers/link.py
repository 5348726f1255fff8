"""The front-end <-> worker link: batches of msgpack bytes, two interchangeable transports.

* ``zmq``  - a ZeroMQ ROUTER in the front-end, one DEALER per worker, over ipc://
  (disque/workers/zmq_link.py, imported only then).
* ``unix`` - one Unix socketpair per worker, frames of <u32 length><payload>.

Both carry the same messages (disque.contracts.worker_link). Measured on this 2-core VM, one
ping-pong costs 105 us and ~90 us of CPU over ZeroMQ (its I/O threads add two thread
hand-offs per side) against 29 us and ~22 us over a socketpair; for clients that send one
command at a time that difference is most of a command's cost, so ``unix`` is the default
(``worker-link zmq`` selects ZeroMQ). docs/design.md has the figures.
"""
import logging
import select
import socket

from disque.contracts import worker_link as link_msg
from disque.contracts.connection_handover import HandoverChannel, Peer
from disque.contracts.worker_link import RECV_SIZE, FrameReader, FrameTooLong, frame
from disque.workers.link_base import HeldSends, poll_waiter

log = logging.getLogger("disque")


# ---- front-end side -------------------------------------------------------------------

class UnixLinks(HeldSends):
    """Front-end ends of the socketpairs, driven by the asyncio loop."""
    kind = "unix"

    def __init__(self, nworkers):
        super().__init__(nworkers)
        self.pairs = []
        self.channel_pairs = []     # the hand-over channels (connection_handover.py)
        for _ in range(nworkers):
            # default buffer sizes on purpose: 4 MiB buffers measured ~45 us slower per
            # round trip here; large batches simply take several reads
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.pairs.append((a, b))
            self.channel_pairs.append(self.new_channel())
        # links between workers (disque/workers/peer_links.py): (w, v) -> w's end of the
        # pair it shares with v, kept here until worker w is spawned with it
        self.peer_ends = {}
        for w in range(nworkers):
            for v in range(w + 1, nworkers):
                self.peer_ends[(w, v)], self.peer_ends[(v, w)] = socket.socketpair(
                    socket.AF_UNIX, socket.SOCK_STREAM)
        self.readers = [FrameReader() for _ in range(nworkers)]
        self.on_handover = None     # on_handover(w): worker w's channel is readable
        self.pending_out = [bytearray() for _ in range(nworkers)]
        self.loop = None
        self.deliver = None
        self.lost = None

    @staticmethod
    def new_channel():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return HandoverChannel(a), b

    def channel(self, w):
        return self.channel_pairs[w][0]

    def post(self, w, msg, fd=None):
        """A message (and a socket) for worker w's hand-over channel, never blocking:
        what its socket does not take now goes when it is writable, in order."""
        channel = self.channel(w)
        had_backlog = bool(channel.backlog)
        if not channel.post(msg, fd) and not had_backlog:
            self.loop.add_writer(channel.fileno(), self.channel_writable, w, channel)

    def channel_writable(self, w, channel):
        try:
            done = channel.post_more()
        except OSError:             # the worker died: its channel is replaced (hold)
            done = True
        if done:
            self.loop.remove_writer(channel.fileno())

    def worker_args(self, w):
        """(link spec, peers spec, fds) that hand worker w its end of the link
        (disque/worker_spawn.py, WorkerArgs)."""
        fd = self.pairs[w][1].fileno()
        cfd = self.channel_pairs[w][1].fileno()
        peers = {v: s.fileno() for (x, v), s in self.peer_ends.items() if x == w}
        spec = ",".join("%d:%d" % (v, f) for v, f in sorted(peers.items()))
        return "unix:%d,%d" % (fd, cfd), spec, (fd, cfd) + tuple(peers.values())

    def after_spawn(self, w):
        self.pairs[w][1].close()        # the worker holds its own copy
        self.channel_pairs[w][1].close()
        for key in [k for k in self.peer_ends if k[0] == w]:
            self.peer_ends.pop(key).close()

    def wait_ready(self, timeout_ms):
        """Blocking, at startup only: return the worker indexes that said READY."""
        ready = []
        poller = select.poll()
        fds = {}
        for w, (a, _) in enumerate(self.pairs):
            poller.register(a.fileno(), select.POLLIN)
            fds[a.fileno()] = w
        for fd, _ in poller.poll(timeout_ms):
            w = fds[fd]
            msgs, _ = self.readers[w].recv_from(self.pairs[w][0])
            for msg in msgs:
                if msg == link_msg.READY:
                    ready.append(w)
        return ready

    def start(self, loop, deliver, flush_replies, lost):
        """Hand the sockets to the event loop; deliver(payload) gets each message."""
        self.loop = loop
        self.deliver = deliver
        self.flush_replies = flush_replies
        self.lost = lost
        for w, (a, _) in enumerate(self.pairs):
            a.setblocking(False)
            loop.add_reader(a.fileno(), self.readable, w)
            loop.add_reader(self.channel(w).fileno(), self.channel_readable, w)

    def channel_readable(self, w):
        if self.on_handover is not None:
            self.on_handover(w)
        else:
            self.channel(w).receive()

    def readable(self, w):
        sock = self.pairs[w][0]
        reader = self.readers[w]
        deliver = self.deliver
        while True:
            try:
                msgs, n = reader.recv_from(sock)
            except (BlockingIOError, InterruptedError):
                break
            except FrameTooLong as e:
                log.error("Link from worker %d closed: %s", w, e)
                n = 0
            except OSError:
                n = 0
            if not n:
                self.loop.remove_reader(sock.fileno())
                self.lost(w)
                break
            if self.starting[w] and msgs and msgs[0] == link_msg.READY:
                self.starting[w] = False
                msgs = msgs[1:]
                self.on_ready(w)
            for msg in msgs:
                deliver(msg)
            if n < RECV_SIZE:
                break           # drained: the loop calls again when more arrives
        self.flush_replies()

    # ---- a worker that died (disque.worker_restart) ----

    def hold(self, w):
        """Keep what is sent to worker w until release(w); forget its dead socket and make
        the pair the next process of worker w gets (worker_args)."""
        self.start_holding(w)
        a, b = self.pairs[w]
        try:
            self.loop.remove_reader(a.fileno())
        except (ValueError, OSError):
            pass
        if self.pending_out[w]:
            self.loop.remove_writer(a.fileno())
        self.pending_out[w] = bytearray()
        a.close()
        b.close()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pairs[w] = (a, b)
        self.readers[w] = FrameReader()
        a.setblocking(False)
        self.loop.add_reader(a.fileno(), self.readable, w)
        old, old_b = self.channel_pairs[w]
        try:
            self.loop.remove_reader(old.fileno())
            if old.backlog:
                self.loop.remove_writer(old.fileno())
        except (ValueError, OSError):
            pass
        old.close()
        old_b.close()
        self.channel_pairs[w] = self.new_channel()
        self.loop.add_reader(self.channel(w).fileno(), self.channel_readable, w)
        # new links between worker w's next process and every other worker: their ends
        # go to them now over their channels (the old ones closed with the dead process)
        for v in range(len(self.pairs)):
            if v == w:
                continue
            stale = self.peer_ends.pop((w, v), None)
            if stale is not None:
                stale.close()
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.peer_ends[(w, v)] = mine
            try:
                self.post(v, Peer.encode(w), theirs.fileno())
            except OSError:
                pass                    # v is gone too: it gets new links when it restarts
            theirs.close()

    def send_now(self, w, payload):
        data = frame(payload)
        out = self.pending_out[w]
        if out:
            out += data
            return
        sock = self.pairs[w][0]
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:             # the worker died: readable() reports it
            return
        if n < len(data):
            out += data[n:]
            self.loop.add_writer(sock.fileno(), self.writable, w)

    def writable(self, w):
        sock = self.pairs[w][0]
        out = self.pending_out[w]
        try:
            n = sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:             # the worker died: readable() reports it
            self.loop.remove_writer(sock.fileno())
            return
        del out[:n]
        if not out:
            self.loop.remove_writer(sock.fileno())

    def poll_now(self):
        pass            # level-triggered sockets: the loop calls readable() itself

    def close(self):
        for a, b in self.pairs:
            a.close()
            b.close()
        for a, b in self.channel_pairs:
            a.close()
            b.close()
        for s in self.peer_ends.values():
            s.close()


def front_end_links(kind, nworkers, private_dir):
    """The front-end's ends of the worker links; `private_dir()` makes (once) the directory
    of the ZeroMQ link's endpoint."""
    if kind == "zmq":
        from disque.workers.zmq_link import ZmqLinks    # ZeroMQ only for worker-link zmq
        return ZmqLinks(nworkers, private_dir())
    return UnixLinks(nworkers)


# ---- worker side ----------------------------------------------------------------------

class WorkerUnixLink:
    def __init__(self, fd, channel_fd=None):
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(True)
        self.reader = FrameReader()
        self.closed = False
        # the hand-over channel (disque/contracts/connection_handover.py), when the
        # front-end hands connections over (connection-affinity yes)
        self.channel = None
        if channel_fd is not None:
            self.channel = HandoverChannel(socket.socket(fileno=channel_fd))

    def waiter(self, timer_fd):
        """wait(block) -> (link readable, timer fired); block=False only polls."""
        poller = select.poll()
        link_fd = self.sock.fileno()
        poller.register(link_fd, select.POLLIN)
        poller.register(timer_fd, select.POLLIN)
        return poll_waiter(poller, link_fd)

    def recv_all(self):
        """Every complete message available now (never blocks)."""
        out = []
        while True:
            try:
                msgs, n = self.reader.recv_from(self.sock, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except FrameTooLong as e:
                log.error("Link from the front-end closed: %s", e)
                n = 0
            except OSError:
                n = 0                   # reset: the front-end is gone (killed)
            if not n:
                self.closed = True
                break
            out.extend(msgs)
            if n < RECV_SIZE:
                break
        return out

    def send(self, payload):
        try:
            self.sock.sendall(frame(payload))
        except OSError:
            # the front-end is gone (killed): the worker loop ends on `closed` and logs it
            self.closed = True

    def close(self):
        self.sock.close()
        if self.channel is not None:
            self.channel.close()


def worker_link(spec, index):
    kind, _, arg = spec.partition(":")
    if kind == "unix":
        fd, _, channel_fd = arg.partition(",")
        return WorkerUnixLink(int(fd), int(channel_fd) if channel_fd else None)
    if kind == "zmq":
        from disque.workers.zmq_link import WorkerZmqLink
        return WorkerZmqLink(arg, index)
    raise ValueError("unknown link %r" % spec)
