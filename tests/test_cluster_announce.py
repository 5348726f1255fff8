"""Announced addresses (docs/cluster.md, "Announced addresses"): three nodes, each in its own
network namespace behind a NAT (faults/netns.py, `Net.nat`). A node binds its namespace
address and the ports P (client), P + 10000 (bus) and J, J + 1 (job links); the other nodes
and the clients reach it only at another address (10.78.1.x) and other ports, which iptables
translates (DNAT); the bound ports are closed to the bridge.

With cluster-announce-ip / -port / -bus-port / -job-link-port telling the public address
and ports, the nodes form a cluster, HELLO and CLUSTER NODES show the public addresses, and
jobs are replicated worker to worker over the job links. Without them each node tells the
address it binds, which no other node can reach: the handshake never completes, as with
the original (antirez/disque #164, #85, #118). Needs root, iproute2 and iptables."""
import os
import shutil
import subprocess
import sys

import msgpack
import pytest

from support.waits import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from disque.bus.announce import announce  # noqa: E402
from disque.bus.nodes import Node as BusNode, NodesFile, node_address  # noqa: E402
from disque.config import ConfigError, parse_command_line  # noqa: E402
from disque.contracts import bus_messages as bus_msg  # noqa: E402
from disque.harness import node as harness  # noqa: E402
from faults.netns import Net  # noqa: E402

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables")
    or not shutil.which("redis-cli"),
    reason="network namespaces need root, iproute2, iptables (and redis-cli for the clients)")

N = 3
WORKERS = 2
PORT, BUS, LINKS = 7711, 17711, 7800                # bound inside each namespace
PUBLIC_PORT, PUBLIC_BUS, PUBLIC_LINKS = 8711, 19711, 8800   # the NAT's ports (bus != 8711 + 10000)
NET = Net("dqa-", "10.78.0.")                       # not the fault harness' namespaces


def public_ip(i):
    return "10.78.1.%d" % (10 + i)


