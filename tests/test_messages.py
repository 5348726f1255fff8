"""The messages at the process boundaries (disque/contracts/, docs/design.md "Contracts
between processes") and the one frame reader every stream link uses
(disque/_fast/frames.pyx).

- every named message type: encode -> msgpack -> decode gives back exactly what was sent;
- the lists the Cython cores build inline on the per-command and job paths are the ones
  the types' encoders make (read off real PeerLinks sockets and the bus relay's output);
- the frame reader's edge cases: partial header, partial payload, many frames in one read,
  a frame at its limit and one above it;
- a real node that gets an oversized frame on a direct job link closes that link with a
  log line and loses no job.
"""
import os
import select
import socket
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.info import parse_info
from support.jobs import show
from support.resp_client import RawConn
from support.waits import wait_until
from disque._fast import frames
from disque._fast.busrelay import ACCEPT_COPIES, group_by_link, group_by_node, route_job_messages
from disque._fast.jobid import IdMaker, queue_slot
from disque.contracts import bus_messages as bus_msg
from disque.contracts import connection_handover as handover_msg
from disque.contracts import job_link
from disque.contracts import peer_link
from disque.contracts import worker_link as link_msg
from disque.contracts.worker_link import FrameReader, FrameTooLong
from support.jobs import addjob

BOUNDARIES = {"worker_link": link_msg, "connection_handover": handover_msg,
              "peer_link": peer_link, "job_link": job_link, "bus_messages": bus_msg}


def message_types(module):
    return [v for v in vars(module).values()
            if isinstance(v, type) and hasattr(v, "KIND") and hasattr(v, "_fields")]


ALL_TYPES = [(name, t) for name, mod in BOUNDARIES.items() for t in message_types(mod)]

# what msgpack carries back unchanged (lists, not tuples; str map keys)
scalars = (st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1)
           | st.binary(max_size=40) | st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10)


def over_the_wire(msg):
    return msgpack.unpackb(msgpack.packb(msg), use_list=True)


@pytest.mark.unit
def test_every_boundary_names_its_message_kinds():
    names = {name: {t.__name__ for t in message_types(mod)} for name, mod in BOUNDARIES.items()}
    assert names["worker_link"] == {"Cmd", "GetJob", "Unblock", "Return", "Bus", "Control",
                                    "Reply", "GetJobReply", "BusOut", "QueueElsewhere"}
    assert names["connection_handover"] == {"Handoff", "Recall", "Kill", "Peer", "Handback",
                                            "Gone", "Slowlog", "Served", "TlsAccept", "TlsConn"}
    assert names["peer_link"] == {"Request", "Reply"}
    assert names["job_link"] == {"Hello"}
    assert names["bus_messages"] == {"Envelope", "JobMessage", "Outbound", "Inbound", "Query", "Answer"}


@pytest.mark.unit
@pytest.mark.parametrize("boundary,mtype", ALL_TYPES, ids=[t.__name__ for _, t in ALL_TYPES])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_round_trip_is_exact(boundary, mtype, data):
    fields = [data.draw(values, label=f) for f in mtype._fields]
    sent = mtype(*fields)
    got = mtype.decode(over_the_wire(mtype.encode(*sent)))
    assert type(got) is mtype and got == sent


@pytest.mark.unit
@pytest.mark.parametrize("boundary,mtype", ALL_TYPES, ids=[t.__name__ for _, t in ALL_TYPES])
def test_a_list_of_another_shape_is_no_message(boundary, mtype):
    good = mtype.encode(*[0] * len(mtype._fields))
    for bad in (good[:-1], good + [0], {"a": 1}, None):
        with pytest.raises(ValueError):
            mtype.decode(bad)
    if mtype.KIND is not None:
        with pytest.raises(ValueError):
            mtype.decode(["another kind"] + good[1:])
    with pytest.raises(TypeError):
        mtype.encode(*[0] * (len(mtype._fields) + 1))


@pytest.mark.unit
def test_kinds_are_unique_per_boundary():
    for mapping in (link_msg.REQUESTS, handover_msg.MESSAGES, peer_link.ENTRIES):
        assert all(t.KIND == k for k, t in mapping.items())
    assert set(handover_msg.MESSAGES) == {handover_msg.HANDOFF, handover_msg.RECALL, handover_msg.KILL, handover_msg.HANDBACK, handover_msg.GONE, handover_msg.SLOWLOG, handover_msg.PEER,
                               handover_msg.TLS_ACCEPT, handover_msg.TLS_CONN}


