"""Cluster membership on real server processes: failure flags after SIGKILL and their
clearing, identity across restarts, FORGET, RESET, MEET argument errors, LEAVING, HELLO
priorities, CLUSTER INFO / NODES (SPEC 4.1, 4.2, 10.5, 10.6)."""
import time

from support.info import parse_info
from support.resp_client import NULL_ARRAY, Err, RawConn, Status, encode_command
from support.waits import wait_until


def hello_priorities(node):
    """HELLO as {node id: priority} (priorities are bulk strings, SPEC 4.1)."""
    reply = node.execute("HELLO")
    assert reply[0] == 1
    return {e[0].decode(): e[3].decode() for e in reply[2:]}


def nodes_lines(node):
    return node.execute("CLUSTER", "NODES").decode().splitlines()


def test_sigkill_gives_pfail_then_fail_on_agreement_and_restart_clears_it(start_cluster):
    c = start_cluster(3)
    victim = c.ids[2]
    # Cut node 1 off the bus first: node 0 then has nobody to agree with, so it can only
    # suspect the killed node (fail?), never declare it failed (3 nodes: quorum is 2).
    assert c[1].execute("DEBUG", "BUS", "DROP-ALL") == Status(b"OK")
    c.kill(2)
    wait_until(lambda: "fail?" in c.flags_of(0, 2), timeout=10,
               message="node 0 never suspected the killed node")
    assert hello_priorities(c[0])[victim] == "10"          # PFAIL: priority 10
    # the cut-off node is suspected as well (its pings time out the same way)
    wait_until(lambda: c.flags_of(0, 1) == ["fail?"], timeout=10)
    assert c.cluster_info(0)["cluster_reachable_nodes"] == "0"
    # without a second opinion the suspicion stays a suspicion
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert "fail" not in c.flags_of(0, 2), c.flags_of(0, 2)
        time.sleep(0.1)
    # heal node 1: its report about the dead node makes a majority -> FAIL on both
    assert c[1].execute("DEBUG", "BUS", "RESTORE") == Status(b"OK")
    for obs in (0, 1):
        wait_until(lambda obs=obs: c.flags_of(obs, 2) == ["fail"], timeout=10,
                   message=f"node {obs} never marked the killed node as failed")
    assert hello_priorities(c[0])[victim] == "100"
    assert hello_priorities(c[1])[victim] == "100"
    c.wait_mesh([0, 1])
    assert c.cluster_info(0)["cluster_size"] == "3"         # failing nodes still count
    assert c.cluster_info(0)["cluster_reachable_nodes"] == "1"
    line = [l for l in nodes_lines(c[0]) if l.startswith(victim)][0]
    assert line.split(" ")[5] == "disconnected"

    # restart: same node ID (nodes.conf), rejoins without a MEET, flags cleared everywhere
    c.restart(2)
    assert c[2].execute("CLUSTER", "MYID").decode() == victim
    c.wait_mesh(timeout=15)
    for obs in (0, 1):
        wait_until(lambda obs=obs: c.flags_of(obs, 2) == ["noflags"], timeout=10)
        assert hello_priorities(c[obs])[victim] == "1"
    assert c.flags_of(2, 2) == ["myself"]
    conf = (c[2].workdir / "nodes.conf").read_text().splitlines()
    assert len(conf) == 3 and [l for l in conf if "myself" in l][0].startswith(victim)


def test_cluster_info_and_nodes_format(start_cluster):
    c = start_cluster(3)
    raw = c[0].execute("CLUSTER", "INFO")
    lines = raw.decode().split("\r\n")
    assert lines[-1] == "" and [l.split(":")[0] for l in lines[:-1]] == [
        "cluster_state", "cluster_known_nodes", "cluster_reachable_nodes", "cluster_size",
        "cluster_stats_messages_sent", "cluster_stats_messages_received"]
    info = parse_info(raw)
    assert info["cluster_state"] == "ok"
    assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"],
            info["cluster_size"]) == ("3", "2", "3")
    sent = int(info["cluster_stats_messages_sent"])
    received = int(info["cluster_stats_messages_received"])
    assert sent > 0 and received > 0
    wait_until(lambda: int(c.cluster_info(0)["cluster_stats_messages_sent"]) > sent, timeout=5)
    wait_until(lambda: int(c.cluster_info(0)["cluster_stats_messages_received"]) > received,
               timeout=5)

    lines = nodes_lines(c[1])
    assert len(lines) == 3
    by_id = {}
    for line in lines:
        f = line.split(" ")
        assert len(f) == 6, line
        ip, port = f[1].rsplit(":", 1)
        assert ip == "127.0.0.1"
        by_id[f[0]] = (int(port), f[2], f[5])
    assert by_id[c.ids[1]][1] == "myself"
    for i in range(3):
        port, flags, link = by_id[c.ids[i]]
        assert port == c[i].port and link == "connected"
        if i != 1:
            assert flags == "noflags"
    assert c[1].execute("CLUSTER", "MYID").decode() == c.ids[1]

    # a MEET to nothing leaves a handshake node: known (and HELLO, priority 5 - no link)
    # but not part of the cluster size; it is dropped after the handshake timeout
    assert c[0].execute("CLUSTER", "MEET", "127.0.0.1", 1) == Status(b"OK")
    info = c.cluster_info(0)
    assert (info["cluster_known_nodes"], info["cluster_size"]) == ("4", "3")
    hs = [l for l in nodes_lines(c[0]) if "handshake" in l]
    assert len(hs) == 1 and hs[0].split(" ")[1] == "127.0.0.1:1"
    prios = hello_priorities(c[0])
    assert len(prios) == 4 and prios[hs[0].split(" ")[0]] == "5"
    wait_until(lambda: c.cluster_info(0)["cluster_known_nodes"] == "3", timeout=10,
               message="handshake node never dropped")


