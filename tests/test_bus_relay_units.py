"""The relay's routing in C (disque/_fast/busrelay.pyx): a worker sending on its direct job
links (group_by_link) must pick the same worker of the other node as that node's
front-end picks for the same message off the bus (route_job_messages), or the message
would reach a worker that does not own its job."""
import random

import pytest

from disque._fast.busrelay import FORWARD_COPIES, group_by_link, route_job_messages
from disque._fast.jobid import IdMaker, queue_slot
from disque.contracts import bus_messages as bus_msg

pytestmark = pytest.mark.unit

ME = b"a" * 40
B = b"b" * 40
C = b"c" * 40


def sample_messages(rng, n):
    ids = IdMaker(ME)
    msgs = []
    for i in range(n):
        queue = b"q%d" % rng.randrange(10_000)
        jid = ids.make(queue_slot(queue), 60, 5)
        kind = rng.choice([bus_msg.GOTJOB, bus_msg.SETACK, bus_msg.DELJOB, bus_msg.QUEUED, bus_msg.NEEDJOBS, bus_msg.PAUSE,
                           bus_msg.INTEREST, bus_msg.REPLJOB])
        if kind == bus_msg.REPLJOB:
            payload = b"\x00\x00\x00\x00" + jid + b"rest of a serialized job"
        elif kind in (bus_msg.NEEDJOBS, bus_msg.PAUSE, bus_msg.INTEREST):
            payload = [queue, i]
        else:
            payload = [jid, i]
        msgs.append([kind, 0, payload])
    return msgs


@pytest.mark.parametrize("nworkers", [1, 2, 3, 7])
def test_a_direct_message_goes_to_the_worker_the_bus_path_would_pick(nworkers):
    rng = random.Random(nworkers)
    msgs = sample_messages(rng, 500)
    boxes = {B: [[] for _ in range(nworkers)]}
    leftover = []
    group_by_link([((B,), t, f, p) for t, f, p in msgs], boxes, ME, (B,), leftover)
    assert leftover == []
    inbox = {}
    route_job_messages(msgs, ME, nworkers, inbox, FORWARD_COPIES, [])
    for w in range(nworkers):
        assert boxes[B][w] == [m[1:] for m in inbox.get(w, [])]


def test_destinations_without_a_link_up_are_left_for_the_bus():
    up = []
    boxes = {B: [up, None]}        # worker 0 of B linked, worker 1 not; C has no ports
    ids = IdMaker(ME)
    on_w0 = on_w1 = None
    while on_w0 is None or on_w1 is None:
        jid = ids.make(queue_slot(b"q%d" % random.randrange(1000)), 60, 5)
        inbox = {}
        route_job_messages([[bus_msg.SETACK, 0, [jid, 1]]], ME, 2, inbox, FORWARD_COPIES, [])
        if 0 in inbox:
            on_w0 = jid
        else:
            on_w1 = jid
    leftover = []
    group_by_link([((B, C, ME), bus_msg.SETACK, 0, [on_w0, 1]),     # B direct, C by the bus
                   (None, bus_msg.SETACK, 0, [on_w1, 2]),           # everyone; B's worker 1 is down
                   ((ME,), bus_msg.DELJOB, 0, [on_w0, 0])],         # only this node: nothing
                  boxes, ME, (B, C), leftover)
    assert up == [[bus_msg.SETACK, 0, [on_w0, 1]]]
    assert leftover == [[(C,), bus_msg.SETACK, 0, [on_w0, 1]], [(B, C), bus_msg.SETACK, 0, [on_w1, 2]]]