@pytest.mark.unit
def test_the_bus_envelope_goes_through_encode_and_decode():
    sender = "a" * 40
    data = bus_msg.encode(bus_msg.FAIL, sender, "127.0.0.1", 7711, bus_msg.LEAVING, bus_msg.NOREPLY, "b" * 40)
    msg = bus_msg.decode(data, "10.0.0.1")
    assert (msg.type, msg.sender, msg.ip, msg.port, msg.node_flags, msg.flags, msg.payload,
            msg.peer_ip) == (bus_msg.FAIL, sender, "127.0.0.1", 7711, bus_msg.LEAVING, bus_msg.NOREPLY,
                             "b" * 40, "10.0.0.1")
    assert bus_msg.decode(msgpack.packb([bus_msg.FAIL, sender])) is None


@pytest.mark.unit
def test_a_hello_is_read_only_when_it_is_ours():
    me = b"n" * 40
    assert job_link.read_hello(over_the_wire(job_link.Hello.encode(job_link.VERSION, me, b"m" * 40, 1))) == \
        job_link.Hello(job_link.VERSION, me, b"m" * 40, 1)
    assert job_link.read_hello(job_link.Hello.encode(job_link.VERSION + 1, me, b"m" * 40, 1)) is None
    assert job_link.read_hello(job_link.Hello.encode(job_link.VERSION, b"short", b"m" * 40, 1)) is None
    assert job_link.read_hello([b"other", job_link.VERSION, me, b"m" * 40, 1]) is None


# ---- the Cython cores' inline lists are the encoders' ---------------------------------------

def read_one_frame(sock):
    pending, out = bytearray(), []
    sock.settimeout(5)
    while not out:
        got = sock.recv(65536)
        assert got
        assert frames.feed(pending, got, 1 << 20, out) == 0
    return msgpack.unpackb(out[0], use_list=True)


@pytest.mark.unit
def test_peer_link_requests_and_replies_are_the_contracts():
    from disque._fast.peerlinks import PeerLinks
    mine, theirs = socket.socketpair()
    ep = select.epoll()
    answered = []
    links = PeerLinks(0, {1: mine}, ep)
    links.execute = lambda argv: b"+ran %s\r\n" % argv[0]
    links.answered = lambda waiter, reply: answered.append((waiter, reply))
    try:
        assert links.forward(1, [b"qlen", b"q"], "waiter")
        links.send_all()
        (entry,) = read_one_frame(theirs)
        request = peer_link.Request.decode(entry)
        assert request.argv == [b"qlen", b"q"]
        # the other worker asks in turn, and answers ours
        theirs.sendall(frames.frame(msgpack.packb([peer_link.Request.encode(7, [b"ping"]),
                                                   peer_link.Reply.encode(request.reqid, b":3\r\n")])))
        links.readable(mine.fileno())
        assert answered == [("waiter", b":3\r\n")]
        links.send_all()
        (entry,) = read_one_frame(theirs)
        assert peer_link.Reply.decode(entry) == peer_link.Reply(7, b"+ran ping\r\n")
    finally:
        links.close()
        theirs.close()
        ep.close()


@pytest.mark.unit
def test_the_bus_relay_builds_the_job_message_shapes():
    jid = IdMaker(b"a" * 40).make(queue_slot(b"q"), 60, 5)
    inbox, gotjobs = {}, []
    copy = b"\0" * 4 + jid + b"rest"
    route_job_messages([bus_msg.JobMessage.encode(bus_msg.GOTJOB, 0, [jid, 1]),
                        bus_msg.JobMessage.encode(bus_msg.REPLJOB, 0, copy)], b"s" * 40, 1, inbox,
                       ACCEPT_COPIES, gotjobs)
    assert [bus_msg.Inbound.decode(e) for e in inbox[0]] == [
        bus_msg.Inbound(b"s" * 40, bus_msg.GOTJOB, 0, [jid, 1]),
        bus_msg.Inbound(b"s" * 40, bus_msg.REPLJOB, bus_msg.NOREPLY | bus_msg.ACCEPTED, copy)]
    assert [bus_msg.JobMessage.decode(g) for g in gotjobs] == [bus_msg.JobMessage(bus_msg.GOTJOB, 0, [jid, 0])]
    outbound = [list(bus_msg.Outbound.encode([b"n" * 40], bus_msg.WORKING, 0, [jid, 5]))]
    outbox = {}
    assert group_by_node(outbound, outbox, "me", lambda: [], {})
    assert outbox == {"n" * 40: [bus_msg.JobMessage.encode(bus_msg.WORKING, 0, [jid, 5])]}
    box, leftover = [], []
    group_by_link(outbound + [bus_msg.Outbound.encode([b"x" * 40], bus_msg.WORKING, 0, [jid, 6])],
                  {b"n" * 40: [box]}, b"me", (), leftover)
    assert box == [bus_msg.JobMessage.encode(bus_msg.WORKING, 0, [jid, 5])]
    assert [bus_msg.Outbound.decode(list(e)) for e in leftover] == [
        bus_msg.Outbound((b"x" * 40,), bus_msg.WORKING, 0, [jid, 6])]