def test_cluster_argument_errors(start_server):
    node = start_server(workers=1)
    bad_addr = b"ERR Invalid node address specified: "
    cases = [
        (("MEET", "127.0.0.1", "abc"), Err(b"ERR Invalid TCP port specified: abc")),
        (("MEET", "127.0.0.1", "12x"), Err(b"ERR Invalid TCP port specified: 12x")),
        (("MEET", "localhost", "7711"), Err(bad_addr + b"localhost:7711")),
        (("MEET", "999.1.1.1", "7711"), Err(bad_addr + b"999.1.1.1:7711")),
        (("MEET", "127.0.0.1", "0"), Err(bad_addr + b"127.0.0.1:0")),
        (("MEET", "127.0.0.1", "-5"), Err(bad_addr + b"127.0.0.1:-5")),
        (("MEET", "127.0.0.1", "55536"), Err(bad_addr + b"127.0.0.1:55536")),
        (("MEET", "127.0.0.1"), Err(b"ERR Wrong CLUSTER subcommand or number of arguments")),
        (("NOSUCH",), Err(b"ERR Wrong CLUSTER subcommand or number of arguments")),
        (("NODES", "x"), Err(b"ERR Wrong CLUSTER subcommand or number of arguments")),
        (("FORGET", "abc"), Err(b"ERR Invalid node identifier")),
        (("FORGET", "f" * 40), Err(b"ERR Unknown node " + b"f" * 40)),
        (("RESET", "MEDIUM"), Err(b"ERR syntax error")),
        (("LEAVING", "maybe"), Err(b"ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")),
    ]
    for args, expected in cases:
        assert node.execute("CLUSTER", *args) == expected, args
    myid = node.execute("CLUSTER", "MYID")
    assert node.execute("CLUSTER", "FORGET", myid) == Err(
        b"ERR I tried hard but I can't forget myself...")
    # valid literals are accepted, IPv6 included (the handshake simply never completes)
    assert node.execute("CLUSTER", "MEET", "::1", "55535") == Status(b"OK")
    assert node.execute("CLUSTER", "MEET", "127.0.0.1", "+0002") == Status(b"OK")
    assert parse_info(node.execute("CLUSTER", "INFO"))["cluster_size"] == "1"
    assert node.execute("DEBUG", "BUS", "SIDEWAYS") == Err(
        b"ERR DEBUG BUS takes DROP-IN, DROP-OUT, DROP-ALL or RESTORE")


def test_forget_removes_a_node_and_gossip_does_not_bring_it_back(start_cluster):
    c = start_cluster(3)
    assert c[0].execute("CLUSTER", "FORGET", c.ids[2]) == Status(b"OK")
    assert c.flags_of(0, 2) is None
    info = c.cluster_info(0)
    assert (info["cluster_known_nodes"], info["cluster_size"]) == ("2", "2")
    assert c.ids[2] not in (c[0].workdir / "nodes.conf").read_text()
    # node 1 keeps gossiping about node 2 and node 2 keeps pinging node 0: the 60 s
    # blacklist keeps it out (sampled over several gossip rounds)
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        assert c.flags_of(0, 2) is None
        assert c.cluster_info(0)["cluster_known_nodes"] == "2"
        time.sleep(0.2)
    assert c.ids[2] not in hello_priorities(c[0])
    # a job needing 3 copies cannot be made on node 0 any more
    assert c[0].execute("ADDJOB", "q", "x", 0, "REPLICATE", 3) == Err(
        b"NOREPL Not enough reachable nodes for the requested replication level")


