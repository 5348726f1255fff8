"""Direct job links (docs/design.md, "Direct job links"): the job messages between nodes
go from the worker that owns a job to the worker that owns it on the other node, over
TCP, with the front-ends off the path; what has no link up goes on the bus as before.

Real nodes on loopback; the hostile cases use a bus member run in this process (as in
test_bus_hostile_member.py) and raw TCP connections to a worker's job link port."""
import collections
import os
import signal
import socket
import struct
import time

import msgpack
import pytest

from support.info import parse_info
from support.jobs import show
from support.resp_client import Err, RawConn
from support.slots import queues_on_distinct_workers
from support.waits import wait_until
from test_bus_hostile_member import GARBAGE, copy_of_new_job, joined, member  # noqa: F401 (fixture)
from test_config import parse_error
from disque.config import Config
from disque.contracts import bus_messages as bus_msg
from disque.workers.job_links import HELLO, VERSION
from support.jobs import addjob
from support.resp_client import Err

pytestmark = [pytest.mark.cluster]

# said outright: DISQUE_TEST_JOB_LINKS=bus runs the rest of the suite without the links
DIRECT = ["--cluster-job-links", "direct"]


def links_info(node):
    return parse_info(node.execute("INFO", "cluster"))


def counter(node, name):
    return int(links_info(node)[name])


def wait_links_up(c, per_node):
    """Every node's workers have `per_node` outgoing links up."""
    for node in c.nodes:
        wait_until(lambda: counter(node, "cluster_job_links_up") == per_node, timeout=15,
                   message="direct job links did not come up on port %d" % node.port)


def replicate_and_ack(c, origin, queue, n=20):
    """n jobs with a copy on every node, from node `origin`: each has its copies on every node; then
    acked, each is gone from every node."""
    with RawConn(c[origin].port) as r:
        ids = [addjob(r, queue, b"body%d" % i, 5000, "REPLICATE", len(c)) for i in range(n)]
    for i in range(len(c)):
        with RawConn(c[i].port) as r:
            for jid in ids:
                copy = show(r, jid)
                assert copy is not None and copy[b"body"].startswith(b"body"), (i, jid)
    with RawConn(c[(origin + 1) % len(c)].port) as r:
        assert r.execute("ACKJOB", *ids) == n

    def gone():
        for node in c.nodes:
            with RawConn(node.port) as r:
                if any(show(r, jid) is not None for jid in ids):
                    return False
        return True
    wait_until(gone, timeout=15, message="acked jobs still known somewhere")
    return ids


def test_replication_and_acks_go_worker_to_worker(start_cluster):
    c = start_cluster(3, workers=2, extra_args=DIRECT)
    wait_links_up(c, per_node=2 * 2 * 2)        # 2 workers, each to 2 nodes x 2 workers
    before = [links_info(node) for node in c.nodes]
    for origin in range(3):
        replicate_and_ack(c, origin, "direct-q%d" % origin)
    for i, node in enumerate(c.nodes):
        info = links_info(node)
        assert info["cluster_job_links"] == "direct"
        assert len(info["cluster_job_link_ports"].split(",")) == 2
        # every node sent copies, GOTJOBs, SETACKs ... directly and received them
        assert int(info["cluster_job_messages_direct_sent"]) >= \
            int(before[i]["cluster_job_messages_direct_sent"]) + 20, info
        assert int(info["cluster_job_messages_direct_received"]) >= \
            int(before[i]["cluster_job_messages_direct_received"]) + 20, info
        assert info["cluster_job_links_refused"] == "0"


def test_a_big_copy_on_its_way_is_not_sent_again(start_cluster):
    """The 50 ms rule (SPEC 3.1: one more node, and the REPLJOB again to the nodes that did
    not answer) waits as long as a big copy takes to cross (RESEND_BYTES_PER_MS) and skips
    a link whose output has not left: 24 MB take longer than 50 ms to cross, and each
    resend queued another copy behind the first (11 messages for 2 copies) until the link
    was dropped as stalled and the copies went by the bus."""
    c = start_cluster(3, workers=1, extra_args=DIRECT)
    wait_links_up(c, per_node=2)
    before = links_info(c[0])
    body = os.urandom(24 << 20)
    with RawConn(c[0].port, timeout=60) as r:
        jid = addjob(r, "big-copy-q", body, 60000, "REPLICATE", 3)
    after = links_info(c[0])
    sent = int(after["cluster_job_messages_direct_sent"]) - int(before["cluster_job_messages_direct_sent"])
    assert sent <= 4, "%d job messages for one copy on each of 2 nodes" % sent
    assert after["cluster_job_messages_by_bus"] == before["cluster_job_messages_by_bus"]
    for node in c.nodes[1:]:
        with RawConn(node.port, timeout=60) as r:
            assert r.execute("SHOW", jid) is not None
    assert "not taken, dropped" not in c[0].log_text()