def cli(i, *args, timeout=5):
    """One command to node i at its public address, from the clients' namespace."""
    try:
        r = subprocess.run(["ip", "netns", "exec", NET.client, "redis-cli", "-h", public_ip(i),
                            "-p", str(PUBLIC_PORT), *map(str, args)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0 or r.stdout.startswith("Could not connect"):
        return None
    return r.stdout.strip()


def announce_args(i):
    return ["--cluster-announce-ip", public_ip(i), "--cluster-announce-port", PUBLIC_PORT,
            "--cluster-announce-bus-port", PUBLIC_BUS,
            "--cluster-announce-job-link-port", PUBLIC_LINKS]


def start_nodes(root, announce):
    """NET set up, every node behind its NAT and started; the nodes (to stop) in a list."""
    NET.setup(N)
    nat = {PUBLIC_PORT: PORT, PUBLIC_BUS: BUS}
    nat.update({PUBLIC_LINKS + w: LINKS + w for w in range(WORKERS)})
    for i in range(N):
        NET.nat(N, i, public_ip(i), nat)
    nodes = []
    for i in range(N):
        d = os.path.join(root, "n%d" % i)
        os.makedirs(d)
        extra = ["--cluster-node-timeout", 2000, "--dir", d, "--cluster-job-links", "direct",
                 "--cluster-job-link-port", LINKS] + (announce_args(i) if announce else [])
        node = harness.Node(harness.disque_argv(PORT, WORKERS, *extra, host=NET.node_addr(i)),
                            port=PORT, host=NET.node_addr(i), cwd=d,
                            env=harness.checkout_env(ROOT), log_path=os.path.join(d, "node.log"),
                            prefix=["ip", "netns", "exec", NET.node_ns(i)],
                            ready=lambda node, i=i: cli(i, "PING") == "PONG",
                            call=lambda node, *a, i=i: cli(i, *a), label="node %d" % i)
        node.poll_interval = 0.2
        nodes.append(node)
        node.spawn()
    for node in nodes:
        node.wait_ready(30)
    return nodes


def stop_nodes(nodes):
    try:
        for node in nodes:
            node.stop()
    finally:
        NET.cleanup()          # whatever is left in the namespaces, by PID, and the namespaces


def meet_all():
    for j in range(1, N):
        assert cli(0, "CLUSTER", "MEET", public_ip(j), PUBLIC_PORT, PUBLIC_BUS) == "OK"


def node_lines(i):
    text = cli(i, "CLUSTER", "NODES") or ""
    return [line.split() for line in text.splitlines() if line.strip()]


def formed(i):
    lines = node_lines(i)
    return (len(lines) == N and all(fields[-1] == "connected" for fields in lines)
            and not any(flag in fields[2] for fields in lines
                        for flag in ("handshake", "fail", "noaddr")))


def links(i):
    """INFO cluster of node i as a dict (redis-cli prints it with \n line ends)."""
    text = cli(i, "INFO", "cluster") or ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_announced_addresses_form_a_cluster_through_nat(tmp_path):
    nodes = []
    try:
        nodes = start_nodes(str(tmp_path), announce=True)
        assert cli(0, "CONFIG", "GET", "cluster-announce-ip").split("\n") == \
            ["cluster-announce-ip", public_ip(0)]
        meet_all()
        for i in range(N):
            wait_until(lambda: formed(i), timeout=20, interval=0.2,
                       message="node %d: the cluster did not form: %r" % (i, node_lines(i)))
        # CLUSTER NODES, myself included, and HELLO: the public addresses and bus port only
        public = {"%s:%d@%d" % (public_ip(j), PUBLIC_PORT, PUBLIC_BUS) for j in range(N)}
        for i in range(N):
            lines = node_lines(i)
            assert {fields[1] for fields in lines} == public, lines
            mine = [fields for fields in lines if "myself" in fields[2]]
            assert mine[0][1] == "%s:%d@%d" % (public_ip(i), PUBLIC_PORT, PUBLIC_BUS)
        hello = cli(1, "HELLO").split("\n")
        addresses = {(hello[k + 1], hello[k + 2]) for k in range(2, len(hello) - 3, 4)}
        assert addresses == {(public_ip(j), str(PUBLIC_PORT)) for j in range(N)}, hello
        # the job links: told as the public ports, listening on the bound ones, all up
        for i in range(N):
            assert links(i)["cluster_job_link_ports"] == "%d,%d" % (LINKS, LINKS + 1)
            wait_until(lambda: int(links(i)["cluster_job_links_up"]) == WORKERS * WORKERS * (N - 1),
                       timeout=20, interval=0.2,
                       message="node %d: job links not up: %r" % (i, links(i)))
        sent_before = sum(int(links(i)["cluster_job_messages_direct_sent"]) for i in range(N))
        ids = []
        for k in range(6):
            jid = cli(k % N, "ADDJOB", "natq", "body%d" % k, 5000, "REPLICATE", N)
            assert jid and jid.startswith("D-"), jid
            ids.append(jid)
        for i in range(N):
            for jid in ids:
                shown = cli(i, "SHOW", jid)
                assert shown and "natq" in shown, (i, jid, shown)
        assert sum(int(cli(i, "QLEN", "natq")) for i in range(N)) == len(ids)
        sent_after = sum(int(links(i)["cluster_job_messages_direct_sent"]) for i in range(N))
        assert sent_after - sent_before >= len(ids) * (N - 1)   # REPLJOB at least, worker to worker
        for node in nodes:
            assert node.is_alive()
    finally:
        stop_nodes(nodes)


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_without_announcing_the_same_nat_keeps_the_nodes_apart(tmp_path):
    nodes = []
    try:
        nodes = start_nodes(str(tmp_path), announce=False)
        meet_all()
        # node 1 hears node 0's MEET (sent to its public address), but is told node 0 is at
        # the address it binds, which nobody outside node 0's namespace reaches: its PONG
        # never arrives, and node 0 gives the handshake up, as the original does
        own = "%s:%d" % (NET.node_addr(0), PORT)
        wait_until(lambda: any(fields[1] == own for fields in node_lines(1)), timeout=10,
                   interval=0.2, message="node 1 never heard node 0's MEET")
        log0 = os.path.join(str(tmp_path), "n0", "node.log")
        wait_until(lambda: all("Handshake with %s:%d@%d timed out" % (public_ip(j), PUBLIC_PORT,
                                                                        PUBLIC_BUS) in open(log0).read()
                               for j in range(1, N)),
                   timeout=20, interval=0.2, message="node 0's handshakes did not time out")
        assert len(node_lines(0)) == 1
        for i in range(N):
            assert not formed(i)
            reply = cli(i, "ADDJOB", "natq", "body", 1000, "REPLICATE", N)
            assert reply.startswith("NOREPL"), (i, reply)
    finally:
        stop_nodes(nodes)


# ---- the parts, without namespaces ------------------------------------------------------


@pytest.mark.unit
def test_what_a_node_tells_defaults_to_what_it_binds():
    assert announce(7711, ["10.0.0.5"]) == (("10.0.0.5", 7711, 17711, 0))
    assert announce(7711, ["0.0.0.0"]).ip == ""          # the receiver takes the peer address
    told = announce(7711, ["0.0.0.0"], "203.0.113.7", 8711, 19711, 8800)
    assert (told.ip, told.port, told.bus_port, told.cport) == ("203.0.113.7", 8711, 19711, 19711)
    assert announce(7711, ["10.0.0.5"], announce_port=8711, announce_bus_port=18711).cport == 0
    assert told.job_link_ports([40001, 40002]) == [8800, 8801]
    assert announce(7711, ["10.0.0.5"]).job_link_ports([40001, 40002]) == [40001, 40002]
    assert told.job_link_ports([]) == []


@pytest.mark.unit
def test_bad_announce_values_are_refused_with_one_line():
    for args, word in ((["--cluster-announce-ip", "node-a.example"], "cluster-announce-ip"),
                       (["--cluster-announce-port", "65536"], "cluster-announce-port"),
                       (["--cluster-announce-bus-port", "-1"], "cluster-announce-bus-port"),
                       (["--cluster-job-link-port", "x"], "cluster-job-link-port"),
                       (["--cluster-announce-job-link-port", "70000"],
                        "cluster-announce-job-link-port")):
        with pytest.raises(ConfigError) as info:
            parse_command_line(args)
        assert word in info.value.one_line and "\n" not in info.value.one_line
    cfg = parse_command_line(["--cluster-announce-ip", "2001:db8::7", "--cluster-announce-port", "1"])
    assert (cfg.cluster_announce_ip, cfg.cluster_announce_port) == ("2001:db8::7", 1)
    assert parse_command_line(["--cluster-announce-ip", ""]).cluster_announce_ip is None


@pytest.mark.unit
def test_a_bus_port_travels_only_when_it_is_not_port_plus_10000():
    sender = "a" * 40
    plain = bus_msg.decode(bus_msg.encode(bus_msg.PING, sender, "10.0.0.5", 7711, 0, 0, []))
    assert plain.cport == 0 and len(msgpack.unpackb(bus_msg.encode(bus_msg.PING, sender, "", 7711, 0, 0, []))) == 7
    told = bus_msg.decode(bus_msg.encode(bus_msg.PING, sender, "10.0.0.5", 8711, 0, 0, [], 19711))
    assert (told.port, told.cport) == (8711, 19711)
    assert bus_msg.decode(bus_msg.encode(bus_msg.PING, sender, "10.0.0.5", 8711, 0, 0, [], 70000)) is None
    entry = ["b" * 40, 0, 0, "10.0.0.6", 8712, 0]
    assert bus_msg.decode(bus_msg.encode(bus_msg.PONG, sender, "", 8711, 0, 0, [entry, entry + [19712]])) is not None
    assert bus_msg.decode(bus_msg.encode(bus_msg.PONG, sender, "", 8711, 0, 0, [entry + [0]])) is None
    assert node_address("10.0.0.6", 8712, 18712) == ("10.0.0.6", 8712, 0)    # the implicit one
    assert node_address("10.0.0.6", 60000) is None            # no bus port 70000
    assert node_address("10.0.0.6", 60000, 19000) == ("10.0.0.6", 60000, 19000)


@pytest.mark.unit
def test_nodes_conf_writes_and_reads_the_bus_port_as_redis_does(tmp_path):
    f = NodesFile(str(tmp_path / "nodes.conf"))
    me = BusNode("a" * 40, "203.0.113.7", 8711, bus_msg.MYSELF, 19711)
    other = BusNode("b" * 40, "10.0.0.6", 7712)
    f.save(me, [me, other])
    text = (tmp_path / "nodes.conf").read_text()
    assert "203.0.113.7:8711@19711 myself" in text and "10.0.0.6:7712 noflags" in text
    mine, others = f.load()
    assert (mine.address, mine.bus_port) == (("203.0.113.7", 8711, 19711), 19711)
    assert (others[0].address, others[0].bus_port) == (("10.0.0.6", 7712, 0), 17712)


@pytest.mark.server
def test_job_link_ports_past_65535_stop_the_start(start_server):
    srv = start_server(workers=2, extra_args=["--cluster-job-link-port", "65535"], wait=False)
    assert srv.wait_exit(15) not in (None, 0), srv.log_tail()
    out = srv.log_text()
    assert "Traceback" not in out and "cluster-job-link-port 65535 + 2 workers" in out, out


@pytest.mark.server
def test_cluster_meet_takes_a_bus_port(start_server):
    srv = start_server(workers=1)
    r = srv.client()
    assert r.execute_command("CLUSTER", "MEET", "127.0.0.1", 1, 19711) in (b"OK", "OK", True)
    assert "127.0.0.1:1@19711" in r.execute_command("CLUSTER", "NODES").decode()
    with pytest.raises(Exception, match="Invalid TCP bus port"):
        r.execute_command("CLUSTER", "MEET", "127.0.0.1", 1, 0)