# ---- the frame reader ---------------------------------------------------------------------

def framed(*payloads):
    return b"".join(struct.pack("<I", len(p)) + p for p in payloads)


@pytest.mark.unit
def test_partial_headers_and_payloads_wait_for_the_rest():
    pending, out = bytearray(), []
    data = framed(b"hello", b"", b"world!")
    for i in range(len(data)):          # one byte at a time: every partial state
        assert frames.feed(pending, data[i:i + 1], 100, out) == 0
    assert out == [b"hello", b"", b"world!"] and pending == b""


@pytest.mark.unit
def test_many_frames_in_one_read():
    out, pending = [], bytearray()
    payloads = [b"%d" % i * (i % 7) for i in range(1000)]
    assert frames.feed(pending, framed(*payloads) + b"\x03\x00", 100, out) == 0
    assert out == payloads and pending == b"\x03\x00"


@pytest.mark.unit
@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=12),
       cuts=st.lists(st.integers(0, 4000), max_size=8))
def test_any_split_of_a_stream_gives_the_same_frames(payloads, cuts):
    data = framed(*payloads)
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    out, pending = [], bytearray()
    for a, b in zip(bounds, bounds[1:]):
        assert frames.feed(pending, data[a:b], 300, out) == 0
    assert out == payloads and pending == b""


@pytest.mark.unit
def test_a_frame_at_the_limit_passes_and_one_above_it_is_too_long():
    out, pending = [], bytearray()
    assert frames.feed(pending, framed(b"x" * 64), 64, out) == 0 and out == [b"x" * 64]
    out, pending = [], bytearray()
    # refused from its header alone: nothing of it is kept
    assert frames.feed(pending, struct.pack("<I", 65), 64, out) == frames.TOO_LONG
    assert pending == b"" and out == []
    # after a partial frame already kept
    pending = bytearray(b"\x02")
    assert frames.feed(pending, b"\x00\x00\x00ok" + struct.pack("<I", 1 << 31), 64, out) \
        == frames.TOO_LONG
    assert out == [b"ok"]


@pytest.mark.unit
def test_read_frames_limits_the_first_frame_apart():
    a, b = socket.socketpair()
    try:
        a.sendall(framed(b"x" * 10, b"y" * 100))
        out, pending = [], bytearray()
        assert frames.read_frames(b.fileno(), pending, 10, 100, out) == 4 + 10 + 4 + 100
        assert out == [b"x" * 10, b"y" * 100]
        a.sendall(framed(b"z" * 11))
        assert frames.read_frames(b.fileno(), pending, 10, 100, []) == frames.TOO_LONG
        b.setblocking(False)
        assert frames.read_frames(b.fileno(), pending, 10, 100, []) == frames.AGAIN
        a.close()
        assert frames.read_frames(b.fileno(), pending, 10, 100, []) == 0
    finally:
        a.close()
        b.close()


@pytest.mark.unit
def test_the_python_links_read_through_the_one_reader():
    a, b = socket.socketpair()
    try:
        reader = FrameReader(limit=8)
        a.sendall(framed(b"12345678"))
        assert reader.recv_from(b) == ([b"12345678"], 4 + 8)
        a.sendall(framed(b"123456789"))
        with pytest.raises(FrameTooLong):
            reader.recv_from(b)
        channel = handover_msg.HandoverChannel(b, limit=8)
        a.sendall(framed(msgpack.packb(handover_msg.Gone.encode(3))) + struct.pack("<I", 1000))
        assert channel.receive() == [([handover_msg.GONE, 3], None)] and channel.closed
    finally:
        a.close()
        b.close()


