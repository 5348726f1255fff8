"""Cluster bus membership over real ZeroMQ sockets on loopback: MEET chains, gossip,
PFAIL/FAIL and their clearing, nodes.conf persistence, FORGET (SPEC 10).

Several `Cluster` objects run in this process, driven by a small loop that plays the
part of each node's event loop (the server drives the same two entry points).
"""
import time

import pytest

from support.bus_net import Net
from support.ports import lease_port
from support.waits import wait_until
from disque.contracts import bus_messages as bus_msg
from disque.bus.nodes import ConfigFileError, NodesFile, now_ms

NODE_TIMEOUT = 600


@pytest.fixture
def net(tmp_path):
    n = Net(tmp_path, NODE_TIMEOUT)
    yield n
    n.close()


def ids(c):
    return {n.id for n in c.nodes.values() if not n.has(bus_msg.HANDSHAKE)}


def full_mesh(net):
    everyone = {c.myself.id for name, c in net.nodes.items() if name not in net.down}
    return all(ids(c) >= everyone for name, c in net.nodes.items() if name not in net.down)


def test_chain_of_meets_forms_a_full_mesh(net):
    names = ["a", "b", "c", "d", "e"]
    for name in names:
        net.add(name)
    # a meets b, b meets c, ... : gossip must teach everyone about everyone
    for x, y in zip(names, names[1:]):
        net.nodes[x].meet("127.0.0.1", net.nodes[y].myself.port)
    net.until(lambda: full_mesh(net), message="mesh never formed")
    for c in net.nodes.values():
        assert c.size == 5
        net.until(lambda: len(c.reachable()) == 4)
        text = c.nodes_text()
        assert text.count("\n") == 5 and text.count("myself") == 1
        for line in text.splitlines():
            fields = line.split(" ")
            assert len(fields) == 6 and len(fields[0]) == 40
            assert fields[5] == "connected"


def test_either_side_may_meet(net):
    a, b = net.add("a"), net.add("b")
    b.meet("127.0.0.1", a.myself.port)
    net.until(lambda: full_mesh(net))
    assert a.nodes[b.myself.id].port == b.myself.port


def test_both_sides_learn_the_job_link_ports_from_the_handshake(net):
    """The node that sent MEET tells its job link ports when the handshake completes, not
    with its next PING (up to a second later, every copy for it going by the bus until
    then). Driven without cron, so no PING is ever sent: only MEET is resent, as the
    cron would until the other side's bus socket is connected."""
    a, b = net.add("a"), net.add("b")
    a.job_ports, b.job_ports = [7001, 7002], [8001, 8002]
    a.meet("127.0.0.1", b.myself.port)

    def told():
        for n in list(a.nodes.values()):
            if n.has(bus_msg.HANDSHAKE):    # the part of a's cron that resends MEET
                a.send(n, bus_msg.MEET, a.gossip())
        for c in (a, b):
            c.on_readable()
        ka, kb = a.nodes.get(b.myself.id), b.nodes.get(a.myself.id)
        return (ka is not None and kb is not None
                and ka.job_ports == (8001, 8002) and kb.job_ports == (7001, 7002))
    wait_until(told, timeout=5, interval=0.005,
               message="the ports were not told by the handshake alone")
    assert a.crons == b.crons == 0


def test_killed_node_goes_pfail_then_fail_and_clears_after_restart(net):
    for name in "abc":
        net.add(name)
    net.nodes["a"].meet("127.0.0.1", net.nodes["b"].myself.port)
    net.nodes["a"].meet("127.0.0.1", net.nodes["c"].myself.port)
    net.until(lambda: full_mesh(net))
    victim = net.nodes["c"].myself.id
    net.kill("c")
    a, b = net.nodes["a"], net.nodes["b"]
    net.until(lambda: a.nodes[victim].has(bus_msg.FAIL_FLAG) and b.nodes[victim].has(bus_msg.FAIL_FLAG),
              message="FAIL never agreed")
    assert "fail" in a.nodes_text().splitlines()[[l.split()[0] for l in a.nodes_text().splitlines()].index(victim)]
    assert victim not in {n.id for n in a.reachable()}
    hello = {e[0]: e[3] for e in a.hello_entries()}
    assert hello[victim] == "100"
    c = net.restart("c")
    assert c.myself.id == victim                       # identity reloaded from nodes.conf
    net.until(lambda: not a.nodes[victim].failing and not b.nodes[victim].failing,
              message="FAIL never cleared")