def test_cluster_job_links_bus_keeps_job_messages_on_the_bus(start_cluster):
    c = start_cluster(3, workers=2, extra_args=["--cluster-job-links", "bus"])
    replicate_and_ack(c, 0, "bus-q")
    for node in c.nodes:
        info = links_info(node)
        assert info["cluster_job_links"] == "bus" and info["cluster_job_link_ports"] == ""
        assert info["cluster_job_links_up"] == "0"
        assert info["cluster_job_messages_direct_sent"] == "0"
        assert node.execute("CONFIG", "GET", "cluster-job-links") == [b"cluster-job-links", b"bus"]


def test_a_node_without_links_in_a_cluster_with_them(start_cluster, start_server):
    """Node 2 keeps its job messages on the bus; the others link to each other only, and
    reach node 2 by the bus: replication works from and to every node."""
    c = start_cluster(2, workers=2, extra_args=DIRECT, join=False)
    args = ["--cluster-node-timeout", "2000", "--cluster-job-links", "bus"]
    c.nodes.append(start_server(workers=1, extra_args=args))
    c.ids.append(c.nodes[2].execute("CLUSTER", "MYID").decode())
    c.join()
    wait_until(lambda: counter(c[0], "cluster_job_links_up") == 4 and
               counter(c[1], "cluster_job_links_up") == 4, timeout=15)
    for origin in range(3):
        replicate_and_ack(c, origin, "mixed-q%d" % origin, n=10)
    assert counter(c[2], "cluster_job_messages_direct_sent") == 0
    assert int(links_info(c[0])["cluster_job_messages_by_bus"]) > 0


def worker_pid(node, k):
    for line in node.execute("INFO", "workers").decode().splitlines():
        if line.startswith("worker%d:" % k):
            return int(line.split("pid=")[1].split(",")[0])
    raise AssertionError("no worker%d" % k)


def test_a_restarted_worker_takes_its_links_on_the_same_port(start_cluster):
    c = start_cluster(3, workers=2, extra_args=DIRECT)
    wait_links_up(c, per_node=8)
    ports = links_info(c[1])["cluster_job_link_ports"]
    pid = worker_pid(c[1], 0)
    os.kill(pid, signal.SIGKILL)
    c[1]._tracked.pop(pid, None)
    wait_until(lambda: worker_pid(c[1], 0) != pid, timeout=15, message="worker not restarted")
    assert links_info(c[1])["cluster_job_link_ports"] == ports
    # the other nodes' links to the dead process broke; they connect again (RETRY_MS)
    wait_links_up(c, per_node=8)
    replicate_and_ack(c, 0, "restart-q", n=30)
    replicate_and_ack(c, 1, "restart-q", n=30)


def healthy_nodes_conf(path):
    """nodes.conf as a settled cluster leaves it: every other node answered its last PING
    (pong_received set, no PING outstanding), so nothing in the file asks for a PING."""
    lines = []
    for line in path.read_text().splitlines():
        parts = line.split(" ")
        if len(parts) == 6 and "myself" not in parts[2]:
            parts[3], parts[4] = "0", "1"
        lines.append(" ".join(parts))
    path.write_text("\n".join(lines) + "\n")


def test_a_cluster_restarted_whole_links_up_at_once(start_cluster):
    """Every node killed and started again on its files: each pings every node it read back
    at once, with its workers' new job link ports, so the links are up a few crons after
    the nodes answer, not when the once-a-second random PING or node_timeout / 2 comes
    round (1-3 s with 5 nodes before), while every copy takes the bus."""
    c = start_cluster(3, workers=1, extra_args=DIRECT, node_timeout=20000)
    wait_links_up(c, per_node=2)
    for i in range(len(c)):
        c.kill(i)
    for node in c.nodes:
        healthy_nodes_conf(node.workdir / "nodes.conf")
    for node in c.nodes:
        node.spawn(port=node.port)
    for node in c.nodes:
        node.wait_ready()
    ready = time.monotonic()
    for node in c.nodes:
        wait_until(lambda: counter(node, "cluster_job_links_up") == 2, timeout=15,
                   message="direct job links did not come up on port %d" % node.port)
    # the first random PING is 10 crons (1 s) after a start; the links come 0.1-0.3 s
    # after the last node answers
    assert time.monotonic() - ready < 0.7
    replicate_and_ack(c, 2, "whole-restart-q", n=10)


DOWN_S = 1.5    # the fault itself: ZeroMQ's reconnect back-off to the node has grown to 800 ms