@pytest.mark.unit
def test_the_front_ends_channel_posts_never_block_and_keep_their_order_and_socket():
    """HandoverChannel.post: what a full socket cannot take waits, with a copy of the fd,
    and goes in order once the other end reads (post_more)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    passed_r, passed_w = os.pipe()
    try:
        sender, receiver = handover_msg.HandoverChannel(a), handover_msg.HandoverChannel(b)
        sent = 0
        while sender.post(handover_msg.Gone.encode(sent)):  # until the socket is full
            sent += 1
        big = handover_msg.Handoff.encode(7, False, b"x" * 300_000, handover_msg.NO_PUMP)
        assert not sender.post(big, passed_w)               # nothing of it went: the fd waits
        os.close(passed_w)                                  # the caller's own copy: closed at once
        assert not sender.post(handover_msg.Gone.encode(-1))
        got = []
        while True:
            got += receiver.receive()
            if sender.post_more() and got and got[-1][0] == handover_msg.Gone.encode(-1):
                break
        got += receiver.receive()
        assert [m for m, _ in got[:sent + 1]] == [handover_msg.Gone.encode(i) for i in range(sent + 1)]
        handoff = [(m, fd) for m, fd in got if m[0] == handover_msg.HANDOFF]
        assert len(handoff) == 1 and handoff[0][0][3] == b"x" * 300_000
        os.write(handoff[0][1], b"!")                       # the fd that went is the pipe's
        assert os.read(passed_r, 1) == b"!"
        os.close(handoff[0][1])
        assert not sender.backlog
    finally:
        a.close()
        b.close()
        os.close(passed_r)


# ---- a real node ----------------------------------------------------------------------------

@pytest.mark.cluster
def test_an_oversized_frame_on_a_job_link_closes_that_link_and_loses_no_job(start_cluster):
    c = start_cluster(2, workers=1, extra_args=["--cluster-job-links", "direct"])

    def info(node, key):
        return parse_info(node.execute("INFO", "cluster"))[key]
    for node in c.nodes:
        wait_until(lambda: info(node, "cluster_job_links_up") == "1", timeout=15)
    with RawConn(c[0].port) as r:
        ids = [addjob(r, "big-frame-q", b"body%d" % i, 5000, "REPLICATE", 2)
               for i in range(10)]
    pids = c[1].worker_pids()
    port = int(info(c[1], "cluster_job_link_ports"))
    hello = msgpack.packb(job_link.Hello.encode(job_link.VERSION, c.ids[0].encode(), c.ids[1].encode(), 0))
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(framed(hello) + struct.pack("<I", job_link.MAX_FRAME + 1) + b"x" * 1000)
    s.settimeout(10)
    assert s.recv(100) == b""           # closed on the header alone
    s.close()
    wait_until(lambda: "closed: a frame too long" in c[1].log_text(), timeout=10,
               message=c[1].log_tail())
    wait_until(lambda: info(c[1], "cluster_job_links_refused") == "1", timeout=10)
    assert c[1].all_alive() and c[1].worker_pids() == pids
    for node in c.nodes:                # every copy where it was
        with RawConn(node.port) as r:
            assert all(show(r, jid) is not None for jid in ids)
    # the nodes' own links still carry job messages: the acks reach both copies
    with RawConn(c[1].port) as r:
        assert r.execute("ACKJOB", *ids) == 10
    for node in c.nodes:
        with RawConn(node.port) as r:
            wait_until(lambda: all(show(r, jid) is None for jid in ids), timeout=15)


@pytest.mark.unit
def test_a_group_jobs_copy_for_its_home_reaches_its_worker_and_is_answered_there():
    """GROUPSEQ is routed like a copy but never answered by the front-end: its home's worker
    answers, GOTJOB carrying the job's place, a number beyond the other messages' aux, which
    PLACED carries on to the other holders."""
    jid = IdMaker(b"a" * 40).make(queue_slot(b"q"), 60, 5)
    copy = b"\0" * 4 + jid + b"rest"
    place = 1796004457407000 << 8
    inbox, gotjobs = {}, []
    route_job_messages([bus_msg.JobMessage.encode(bus_msg.GROUPSEQ, 0, copy),
                        bus_msg.JobMessage.encode(bus_msg.GOTJOB, 0, [jid, place]),
                        bus_msg.JobMessage.encode(bus_msg.PLACED, 0, [jid, place]),
                        bus_msg.JobMessage.encode(bus_msg.PLACED, 0, [jid, 1 << 64]),
                        bus_msg.JobMessage.encode(bus_msg.WORKING, 0, [jid, place])],
                       b"s" * 40, 1, inbox, ACCEPT_COPIES, gotjobs)
    assert gotjobs == []
    assert [bus_msg.Inbound.decode(e) for e in inbox[0]] == [
        bus_msg.Inbound(b"s" * 40, bus_msg.GROUPSEQ, 0, copy),
        bus_msg.Inbound(b"s" * 40, bus_msg.GOTJOB, 0, [jid, place]),
        bus_msg.Inbound(b"s" * 40, bus_msg.PLACED, 0, [jid, place])]    # WORKING's aux: too big
