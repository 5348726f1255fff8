# cython: language_level=3, boundscheck=True, wraparound=True
"""The per-message path of the direct job links (docs/design.md, "Direct job links"), in C:
a frame read, its messages routed to this worker's replication, and a turn's messages
grouped by link, framed and written. At one connection a replicated ADDJOB is a few
messages per wake-up of each worker, and the interpreter's frames per message were two
fifths of a replica's user time (docs/benchmarks.md, "Job links in C, measured per job").

`JobLinkPath` is the base class of disque/workers/job_links.py's `JobLinks`, which keeps
the rest (connecting, handshakes, accepting, the cron): the state the path reads is
declared here, so that both halves see one attribute. The link objects are C classes for
the same reason. On a secured cluster the records are made and read here too, through the
link's TlsPump (disque/workers/tls_pump.py). Bounds checks stay on: the links' bytes come
from other hosts."""
import logging
import time

from disque._fast.busrelay import FORWARD_COPIES
from disque.contracts import worker_link as link_msg
from disque.contracts.job_link import MAX_FRAME, MAX_HELLO, read_hello

from disque.workers.tls_pump import TLS_ERRORS
from ssl import SSLWantReadError, SSLZeroReturnError

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.errno cimport errno, EAGAIN, EINTR

from disque._fast cimport sysio
from disque._fast.ackpath cimport ShardAcks
from disque._fast.busrelay cimport group_by_link, route_job_messages
from disque._fast.frames cimport FRAMES_AGAIN, FRAMES_TOO_LONG, recv_frames, split_more
from disque._fast.loophooks cimport FdHandler, MessagesOut
from disque._fast.msgframe cimport framed_box, unpack_frame
from disque._fast.replcore cimport ReplicationCore
from disque._fast.sysio cimport c_recv

log = logging.getLogger("disque.worker")

cdef Py_ssize_t MAX_PENDING = 64 << 20     # output a peer does not take: above this the
cdef long long STALLED_MS = 2000            # link is dropped, once none of it has moved for this long
cdef int EPOLLIN = 0x001
cdef int EPOLLOUT = 0x004
TLS_READ_SIZE = 262144          # one TLS read's buffer (a record is at most 16 KiB)

cdef object encode_bus_out = link_msg.BusOut.encode


def monotonic_ms():
    return time.monotonic_ns() // 1000000


cdef class OutLink:
    """This worker's connection to worker `w` of node `node`."""
    cdef public bytes node
    cdef public int w
    cdef public tuple addr
    cdef public object sock
    cdef public int fd
    cdef public bint up
    cdef public bytearray out
    cdef public list box
    cdef public object failed_at
    cdef public bint shaking
    cdef public object tls
    cdef public object relinks
    cdef public long long moved_at

    def __init__(self, node, w, addr, relinks=0):
        self.node = node
        self.w = w
        self.addr = addr
        self.relinks = relinks      # the bus's count of stalled links to that node
        self.sock = None
        self.fd = -1
        self.up = False
        self.out = bytearray()      # what the socket did not take yet
        self.moved_at = 0           # ms when its output last moved (waiting output only)
        self.box = []               # this loop turn's [type, flags, payload] for it
        self.failed_at = None       # ms of the last failure, None: never tried or up
        self.shaking = False        # TLS handshake under way
        self.tls = None             # its TlsPump on a secured cluster


cdef class InLink:
    """A connection from a worker of another node."""
    cdef public object sock
    cdef public int fd
    cdef public bytearray buf
    cdef public object sender
    cdef public long long since
    cdef public long long misrouted
    cdef public bint shaking
    cdef public object addr
    cdef public object tls

    def __init__(self, sock, addr, shaking=False):
        self.sock = sock
        self.fd = sock.fileno()
        self.buf = bytearray()
        self.sender = None          # its node id, once its hello came
        self.since = monotonic_ms()
        self.misrouted = 0          # messages it sent that this worker does not own
        self.shaking = shaking      # TLS handshake under way
        self.addr = addr
        self.tls = None             # its TlsPump on a secured cluster


cdef class InEvent(FdHandler):
    """What the worker's poll calls in C for an inbound link's fd (ServedCore.extra_fds):
    its read, plaintext or TLS as the cluster is."""
    cdef JobLinkPath links
    cdef InLink link

    def __init__(self, JobLinkPath links, InLink link):
        self.links = links
        self.link = link

    cdef int on_events(self, unsigned int events) except -1:
        if self.links.secured:
            self.links.on_in_event_tls(self.link)
        else:
            self.links.on_in_event(self.link)
        return 0


