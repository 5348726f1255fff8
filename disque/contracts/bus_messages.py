"""Cluster bus messages (SPEC 10.2-10.4, carried as msgpack instead of the C header).

Every bus message is one ZeroMQ frame holding the msgpack list (Envelope)
    [type, sender_id, sender_ip, sender_port, sender_flags, message_flags, payload]
The sender's client port (not the bus port), its node flags (only LEAVING is trusted by
receivers) and the message flags (NOREPLY, INCR_NACKS, INCR_DELIV) mirror the upstream
header; `payload` depends on the type (see PAYLOADS). A sender whose bus port is not its
port + 10000 (`cluster-announce-bus-port`, disque/bus/announce.py) appends it as an eighth
field, and a gossip entry about such a node carries it as a seventh: a node that announces
nothing sends what it always sent.

A job message travels in three more shapes on its way between two workers, each a named
type below (disque/contracts/typed.py: one encoder, one decoder):
    JobMessage [type, flags, payload]          an entry of a JOBS frame or a job-link frame
    Outbound   [dests, type, flags, payload]   worker -> its front-end (worker_link.BusOut),
                                               dests a list of node ids or None: every other
    Inbound    [sender, type, flags, payload]  front-end -> the owning worker (worker_link.Bus)
The Cython cores build them inline (busrelay.pyx, replcore.pyx, shardcore.pyx: the job
path); tests/test_messages.py holds those lists to these encoders.
"""
from typing import NamedTuple

import msgpack

from disque.contracts.typed import message

# Message types. The numbers are the wire format: never renumber, only add.
PING = 0
PONG = 1
MEET = 2
FAIL = 3
REPLJOB = 4
GOTJOB = 5
ENQUEUE = 6
QUEUED = 7
SETACK = 8
WILLQUEUE = 9
GOTACK = 10
DELJOB = 11
NEEDJOBS = 12
YOURJOBS = 13
WORKING = 14
PAUSE = 15
JOBS = 16
INTEREST = 17       # ours: consumers waiting here on a queue, 0 = none any more (federation)
LINKS = 18          # ours: the TCP ports of the sender's workers' direct job links
QUERY = 19          # ours: a question about this node's queues and jobs (cluster-wide figures, console)
ANSWER = 20         # ours: its answer
GROUPSEQ = 21       # ours: a job of a group to its holders; its home gives its place (GOTJOB aux)
PLACED = 22         # ours: that place, from the producer to the holders; the home queues it
NAMES = ("PING", "PONG", "MEET", "FAIL", "REPLJOB", "GOTJOB", "ENQUEUE", "QUEUED", "SETACK",
         "WILLQUEUE", "GOTACK", "DELJOB", "NEEDJOBS", "YOURJOBS", "WORKING", "PAUSE", "JOBS",
         "INTEREST", "LINKS", "QUERY", "ANSWER", "GROUPSEQ", "PLACED")
MAX_LINK_PORTS = 256    # a LINKS payload lists one port per worker
GOSSIP_TYPES = (PING, PONG, MEET)
JOB_TYPES = frozenset(range(REPLJOB, PAUSE + 1)) | {INTEREST, GROUPSEQ, PLACED}   # what a JOBS frame carries

# message flags (header byte 0)
NOREPLY = 1
INCR_NACKS = 2
INCR_DELIV = 4
DEADLETTERED = 8    # ours, on QUEUED: the sender's copy is in its dead-letter queue
ACCEPTED = 256      # never on the wire: front-end -> worker, "the copy is accepted, keep it"

# node flags (SPEC 10.2)
PFAIL = 1
FAIL_FLAG = 2
MYSELF = 4
HANDSHAKE = 8
NOADDR = 16
MEET_FLAG = 32
DELETED = 64
LEAVING = 128
# the sender's storage pressure (ours, in the header only; docs/memory.md, "Spilling"):
# HELLO ranks a node that spills, and lower one whose spill disk refuses writes;
# MEMORY_HIGH: above 75% of maxmemory counting its spilled jobs, so an ADDJOB elsewhere
# replicates to it only when the nodes below their level are too few
SPILLING = 512
SPILL_FULL = 1024
MEMORY_HIGH = 2048
PRESSURE = SPILLING | SPILL_FULL | MEMORY_HIGH
# ours, in the header only: the sender is stopping (SHUTDOWN, SIGTERM) and said so to every
# node; none sends it copies or clients until its next message, which clears the flag
STOPPING = 4096
# nodes that are not among those a job group's home is chosen from (docs/job-groups.md)
GROUP_OUTSIDERS = HANDSHAKE | NOADDR | FAIL_FLAG | LEAVING | STOPPING