def test_a_node_that_said_goodbye_is_pinged_afresh_when_back(net):
    """A stopping node says goodbye (STOPPING); its next process clears that with its first
    message. A PING its old process never answered must not then age into PFAIL of the new
    one (seen in the rolling restarts of the fault harness: every restarted node was marked
    failing about a node timeout after it was back)."""
    a, b = net.add("a"), net.add("b")
    a.meet("127.0.0.1", b.myself.port)
    net.until(lambda: full_mesh(net))
    bid = b.myself.id
    b.goodbye()
    net.until(lambda: a.nodes[bid].has(bus_msg.STOPPING), message="the goodbye never came")
    assert bid not in {n.id for n in a.reachable()}
    net.kill("b")
    b = net.restart("b")
    a.nodes[bid].ping_sent = now_ms() - 10 * NODE_TIMEOUT     # a PING never answered

    def back():                 # b's first messages, and a's sockets only: no cron of a's
        b.cron()
        a.on_readable()
        return not a.nodes[bid].has(bus_msg.STOPPING)
    wait_until(back, timeout=10, interval=0.01, message="never back")
    end = time.monotonic() + 3 * NODE_TIMEOUT / 1000
    while time.monotonic() < end:
        net.step()
        assert not a.nodes[bid].failing, "the node back from a stop was marked failing"
    assert bid in {n.id for n in a.reachable()}


def test_a_ping_with_no_live_connection_is_tried_again_at_the_next_cron(net):
    """ZeroMQ drops a message for a peer with no live connection (ZMQ_IMMEDIATE), as when
    the peer restarts: that PING is sent again at the next cron (100 ms), not a resend
    interval later, so a restarted node hears from the others (and they from it) at once.
    It still counts as sent for failure detection."""
    a, b = net.add("a"), net.add("b")
    a.meet("127.0.0.1", b.myself.port)
    net.until(lambda: full_mesh(net))
    node = a.nodes[b.myself.id]
    net.kill("b")

    def dropped():
        a.ping(node)
        return node.ping_dropped
    wait_until(dropped, timeout=10, interval=0.01, message="the PING never found the link gone")
    assert node.ping_sent
    tx = node.ping_tx
    time.sleep(0.002)
    a.cron()
    assert node.ping_tx > tx, "the dropped PING was not tried again"


def test_nodes_conf_round_trip_and_lock(net, tmp_path):
    a, b = net.add("a"), net.add("b")
    a.meet("127.0.0.1", b.myself.port)
    net.until(lambda: full_mesh(net))
    path = str(tmp_path / "a.conf")
    lines = open(path).read().splitlines()
    assert len(lines) == 2 and sum("myself" in l for l in lines) == 1
    with pytest.raises(ConfigFileError, match="already used"):
        NodesFile(path).lock()
    myself, others = NodesFile(path).load()
    assert myself.id == a.myself.id and [o.id for o in others] == [b.myself.id]


@pytest.mark.parametrize("text", ["garbage\n", "%s 127.0.0.1:1 bogusflag 0 0 connected\n" % ("a" * 40),
                                  "%s 127.0.0.1:1 myself 0 0 connected\n%s 127.0.0.1:2 myself 0 0 connected\n"
                                  % ("a" * 40, "b" * 40)])
def test_corrupt_nodes_conf_is_refused(tmp_path, text):
    path = tmp_path / "nodes.conf"
    path.write_text(text)
    with pytest.raises(ConfigFileError):
        NodesFile(str(path)).load()


def test_forget_blacklists_the_node(net):
    for name in "abc":
        net.add(name)
    net.nodes["a"].meet("127.0.0.1", net.nodes["b"].myself.port)
    net.nodes["b"].meet("127.0.0.1", net.nodes["c"].myself.port)
    net.until(lambda: full_mesh(net))
    a = net.nodes["a"]
    cid = net.nodes["c"].myself.id
    a.forget(cid)
    # gossip from b keeps mentioning c; the blacklist keeps it out for 60 s
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        net.step()
        assert cid not in a.nodes
    assert a.size == 2