def test_a_restarted_node_links_to_the_others_at_once(start_cluster):
    """One node killed, down for a second, started again: the others' bus links to it wait
    in ZeroMQ's reconnect back-off, so their PONGs to its first PINGs (and their job link
    ports with them) are dropped. Each makes its link again when it cannot answer a node it
    hears from, and PINGs it, so the restarted node's workers link to theirs a few crons
    after it answers (0.21-0.23 s), not when the back-off ends (0.96-1.06 s before)."""
    c = start_cluster(3, workers=1, extra_args=DIRECT, node_timeout=20000)
    wait_links_up(c, per_node=2)
    c.kill(0)
    time.sleep(DOWN_S)
    c.restart(0)
    ready = time.monotonic()
    wait_until(lambda: counter(c[0], "cluster_job_links_up") == 2, timeout=15,
               message="the restarted node's job links did not come up")
    assert time.monotonic() - ready < 0.6
    replicate_and_ack(c, 0, "one-restart-q", n=10)


def test_debug_bus_drop_stops_the_links_too(start_cluster):
    """A node cut off the bus (DEBUG BUS DROP-ALL) is cut off the direct links as well:
    its copies cannot be confirmed."""
    c = start_cluster(2, workers=1, extra_args=DIRECT)
    wait_links_up(c, per_node=1)
    c[1].execute("DEBUG", "BUS", "DROP-ALL")
    try:
        with RawConn(c[0].port) as r:
            reply = r.execute("ADDJOB", "cut-q", "x", 300, "REPLICATE", 2)
            assert reply == Err(b"NOREPL Timeout reached before replicating to the "
                                   b"requested number of nodes")
    finally:
        c[1].execute("DEBUG", "BUS", "RESTORE")
    wait_links_up(c, per_node=1)
    replicate_and_ack(c, 0, "cut-q", n=5)


# ---- what arrives on a job link port that is not a worker of the cluster -------------------

def job_link_port(node, w=0):
    return int(links_info(node)["cluster_job_link_ports"].split(",")[w])


def frame(obj):
    data = msgpack.packb(obj)
    return struct.pack("<I", len(data)) + data


def send_raw(port, data, close=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(data)
    if close:
        s.close()
    return s


def wait_closed(sock):
    """The server closed this connection (it refused what was sent)."""
    sock.settimeout(10)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    sock.close()


def test_garbage_on_a_job_link_port_is_refused_and_harms_nothing(start_server, member):  # noqa: F811
    srv = start_server(workers=2, extra_args=["--cluster-node-timeout", "5000", *DIRECT])
    workers = srv.worker_pids()
    server_id = joined(srv, member)
    member_id = member.bus.myself.id.encode()
    port = job_link_port(srv)              # worker 0's, whose queues these are:
    stranger_q, member_q = [q.encode() for q in queues_on_distinct_workers("link", 2, 2)[:2]]

    def hello(sender=member_id, to=server_id.encode(), worker=0, version=VERSION, magic=HELLO):
        return frame([magic, version, sender, to, worker])
    refused = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                  # not our framing at all
        struct.pack("<I", 0xFFFFFFFF) + b"x" * 100,            # a 4 GiB frame announced
        frame([[bus_msg.GOTJOB, 0, [b"x", 0]]]),                     # job messages before a hello
        hello(version=VERSION + 1),                            # a version we do not speak
        hello(sender=b"short id"),
        hello(magic=b"other"),
        frame([HELLO, VERSION, member_id]),                    # the receiver left out
        hello(to=os.urandom(20).hex().encode()),               # meant for another node
        hello(worker=1),                                       # or another worker
        hello() + struct.pack("<I", 3) + b"\xc1\xc1\xc1",      # not msgpack
        hello() + frame({"a": 1}),                             # a map, not a list of messages
    ]
    for data in refused:
        wait_closed(send_raw(port, data, close=False))
    wait_until(lambda: counter(srv, "cluster_job_links_refused") == len(refused), timeout=10)
    # a connection that says nothing is closed once HELLO_MS has passed
    idle = send_raw(port, b"", close=False)
    wait_closed(idle)
    wait_until(lambda: counter(srv, "cluster_job_links_refused") == len(refused) + 1, timeout=10)
    # clients that vanish mid-frame, or right after connecting
    send_raw(port, hello()[:7])
    send_raw(port, b"")
    # a hello claiming a node this one does not know: its copies are dropped
    stranger = os.urandom(20).hex().encode()
    jid, copy = copy_of_new_job(member, server_id, stranger_q)
    s = send_raw(port, hello(sender=stranger) + frame([[bus_msg.REPLJOB, 0, copy]]), close=False)
    # well-formed entries next to garbage from the known member: the good copy is kept
    # and answered (by the bus: the member has no job link port), the rest dropped
    good_id, good = copy_of_new_job(member, server_id, member_q)
    t = send_raw(port, hello() + frame(GARBAGE + [[bus_msg.REPLJOB, 0, good]]), close=False)
    member.until(lambda: [bus_msg.GOTJOB, 0, [good_id, 0]] in member.received,
                 message="no GOTJOB for the copy sent on a job link after garbage")
    # a message the other worker owns (a sender routing otherwise): counted and dropped
    other_q = queues_on_distinct_workers("link", 2, 2)[2].encode()      # worker 1's
    misrouted_id, misrouted = copy_of_new_job(member, server_id, other_q)
    u = send_raw(port, hello() + frame([[bus_msg.REPLJOB, 0, misrouted]]), close=False)
    wait_until(lambda: counter(srv, "cluster_job_messages_misrouted") == 1, timeout=10)
    s.close()
    t.close()
    u.close()
    c = srv.client()
    assert c.execute_command("SHOW", good_id) is not None
    assert c.execute_command("SHOW", jid) is None
    assert c.execute_command("SHOW", misrouted_id) is None
    assert srv.all_alive() and srv.worker_pids() == workers, srv.log_tail()
    assert "Traceback" not in srv.log_text(), srv.log_tail()
    assert srv.execute("PING") == b"PONG"