cpdef relay_bus_out(ShardAcks shard, JobLinkPath links):
    """A turn's job messages (`shard.bus_out`): straight to the owning workers where a
    direct job link is up (in their boxes until `flush`), the rest, or all of them on a
    worker without links (`links` None), through the front-end onto the bus."""
    cdef list msgs = shard.bus_out
    if not msgs:
        return
    shard.replication.count_sent(msgs)
    rest = msgs if links is None else links.send(msgs)
    if rest:
        shard.out.append(encode_bus_out(rest))
    shard.bus_out = []


cdef class JobLinkPath(MessagesOut):
    """The path's state (set by JobLinks.__init__ and set_cluster) and its methods: send,
    bus_out, flush, messages_out (the served loop's turn), write_frame, on_in_event,
    on_in_event_tls, on_frames. Needs from the subclass: fail, refuse, close_in, and for
    TLS tls_refused and answer_handshake."""
    cdef public int index
    cdef public int nworkers
    cdef public object shard
    cdef public ReplicationCore replication
    cdef public object ep
    cdef public dict extra_fds
    cdef public bytes myid
    cdef public dict links             # (node id, w) -> OutLink
    cdef public dict boxes             # node id -> [OutLink.box while up, else None] per worker
    cdef public tuple everyone         # other known nodes: destinations None
    cdef public dict inbound           # fd -> InLink
    cdef public bint drop              # DEBUG BUS: this node is cut off the bus
    cdef public bint pending           # boxes hold something to flush
    cdef public bint secured           # frames are encrypted (write_frame) before write_raw
    cdef public bytearray rbuf         # a secured cluster's reads, and their plaintext
    cdef public long long sent_msgs, sent_frames, received_msgs, received_frames
    cdef public long long relayed_msgs # messages that went to the bus for want of a link
    cdef public long long refused      # inbound connections closed for bad input
    cdef public long long misrouted    # well-formed messages another worker owns: dropped

    def __init__(self, int index, int nworkers, shard, ep, dict extra_fds):
        self.index = index
        self.nworkers = nworkers
        self.shard = shard
        self.replication = shard.replication
        self.ep = ep
        self.extra_fds = extra_fds
        self.myid = shard.node_id
        self.links = {}
        self.boxes = {}
        self.everyone = ()
        self.inbound = {}

    # ---- sending ---------------------------------------------------------------------

    cpdef list send(self, list entries):
        """Put what has a link up in its box (sent by flush); returns the rest for the bus."""
        if not self.boxes:
            self.relayed_msgs += len(entries)
            return entries
        cdef list leftover = []
        group_by_link(entries, self.boxes, self.myid, self.everyone, leftover)
        self.pending = True
        self.relayed_msgs += len(leftover)
        return leftover

    cpdef bus_out(self):
        relay_bus_out(self.shard, self)

    cpdef flush(self):
        """After the AOF write: each box as one frame (a GOTJOB leaves after its copy's
        record is written, as on the bus)."""
        cdef OutLink link
        cdef list box
        cdef list full = None
        if not self.pending:
            return
        self.pending = False
        for link in self.links.values():
            if link.box and link.up:
                if full is None:
                    full = []
                full.append(link)   # written after the walk: a failing write drops its link
        if full is None:
            return
        for link in full:
            box = link.box
            data = framed_box(box)
            self.sent_msgs += len(box)
            self.sent_frames += 1
            del box[:]              # the same list stays in self.boxes
            self.write_frame(link, data)

    cpdef messages_out(self):
        """ServedCore.turn, after serving, with job messages to send and no AOF (the turn
        leaves a node with an AOF to the loop, which writes it before anything leaves)."""
        self.bus_out()
        self.flush()

    cdef int send_messages(self) except -1:
        self.messages_out()         # the served loop's call (loophooks.MessagesOut)
        return 0

    cpdef write_frame(self, OutLink link, bytes data):
        """A frame to a link: as it is, or as the records of its TLS session."""
        if self.secured:
            pump = link.tls         # TlsPump.encrypt, without its Python frame
            pump.sslobj.write(data)
            data = pump.out.read()
        self.write_raw(link, data)

    cpdef write_raw(self, OutLink link, bytes data):
        cdef int status = sysio.send_or_keep(link.fd, data, link.out)
        if status == sysio.OUT_KEPT:
            link.moved_at = monotonic_ms()
            self.ep.modify(link.fd, EPOLLIN | EPOLLOUT)
        elif status == sysio.OUT_BROKEN:
            self.fail(link)
        elif (status == sysio.OUT_QUEUED and len(link.out) > MAX_PENDING
                and monotonic_ms() - link.moved_at > STALLED_MS):
            # a peer that takes nothing; one that is still taking a big copy is left alone
            log.warning("Job link to %s worker %d: %d bytes not taken, dropped",
                        link.node[:8].decode(), link.w, len(link.out))
            self.fail(link)

    # ---- receiving -------------------------------------------------------------------

    cpdef on_in_event(self, InLink link):
        cdef list frames = []
        cdef Py_ssize_t got = recv_frames(link.fd, link.buf,
                                          MAX_HELLO if link.sender is None else MAX_FRAME,
                                          MAX_FRAME, frames, 0)
        if got == FRAMES_AGAIN:
            return
        if self.on_frames(link, frames, got) and not got:
            self.close_in(link)

    cpdef bint on_frames(self, InLink link, list frames, Py_ssize_t got) except -1:
        """A read's whole frames (those before a frame too long count); False: the link
        was closed (a bad frame, or one too long)."""
        for data in frames:
            if not self.on_frame(link, data):
                return False
        if got == FRAMES_TOO_LONG:
            self.refuse(link, "a frame too long" if link.sender
                        else "a first frame that is no hello")
            return False
        return True

    cdef bint on_frame(self, InLink link, data) except -1:
        try:
            msgs = unpack_frame(data)
        except Exception:
            self.refuse(link, "a frame that is not msgpack")
            return False
        if link.sender is None:
            hello = read_hello(msgs)
            if hello is None:
                self.refuse(link, "no hello")
                return False
            if hello.receiver != self.myid or hello.worker != self.index:
                # meant for a worker that listened on this port before (a node restarted,
                # its port reused): its messages are not ours to take
                self.refuse(link, "a hello for another worker")
                return False
            link.sender = hello.sender
            return True
        if type(msgs) is not list:
            self.refuse(link, "a frame that is not a list")
            return False
        self.received_frames += 1
        cdef ReplicationCore replication = self.replication
        sender = replication.node_ids.get(link.sender)
        if self.drop or sender is None or sender == self.myid:
            return True                 # cut off (DEBUG BUS), or not (yet) a node we know
        link.sender = sender            # the worker's object for that id (node_ids)
        cdef dict inbox = {}
        route_job_messages(msgs, link.sender, self.nworkers, inbox, FORWARD_COPIES, [])
        mine = inbox.pop(self.index, None)
        if mine:
            self.received_msgs += len(mine)
            replication.on_bus(mine)
        if inbox:
            # the sender picks the worker with the same owner(), so only a sender that
            # routes otherwise (a bug, another version) lands here: counted and said once
            # per link, as the bus drops what it cannot place
            n = sum([len(entries) for entries in inbox.values()])
            if not link.misrouted:
                log.warning("Job link from %s: %d message(s) for worker(s) %s dropped "
                            "(this is worker %d)", link.sender[:8].decode(), n,
                            sorted(inbox), self.index)
            link.misrouted += n
            self.misrouted += n
        return True

    cpdef on_in_event_tls(self, InLink link):
        """A secured link's read: one recv, then every whole record the BIO holds
        decrypted and split into frames (nothing waits where epoll cannot see it); each
        read's frames are handled before the next read, so the hello's length limit applies
        to the hello alone. The handshake's steps come here first."""
        cdef bytearray buf = self.rbuf
        cdef ssize_t n = c_recv(link.fd, PyByteArray_AS_STRING(buf), PyByteArray_GET_SIZE(buf), 0)
        if n < 0 and (errno == EAGAIN or errno == EINTR):
            return
        if n <= 0:
            self.close_in(link)
            return
        pump = link.tls         # TlsPump's feed, has_input and read, without their frames
        inc = pump.inc
        sslobj = pump.sslobj
        inc.write(memoryview(buf)[:n])
        if link.shaking:
            try:
                done = pump.handshake()
            except TLS_ERRORS as e:
                self.refused += 1
                self.tls_refused("from", link.addr, e)
                self.answer_handshake(link)     # the alert, if the socket takes it
                self.close_in(link)
                return
            if not self.answer_handshake(link):
                self.refuse(link, "a TLS handshake whose answer it does not read")
                return
            if not done:
                return
            link.shaking = False
        cdef list frames
        cdef Py_ssize_t got
        while inc.pending or sslobj.pending():
            try:
                m = sslobj.read(TLS_READ_SIZE, buf)
            except SSLWantReadError:
                return                  # a partial record: the rest comes with a later recv
            except SSLZeroReturnError:
                m = 0
            except TLS_ERRORS as e:
                self.refuse(link, "a TLS error (%s)" % (getattr(e, "reason", None) or e))
                return
            if not m:
                self.close_in(link)     # close_notify
                return
            frames = []
            got = split_more(link.buf, PyByteArray_AS_STRING(buf), m,
                             MAX_HELLO if link.sender is None else MAX_FRAME, MAX_FRAME, frames)
            if not self.on_frames(link, frames, got):
                return