def test_leaving_flag_propagates(net):
    a, b = net.add("a"), net.add("b")
    a.meet("127.0.0.1", b.myself.port)
    net.until(lambda: full_mesh(net))
    a.set_leaving(True)
    net.until(lambda: b.nodes[a.myself.id].has(bus_msg.LEAVING))
    assert a.myself.id not in {n.id for n in b.reachable()}
    assert "leaving" in open(a.file.path).read()
    a.set_leaving(False)
    net.until(lambda: not b.nodes[a.myself.id].has(bus_msg.LEAVING))


def test_job_messages_reach_the_handler_only_from_known_nodes(net):
    got = []
    a, b = net.add("a"), net.add("b")
    a.on_job_messages = lambda sender, msgs: got.extend((sender, *m) for m in msgs)
    a.meet("127.0.0.1", b.myself.port)
    net.until(lambda: full_mesh(net))
    b.send(b.nodes[a.myself.id], bus_msg.GOTJOB, ["D-" + "x" * 38, 0])
    net.until(lambda: got)
    sender, mtype, _flags, payload = got[0]
    assert mtype == bus_msg.GOTJOB and sender.id == b.myself.id and payload[1] == 0
    # a JOBS frame carries several job messages; each reaches the handler on its own
    b.send(b.nodes[a.myself.id], bus_msg.JOBS, [[bus_msg.WORKING, 0, ["j1", 0]], [bus_msg.DELJOB, 0, ["j2", 0]]])
    net.until(lambda: len(got) == 3)
    assert [m[1] for m in got[1:]] == [bus_msg.WORKING, bus_msg.DELJOB]
    # from a node it does not know, nothing is handed over
    stranger = net.add("stranger")
    stranger.transport.connect(a.myself.id, "127.0.0.1", a.myself.port + 10000)
    for _ in range(40):          # resent while the link comes up: messages are never queued
        stranger.send(a.myself, bus_msg.GOTJOB, ["x", 0])
        net.step()
    assert stranger.transport.sent > 0
    assert len(got) == 3


def test_malformed_frames_are_ignored():
    assert bus_msg.decode(b"\x00garbage") is None
    assert bus_msg.decode(bus_msg.encode(99, "a" * 40, "", 1, 0, 0, None)) is None
    assert bus_msg.decode(bus_msg.encode(bus_msg.PING, "short", "", 1, 0, 0, [])) is None
    assert bus_msg.decode(bus_msg.encode(bus_msg.PING, "a" * 40, "", 1, 0, 0, [["x"]])) is None
    ok = bus_msg.decode(bus_msg.encode(bus_msg.PING, "a" * 40, "127.0.0.1", 7711, 0, 0, []))
    assert ok is not None and ok.name == "PING"


def test_a_bus_opened_late_opens_on_first_use_and_tells_its_owner_once(net, tmp_path):
    """A node opens its bus after it served its first clients (disque/server.py,
    Node.open_bus): until then nothing of ZeroMQ exists, a graceful stop does not open it
    just to say goodbye, and the first use (a command such as CLUSTER MEET) opens it and
    tells the owner (the relay adds its readers) exactly once."""
    from disque.bus.cluster import Cluster
    lease = lease_port()
    c = Cluster(lease.port, ["127.0.0.1"], NODE_TIMEOUT, str(tmp_path / "late.conf"),
                open_bus=False)
    try:
        opened = []
        c.on_bus_open = lambda: opened.append(c.bus_open)
        assert not c.bus_open and c.ctx is None
        c.goodbye()
        assert not c.bus_open and opened == []
        b = net.add("b")
        c.meet("127.0.0.1", b.myself.port)          # the first use opens the bus
        assert opened == [True]
        assert c.open_bus() is c.transport          # opening again is a no-op
        assert opened == [True]
        net.nodes["late"] = c
        net.until(lambda: c.myself.id in ids(b) and b.myself.id in ids(c),
                  message="the late bus did not meet")
    finally:
        net.nodes.pop("late", None)
        c.close()
        lease.release()