def test_cluster_job_links_setting_is_checked(start_server):
    srv = start_server(workers=1, extra_args=DIRECT)
    assert srv.execute("CONFIG", "GET", "cluster-job-links") == [b"cluster-job-links", b"direct"]
    assert isinstance(srv.execute("CONFIG", "SET", "cluster-job-links", "bus"), Err)
    assert "argument must be 'direct' or 'bus'" in str(parse_error("cluster-job-links sideways"))
    assert Config().cluster_job_links == "direct"          # the default


PICK_IN_NETNS = r"""
import sys, types
open("/proc/sys/net/ipv4/ip_local_port_range", "w").write("35000 35009")
import subprocess
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
from disque.bus.nodes import Node
from disque.config import Config
from disque.server import job_link_listeners
# nodes.conf knows 3 nodes: bus ports 35001, 35003, 35005 (the kernel gives bind() odd
# ports first, leaving the even ones to connect())
cluster = types.SimpleNamespace(nodes={b"%d" % p: Node(b"%d" % p, "127.0.0.1", p)
                                       for p in (25001, 25003, 25005)})
ports = []
for _ in range(8):
    socks = job_link_listeners(Config(), cluster, 2)
    ports += [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
print(" ".join(map(str, ports)))
"""


def test_a_job_link_listener_never_takes_a_known_nodes_bus_port():
    """The kernel picks a job link listener's port from the ephemeral range, where a node's
    bus port can be (port 25000: bus port 35000). Here, in a network namespace of our own
    whose ephemeral range is 35000-35009, the ports picked in 8 starts of 2 workers are
    never the bus ports of the nodes nodes.conf knows: else such a node, restarting, could
    not open its bus (the original's suite, run against ours, failed so now and then at a
    mass restart)."""
    import shutil
    import subprocess
    import sys
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare for a network namespace")
    out = subprocess.run(["unshare", "--net", sys.executable, "-c", PICK_IN_NETNS],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ports = [int(p) for p in out.stdout.split()]
    assert len(ports) == 16 and not set(ports) & {35001, 35003, 35005}, ports


def test_a_job_links_source_port_stays_free_for_a_listener(start_cluster):
    """An outgoing job link's source port comes from the ephemeral range, where a node's
    bus port can be: it is opened with SO_REUSEADDR, so a node restarting on that port can
    still open its bus there (ZeroMQ's listener sets SO_REUSEADDR). The kernel may give
    the same source port to other connections too (other destinations): a link whose port
    no other socket of the machine uses is the one tried."""
    import psutil
    import socket as _socket
    c = start_cluster(3, workers=1, extra_args=DIRECT)
    wait_links_up(c, per_node=2)
    their_ports = {int(links_info(node)["cluster_job_link_ports"]) for node in c.nodes[1:]}
    worker = psutil.Process(c[0].worker_pids()[0])
    conns = getattr(worker, "net_connections", None) or worker.connections   # psutil < 6
    links = [k.laddr.port for k in conns("tcp")
             if k.status == psutil.CONN_ESTABLISHED and k.raddr and k.raddr.port in their_ports]
    assert len(links) == 2, "the job links from node 0: %s" % links
    users = collections.Counter(k.laddr.port for k in psutil.net_connections("tcp") if k.laddr)
    alone = [port for port in links if users[port] == 1]
    if not alone:
        pytest.skip("both links' source ports are shared with other connections just now")
    listener = _socket.socket()
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", alone[0]))      # EADDRINUSE without SO_REUSEADDR
        listener.listen(1)
    finally:
        listener.close()
