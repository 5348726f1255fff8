"""A member of the cluster that sends malformed job messages (SPEC 10.4: a bad bus message
is dropped). The front-end checks and routes each entry of a JOBS frame on its own
(disque/_fast/busrelay.pyx, docs/design.md "The bus relay"), so garbage costs only itself:
the server keeps running, and the good message in the same frame is handled.

The member is a `Cluster` object run in this process on a real ZeroMQ bus, next to a real
`disque-server` with several workers.
"""
import random
import time

import pytest

from support.bus_net import Net
from support.ports import lease_port
from disque._fast.job import ACTIVE, Job
from disque._fast.jobid import IdMaker, queue_slot
from disque.contracts import bus_messages as bus_msg
from disque.contracts.job_codec import serialize

NODE_TIMEOUT = 5000


class Member:
    """One bus node driven by the test (support.bus_net.Net plays its event loop) that
    keeps the job messages it receives."""

    def __init__(self, tmp_path):
        self.net = Net(tmp_path, NODE_TIMEOUT)
        self.bus = self.net.add("member")
        self.received = []
        self.bus.on_job_messages = lambda sender, msgs: self.received.extend(msgs)
        self.step = self.net.step
        self.until = self.net.until

    def close(self):
        self.net.close()


@pytest.fixture
def member(tmp_path):
    m = Member(tmp_path)
    yield m
    m.close()


def joined(srv, member):
    """The server and the member know each other as full members."""
    member.bus.meet("127.0.0.1", srv.port)
    member.until(lambda: b"cluster_reachable_nodes:1" in srv.execute("CLUSTER", "INFO")
                 and any(not n.has(bus_msg.HANDSHAKE) and n is not member.bus.myself
                         for n in member.bus.nodes.values()),
                 message="the member did not join the server's cluster")
    return srv.execute("CLUSTER", "MYID").decode()


def copy_of_new_job(member, server_id, queue=b"hostile-q"):
    """A REPLJOB payload as a real originator sends it: the job, kept by both nodes."""
    jid = IdMaker(member.bus.myself.id).make(queue_slot(queue), 600, 30)
    job = Job(jid, queue, b"the good one")
    now_s = int(time.time())
    job.state, job.repl, job.etime = ACTIVE, 2, now_s + 600
    job.ctime, job.retry = time.time_ns(), 30
    job.nodes_delivered = (member.bus.myself.id.encode(), server_id.encode())
    return jid, serialize(job, False, now_s)


def send_copy(member, server, server_id, after, frame=None):
    """Send a new job's copy (alone, or after the entries of `frame` in the same JOBS
    frame) and wait for its GOTJOB: the proof that the server read what came before."""
    jid, copy = copy_of_new_job(member, server_id)
    assert member.bus.send(server, bus_msg.JOBS, list(frame or ()) + [[bus_msg.REPLJOB, 0, copy]])
    member.until(lambda: [bus_msg.GOTJOB, 0, [jid, 0]] in member.received,
                 message=f"no GOTJOB for a copy sent after {after}")
    return jid, copy


def assert_unharmed(srv, workers):
    """Every process is the one that started, and none of them raised."""
    assert srv.all_alive() and srv.worker_pids() == workers, srv.log_tail()
    assert "Traceback" not in srv.log_text(), srv.log_tail()


GARBAGE = [
    "not a list",
    [bus_msg.GOTJOB, 0],                              # two fields
    [bus_msg.GOTJOB, 0, [b"D-x", 0], "extra"],        # four
    [99, 0, [b"x", 0]],                         # no such type
    [bus_msg.PING, 0, []],                            # a membership type inside JOBS
    [2 ** 63, 0, []],                           # a type beyond a C long
    [True, 0, [b"x", 0]],                       # a bool is not a type
    [bus_msg.GOTJOB, "0", [b"x", 0]],                 # flags not an int
    [bus_msg.GOTJOB, 2 ** 64 - 1, [b"x", 0]],         # flags beyond 63 bits
    [bus_msg.REPLJOB, 0, 12345],                      # a copy that is not bytes
    [bus_msg.REPLJOB, 0, b"short"],                   # a copy cut short
    [bus_msg.REPLJOB, 0, [b"a", b"b"]],               # a list where the copy goes
    [bus_msg.YOURJOBS, 0, [5]],
    [bus_msg.YOURJOBS, 0, []],
    [bus_msg.NEEDJOBS, 0, []],                        # no queue
    [bus_msg.NEEDJOBS, 0, [12]],                      # a queue that is not bytes
    [bus_msg.INTEREST, 0, [b"q", "many"]],
    [bus_msg.PAUSE, 0, [b"q", None]],
    [bus_msg.GOTJOB, 0, {"a": 1}],                    # a map where the job ID goes
    [bus_msg.GOTJOB, 0, []],
    [bus_msg.DELJOB, 0, [b"D-" + b"?" * 38, 0]],      # an ID whose slot is not base64
    [bus_msg.SETACK, 0, [None, None]],
    [bus_msg.ENQUEUE, 0, [b"D-" + b"A" * 38, "soon"]],
    [bus_msg.WORKING, 0, 7],
]