def test_a_copy_is_routed_by_the_id_it_carries_and_a_short_one_is_dropped():
    """REPLJOB's ID is read in place (busrelay.owner): a payload too short to hold one, or
    whose ID is malformed, is dropped; YOURJOBS of a short first job goes to worker 0."""
    ids = IdMaker(ME)
    jids = [ids.make(queue_slot(b"q%d" % i), 60, 5) for i in range(64)]
    msgs = [[bus_msg.REPLJOB, 0, b"\0" * 4 + jid + b"body"] for jid in jids]
    msgs += [[bus_msg.REPLJOB, 0, b"\0" * 4 + jids[0][:39]],          # 43 bytes: no ID
             [bus_msg.REPLJOB, 0, b"\0" * 4 + b"X" + jids[0][1:]],     # not 'D-'
             [bus_msg.REPLJOB, 0, b""],
             [bus_msg.YOURJOBS, 0, [b"\0" * 4 + jids[1][:20]]]]
    inbox = {}
    route_job_messages(msgs, ME, 3, inbox, FORWARD_COPIES, [])
    routed = {w: [m[3] for m in got] for w, got in inbox.items()}
    for jid in jids:
        w = queue_slot(b"q%d" % jids.index(jid)) % 3
        assert b"\0" * 4 + jid + b"body" in routed[w]
    assert sum(len(v) for v in routed.values()) == len(jids) + 1
    assert routed[0][-1] == [b"\0" * 4 + jids[1][:20]]


# ---- reading job link frames (disque/_fast/frames.pyx) -------------------------------

def framed(payload):
    return len(payload).to_bytes(4, "little") + payload


def test_the_c_frame_writer_is_the_link_contract():
    # peer links (sysio.framed) and job links (frames.frame) write what
    # disque/contracts/worker_link.frame defines, and read_frames reads it back
    from disque._fast.frames import frame
    from disque.contracts.worker_link import frame as contract_frame
    for payload in (b"", b"x", bytes(range(256)) * 300, b"y" * 70_000):
        assert frame(payload) == contract_frame(payload) == framed(payload)


def test_frames_split_anywhere_come_out_whole():
    import socket
    from disque._fast.frames import AGAIN, read_frames
    a, b = socket.socketpair()
    b.setblocking(False)
    try:
        payloads = [b"hello", b"", b"x" * 70_000, b"last"]
        data = b"".join(framed(p) for p in payloads)
        pending, frames = bytearray(), []
        assert read_frames(b.fileno(), pending, 16, 1 << 20, frames) == AGAIN
        for cut in range(0, len(data), 997):          # pieces that split headers and bodies
            a.sendall(data[cut:cut + 997])
            while read_frames(b.fileno(), pending, 16 if not frames else 1 << 20,
                              1 << 20, frames) > 0:
                pass
        assert frames == payloads and pending == bytearray()
        a.close()
        assert read_frames(b.fileno(), pending, 16, 1 << 20, frames) == 0     # closed
    finally:
        a.close()
        b.close()


def test_a_frame_over_its_limit_is_refused_before_it_is_read():
    import socket
    from disque._fast.frames import TOO_LONG, read_frames
    a, b = socket.socketpair()
    try:
        a.sendall(b"GET / HTTP/1.1\r\n\r\n")             # "GET " is a 542 MB length
        assert read_frames(b.fileno(), bytearray(), 256, 1 << 30, []) == TOO_LONG
        a.sendall(framed(b"hi") + (0xFFFFFFFF).to_bytes(4, "little"))
        frames = []
        assert read_frames(b.fileno(), bytearray(), 256, 1 << 30, frames) == TOO_LONG
        assert frames == [b"hi"]                         # what came before is kept
    finally:
        a.close()
        b.close()


# ---- writing on links without blocking (disque/_fast/sysio.pxd send_or_keep) -----------

def test_writes_never_block_never_reorder_and_report_a_broken_link():
    import socket
    from disque._fast.frames import BROKEN, KEPT, QUEUED, SENT, send_kept, send_or_keep
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        out = bytearray()
        assert send_or_keep(a.fileno(), b"first", out) == SENT and out == bytearray()
        big = bytes(range(256)) * 40_000                 # 10 MB: more than the socket takes
        assert send_or_keep(a.fileno(), big, out) == KEPT and 0 < len(out) < len(big)
        assert send_or_keep(a.fileno(), b"after", out) == QUEUED    # behind, never before
        received = bytearray()
        b.setblocking(False)
        while out:
            try:
                received += b.recv(1 << 20)
            except BlockingIOError:
                pass
            assert send_kept(a.fileno(), out) == len(out)
        b.settimeout(5)
        while len(received) < 5 + len(big) + 5:
            received += b.recv(1 << 20)
        assert bytes(received) == b"first" + big + b"after"
        b.close()
        assert send_or_keep(a.fileno(), b"x", bytearray()) == BROKEN
        assert send_kept(a.fileno(), bytearray(b"y")) == -1
    finally:
        a.close()
        b.close()