def test_reset_hard_gives_a_new_id_and_soft_keeps_it(start_cluster):
    c = start_cluster(3)
    old = c.ids[2]
    jid = c[2].execute("ADDJOB", "rq", "x", 0, "REPLICATE", 1)
    assert type(jid) is Status
    assert c[2].execute("CLUSTER", "RESET", "HARD") == Status(b"OK")
    new = c[2].execute("CLUSTER", "MYID").decode()
    assert new != old and len(new) == 40 and all(ch in "0123456789abcdef" for ch in new)
    info = c.cluster_info(2)
    assert (info["cluster_known_nodes"], info["cluster_size"]) == ("1", "1")
    assert c[2].execute("SHOW", jid) is None and c[2].execute("QLEN", "rq") == 0
    assert nodes_lines(c[2]) == [l for l in nodes_lines(c[2]) if l.startswith(new)]
    conf = (c[2].workdir / "nodes.conf").read_text()
    assert new in conf and old not in conf
    # the new identity joins again with a MEET and the others learn it
    assert c[2].execute("CLUSTER", "MEET", "127.0.0.1", c[0].port) == Status(b"OK")
    c.ids[2] = new
    for obs in (0, 1):
        wait_until(lambda obs=obs: c.flags_of(obs, 2) == ["noflags"], timeout=15,
                   message="the reset node did not rejoin under its new ID")
    wait_until(lambda: c.cluster_info(2)["cluster_reachable_nodes"] == "2", timeout=15)
    # the old identity, at the same address, never answers again: the others suspect it
    # (fail?; with 4 known nodes FAIL needs 2 reports, and the reset node cannot report its
    # own old identity), and replication to the new one works (both share one address)
    for obs in (0, 1):
        wait_until(lambda obs=obs: any(l.startswith(old) and l.split(" ")[2] in ("fail?", "fail")
                                       for l in nodes_lines(c[obs])), timeout=15,
                   message="the old identity of the reset node never failed")
    for _ in range(5):
        jid = c[0].execute("ADDJOB", "rq2", "x", 3000, "REPLICATE", 3)
        assert type(jid) is Status, jid
        owners = c[0].execute("SHOW", jid)[21]
        assert new.encode() in owners and old.encode() not in owners

    # SOFT forgets the other nodes but keeps the identity; jobs go, consumers get a null
    jid = c[1].execute("ADDJOB", "sq", "x", 0, "REPLICATE", 1)
    with RawConn(c[1].port) as consumer:
        consumer.send(encode_command("GETJOB", "TIMEOUT", 0, "FROM", "other"))
        wait_until(lambda: parse_info(c[1].execute("INFO", "clients"))["blocked_clients"] == "1",
                   timeout=5)
        assert c[1].execute("CLUSTER", "RESET", "SOFT") == Status(b"OK")
        assert consumer.read_parsed(timeout=5) is NULL_ARRAY
    assert c[1].execute("CLUSTER", "MYID").decode() == c.ids[1]
    assert c.cluster_info(1)["cluster_known_nodes"] == "1"
    assert c[1].execute("SHOW", jid) is None and c[1].execute("QLEN", "sq") == 0
    assert c[0].execute("CLUSTER", "RESET") == Status(b"OK")
    assert c[0].execute("CLUSTER", "MYID").decode() == c.ids[0]


def test_leaving_flag_hello_priority_and_persistence(start_cluster):
    c = start_cluster(3)
    assert c[2].execute("CLUSTER", "LEAVING") == Status(b"no")
    assert c[2].execute("CLUSTER", "LEAVING", "yes") == Status(b"OK")
    assert c[2].execute("CLUSTER", "LEAVING") == Status(b"yes")
    assert c.flags_of(2, 2) == ["myself", "leaving"]
    for obs in (0, 1):
        wait_until(lambda obs=obs: c.flags_of(obs, 2) == ["leaving"], timeout=5)
        assert hello_priorities(c[obs])[c.ids[2]] == "100"
        wait_until(lambda obs=obs: c.cluster_info(obs)["cluster_reachable_nodes"] == "1",
                   timeout=5)
    assert hello_priorities(c[0])[c.ids[1]] == "1"
    assert hello_priorities(c[2])[c.ids[2]] == "100"
    conf = (c[2].workdir / "nodes.conf").read_text().splitlines()
    assert [l for l in conf if l.startswith(c.ids[2])][0].split(" ")[2] == "myself,leaving"
    # persisted: still leaving after a restart
    c.kill(2)
    c.restart(2)
    assert c[2].execute("CLUSTER", "LEAVING") == Status(b"yes")
    assert c[2].execute("CLUSTER", "LEAVING", "NO") == Status(b"OK")
    for obs in (0, 1):
        wait_until(lambda obs=obs: c.flags_of(obs, 2) == ["noflags"], timeout=15)
        wait_until(lambda obs=obs: hello_priorities(c[obs])[c.ids[2]] == "1", timeout=5)
    c.wait_mesh(timeout=15)