def test_garbage_in_a_jobs_frame_costs_only_itself(start_server, member):
    srv = start_server(workers=3)
    workers = srv.worker_pids()
    server_id = joined(srv, member)
    server = member.bus.nodes[server_id]
    # the good copy last in the same frame, so every bad entry is routed before it
    jid, _ = send_copy(member, server, server_id, "the garbage", frame=GARBAGE)
    assert srv.all_alive() and srv.worker_pids() == workers, srv.log_tail()
    # what is not a copy gets no GOTJOB: only the good one was answered
    assert [m for m in member.received if m[0] == bus_msg.GOTJOB] == [[bus_msg.GOTJOB, 0, [jid, 0]]]
    shown = srv.client().execute_command("SHOW", jid)
    shown = dict(zip(shown[::2], shown[1::2]))
    assert shown[b"queue"] == b"hostile-q" and shown[b"body"] == b"the good one"
    assert shown[b"state"] == b"active"
    # each bad entry alone in a frame, then the node still answers and replicates
    for entry in GARBAGE:
        assert member.bus.send(server, bus_msg.JOBS, [entry])
    # copies whose ID is good and whose rest is damaged reach the worker, which drops them
    bad_id, bad = copy_of_new_job(member, server_id, b"damaged-q")
    for damaged in (bad[:60], bad[:-3], bad[:44] + b"\xff" * (len(bad) - 44)):
        assert member.bus.send(server, bus_msg.JOBS, [[bus_msg.REPLJOB, bus_msg.NOREPLY, damaged],
                                                [bus_msg.YOURJOBS, 0, [damaged, 0]]])
    jid2, copy2 = copy_of_new_job(member, server_id)
    member.bus.send(server, bus_msg.REPLJOB, copy2)          # a lone message, outside JOBS
    member.until(lambda: [bus_msg.GOTJOB, 0, [jid2, 0]] in member.received,
                 message="no GOTJOB for a lone REPLJOB after the garbage frames")
    assert_unharmed(srv, workers)
    assert srv.execute("PING") == b"PONG"
    assert srv.client().execute_command("SHOW", bad_id) is None


def test_out_of_range_values_about_a_held_job(start_server, member):
    """Well-formed messages about a job and a queue the server holds, whose numbers are
    beyond what a C integer takes or of the wrong type: each is dropped by the worker that
    gets it, and the job is still there and still deliverable."""
    srv = start_server(workers=2)
    workers = srv.worker_pids()
    server_id = joined(srv, member)
    server = member.bus.nodes[server_id]
    jid, copy = send_copy(member, server, server_id, "nothing")
    q = b"hostile-q"
    for value in (2 ** 64 - 1, 2 ** 63, -(2 ** 63), "x", None, [1], 1.5):
        frame = [[bus_msg.ENQUEUE, 0, [jid, value]], [bus_msg.WORKING, 0, [jid, value]],
                 [bus_msg.WILLQUEUE, 0, [jid, value]], [bus_msg.QUEUED, 0, [jid, value]],
                 [bus_msg.SETACK, 0, [jid, value]], [bus_msg.GOTACK, 0, [jid, value]],
                 [bus_msg.GOTJOB, 0, [jid, value]], [bus_msg.NEEDJOBS, 0, [q, value]],
                 [bus_msg.INTEREST, 0, [q, value]], [bus_msg.PAUSE, 0, [q, value]],
                 [bus_msg.YOURJOBS, 0, [copy, value]]]
        assert member.bus.send(server, bus_msg.JOBS, frame)
    send_copy(member, server, server_id, "the out-of-range frames")
    assert_unharmed(srv, workers)
    c = srv.client()
    assert c.execute_command("SHOW", jid) is not None
    # the job can still be queued and handed out here
    c.execute_command("ENQUEUE", jid)
    got = c.execute_command("GETJOB", "NOHANG", "FROM", q)
    assert got is not None and jid in [j[1] for j in got]
    # the largest values a job message may carry are taken without harm: they may act on
    # the job (SETACK acks it), never crash a worker
    big = (1 << 48) - 1
    send_copy(member, server, server_id, "the largest values", frame=[
        [bus_msg.ENQUEUE, 0, [jid, big]], [bus_msg.WORKING, bus_msg.INCR_NACKS, [jid, big]],
        [bus_msg.QUEUED, bus_msg.INCR_NACKS | bus_msg.INCR_DELIV, [jid, big]], [bus_msg.NEEDJOBS, 0, [q, big]],
        [bus_msg.INTEREST, 0, [q, big]], [bus_msg.PAUSE, 0, [q, big]], [bus_msg.SETACK, 0, [jid, big]],
        [bus_msg.GOTACK, 0, [jid, big]]])
    assert_unharmed(srv, workers)