PAYLOADS = {
    PING: "list of gossip entries [id, ping_sent_ms, pong_received_ms, ip, port, flags] "
          "(+ bus port when not port + 10000)",
    FAIL: "failing node id",
    REPLJOB: "serialized job (message form, disque/contracts/job_codec.py)",
    GROUPSEQ: "serialized job of a group, its sequence number 0, to each of its holders: each "
              "keeps the copy, places it and answers GOTJOB [job_id, sequence number]; the "
              "home's number is the job's (docs/job-groups.md)",
    PLACED: "[job_id, sequence number]: the place the home gave a job of a group, to its "
            "holders once every copy is there: each takes it, the home queues the job "
            "(docs/job-groups.md)",
    YOURJOBS: "list of serialized jobs",
    NEEDJOBS: "[queue, count]",
    INTEREST: "[queue, consumers waiting on the sender (0: the interest ends)]",
    PAUSE: "[queue, flags]",
    GOTJOB: "[job_id, aux]: aux 0, or a group job's sequence number from its home",  # and every other single-job message: [job_id, aux]
    JOBS: "list of [type, message_flags, payload] job messages (REPLJOB ... PAUSE, INTEREST, "
          "GROUPSEQ, PLACED)",
    QUERY: "Query [qid, kind, args] (disque/frontend/node_queries.py names the kinds)",
    ANSWER: "Answer [qid, ok, result]: the result of the query, or an error text when not ok",
    LINKS: "list of TCP ports, worker 0 first, where the sender's workers take job links "
           "(empty: none, its job messages travel on this bus only)",
}
# JOBS is ours: the job messages one sender has for one node in one event-loop tick travel
# in one frame (a busy node sends thousands per second; one frame each cost more CPU than
# the messages themselves).


@message(None)
class Envelope(NamedTuple):
    type: int
    sender: str
    ip: str
    port: int
    node_flags: int
    flags: int
    payload: object


@message(None)
class JobMessage(NamedTuple):
    type: int
    flags: int
    payload: object


@message(None)
class Outbound(NamedTuple):
    dests: object               # node ids (bytes), or None: every other node
    type: int
    flags: int
    payload: object


@message(None)
class Inbound(NamedTuple):
    sender: bytes
    type: int
    flags: int
    payload: object


@message(None)
class Query(NamedTuple):
    qid: int
    kind: str
    args: list


@message(None)
class Answer(NamedTuple):
    qid: int
    ok: bool
    result: object


def encode(mtype, sender_id, ip, port, node_flags, mflags, payload, cport=0):
    fields = Envelope.encode(mtype, sender_id, ip, port, node_flags, mflags, payload)
    if cport:
        fields.append(cport)
    return msgpack.packb(fields, use_bin_type=True)


def valid_port(port):
    return type(port) is int and 0 < port < 65536


class Message:
    __slots__ = ("type", "sender", "ip", "port", "node_flags", "flags", "payload", "peer_ip",
                 "cport")

    def __init__(self, mtype, sender, ip, port, node_flags, flags, payload, peer_ip="", cport=0):
        self.type = mtype
        self.sender = sender
        self.ip = ip
        self.port = port
        self.node_flags = node_flags
        self.flags = flags
        self.payload = payload
        self.peer_ip = peer_ip
        self.cport = cport          # the sender's bus port when not port + 10000, else 0

    @property
    def name(self):
        return NAMES[self.type] if 0 <= self.type < len(NAMES) else str(self.type)


def decode(data, peer_ip=""):
    """A Message, or None for anything malformed (the bus ignores bad frames)."""
    try:
        fields = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception:
        return None
    cport = 0
    if type(fields) is list and len(fields) == 8:
        cport = fields.pop()
        if not valid_port(cport):
            return None
    try:
        mtype, sender, ip, port, node_flags, mflags, payload = Envelope.decode(fields)
    except ValueError:
        return None
    if not (isinstance(mtype, int) and 0 <= mtype < len(NAMES)):
        return None
    if not (isinstance(sender, str) and len(sender) == 40):
        return None
    if not isinstance(ip, str) or not isinstance(port, int) or not 0 <= port <= 65535:
        return None
    if not isinstance(node_flags, int) or not isinstance(mflags, int):
        return None
    if mtype in GOSSIP_TYPES:
        if not isinstance(payload, list) or not all(valid_gossip(g) for g in payload):
            return None
    elif mtype == FAIL and not (isinstance(payload, str) and len(payload) == 40):
        return None
    elif mtype == LINKS:
        if not valid_link_ports(payload):
            return None
    elif mtype == QUERY:
        try:
            q = Query.decode(payload)
        except ValueError:
            return None
        if type(q.qid) is not int or type(q.kind) is not str or type(q.args) is not list:
            return None
    elif mtype == ANSWER:
        try:
            a = Answer.decode(payload)
        except ValueError:
            return None
        if type(a.qid) is not int or type(a.ok) is not bool:
            return None
    elif mtype == JOBS:
        # each entry is checked where it is routed (disque/_fast/busrelay.pyx), so one bad
        # entry costs that entry, not the whole frame
        if not isinstance(payload, list):
            return None
    return Message(mtype, sender, ip, port, node_flags, mflags, payload, peer_ip, cport)


def valid_gossip(entry):
    """[id, ping_sent, pong_received, ip, port, flags] and, for a node whose bus port is not
    port + 10000, that bus port."""
    if isinstance(entry, list) and len(entry) == 7:
        if not valid_port(entry[6]):
            return False
        entry = entry[:6]
    return (isinstance(entry, list) and len(entry) == 6 and isinstance(entry[0], str)
            and len(entry[0]) == 40 and isinstance(entry[3], str) and isinstance(entry[4], int)
            and isinstance(entry[5], int) and isinstance(entry[1], int)
            and isinstance(entry[2], int))


def valid_link_ports(ports):
    return (isinstance(ports, list) and len(ports) <= MAX_LINK_PORTS
            and all(type(p) is int and 0 < p < 65536 for p in ports))