def test_gossip_about_impossible_addresses_is_not_followed(start_server, member):
    """PING / PONG / MEET gossip naming nodes at addresses that cannot exist (not an IP, a
    port whose bus port would be past 65535, 5,000 characters of host) starts no handshake
    and reaches neither the links nor nodes.conf; a well-formed entry sent after them does
    (it is how the test knows the server has read them)."""
    srv = start_server(workers=2)
    workers = srv.worker_pids()
    server_id = joined(srv, member)
    server = member.bus.nodes[server_id]
    impossible = [("garbage", 7000), ("127.0.0.1", 99999999), ("127.0.0.1", -5),
                  ("127.0.0.1", 0), ("127.0.0.1", 65535 - 9999), ("::zz", 7000),
                  ("999.1.1.1", 7000), ("127.0.0.1:5", 7000), ("x" * 5000, 7000)]
    for i, (ip, port) in enumerate(impossible):
        entry = ["%040x" % (i + 1), 0, 0, ip, port, 0]
        for mtype in (bus_msg.PING, bus_msg.PONG, bus_msg.MEET):
            assert member.bus.send(server, mtype, [entry])
    marker = lease_port()
    try:
        member.bus.send(server, bus_msg.PING, [["f" * 40, 0, 0, "127.0.0.1", marker.port, 0]])
        member.until(lambda: b"127.0.0.1:%d " % marker.port in srv.execute("CLUSTER", "NODES"),
                     message="the well-formed gossip entry was not followed")
    finally:
        marker.release()
    nodes = srv.execute("CLUSTER", "NODES").decode()
    for ip, port in impossible:
        assert f" {ip}:{port} " not in nodes, nodes
    assert len(nodes.splitlines()) == 3, nodes      # itself, the member, the marker
    assert_unharmed(srv, workers)


def random_value(rng, jid, copy, depth=0):
    """One value of the kinds a peer's message may hold where a job ID, a queue, a count
    or a copy goes: edge integers, the real job ID and queue, a cut copy, random bytes,
    None, text, nested lists, floats."""
    k = rng.randrange(9)
    if k == 0:
        return rng.choice([0, 1, 255, 65535, 65536, 2 ** 32 - 1, 2 ** 32, 2 ** 48 - 1, 2 ** 48,
                           2 ** 63 - 1, -1, -(2 ** 63)])
    if k == 1:
        return jid
    if k == 2:
        return b"hostile-q"
    if k == 3:
        return copy[:rng.randrange(len(copy) + 1)]
    if k == 4:
        return rng.randbytes(rng.randrange(60))
    if k == 5:
        return None
    if k == 6:
        return "s" * rng.randrange(50)
    if k == 7 and depth < 2:
        return [random_value(rng, jid, copy, depth + 1) for _ in range(rng.randrange(4))]
    return rng.random()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_random_job_messages(start_server, member, seed):
    """60 frames of 40 random job messages about a job and a queue the server holds:
    damaged copies, random payloads, edge flags. No process dies, nothing raises, and a
    good copy sent afterwards is still taken."""
    rng = random.Random(seed)
    srv = start_server(workers=2)
    workers = srv.worker_pids()
    server_id = joined(srv, member)
    server = member.bus.nodes[server_id]
    jid, copy = send_copy(member, server, server_id, "nothing")
    types = list(range(bus_msg.REPLJOB, bus_msg.PAUSE + 1)) + [bus_msg.INTEREST]
    for _ in range(60):
        entries = []
        for _ in range(40):
            mtype = rng.choice(types)
            if rng.random() < 0.5:
                payload = [rng.choice([jid, b"hostile-q", random_value(rng, jid, copy)]),
                           random_value(rng, jid, copy)]
            elif mtype == bus_msg.REPLJOB:
                damaged = bytearray(copy)
                for _ in range(rng.randrange(1, 8)):
                    damaged[rng.randrange(44, len(damaged))] = rng.randrange(256)
                payload = bytes(damaged)
            elif mtype == bus_msg.YOURJOBS:
                payload = [random_value(rng, jid, copy) for _ in range(rng.randrange(3))]
            else:
                payload = random_value(rng, jid, copy)
            flags = rng.choice([0, 0, bus_msg.NOREPLY, bus_msg.INCR_NACKS, bus_msg.INCR_DELIV, bus_msg.DEADLETTERED,
                                bus_msg.ACCEPTED, 7, 2 ** 40])
            entries.append([mtype, flags, payload])
        assert member.bus.send(server, bus_msg.JOBS, entries)
        member.step()
    send_copy(member, server, server_id, "the random frames")
    assert_unharmed(srv, workers)
    assert srv.execute("PING") == b"PONG"
