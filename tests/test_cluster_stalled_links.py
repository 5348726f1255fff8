"""A link whose PONG is late is made again (docs/spec.md 10.5), bus and job links alike.

Found by the bad-network scenarios (docs/faults-network.md): after a one-way cut the nodes
kept their TCP connections, stalled in retransmission back-off, and replication came back
only when the kernel's next retransmission fired: 47 s after a 60 s cut (the original: 1 s).

Here the old connections never come back, as behind a middlebox that lost their state:
node 1 drops every packet of the connections that exist between nodes 0 and 1 (by their
ports), new connections pass. Replication between nodes 0 and 1 works again only on new
connections, bus and job links: before the fix it never did. Three nodes in network
namespaces (faults/netns.py); needs root, iproute2, iptables and redis-cli."""
import os
import shutil
import subprocess
import sys

import pytest

from support.waits import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from faults import netns, nodes as N  # noqa: E402

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables")
    or not shutil.which("redis-cli"),
    reason="network namespaces need root, iproute2, iptables and redis-cli")

# the fault harness' namespaces (DQF_PREFIX, DQF_SUBNET): not while a fault run goes on
NODES, WORKERS = 3, 2
NET = netns.HARNESS
cli = N.cli


def info(i):
    text = cli(i, "INFO", "cluster") or ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def replicated(i, timeout_ms=500):
    reply = cli(i, "ADDJOB", "stallq", "x", timeout_ms, "REPLICATE", NODES, "RETRY", 5)
    return reply is not None and reply.startswith("D-")


def blackhole_connections():
    """Node 1 drops, from now on, every packet of each TCP connection now open between
    nodes 0 and 1 (its two ports); a new connection has a new port and passes."""
    a, b = NET.node_addr(0), NET.node_addr(1)
    out = netns.in_ns(NET.node_ns(0), "ss", "-tnH", "state", "established", "dst", b)
    lines = []
    for row in out.splitlines():
        local, peer = row.split()[-2:]
        mine, theirs = local.rsplit(":", 1)[1], peer.rsplit(":", 1)[1]
        lines.append("-A INPUT -s %s -p tcp --sport %s --dport %s -j DROP" % (a, mine, theirs))
        lines.append("-A OUTPUT -d %s -p tcp --sport %s --dport %s -j DROP" % (a, theirs, mine))
    assert lines, out
    text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    text += "".join(line + "\n" for line in lines) + "COMMIT\n"
    r = subprocess.run(["ip", "netns", "exec", NET.node_ns(1), "iptables-restore"], input=text,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return len(lines) // 2


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_stalled_connections_are_made_again(tmp_path):
    nodes = []
    try:
        NET.setup(NODES)
        nodes = [N.Node(i, str(tmp_path), WORKERS, None, extra_args=["--cluster-node-timeout", 1000])
                 for i in range(NODES)]
        for node in nodes:
            node.start()
        assert all(node.wait_ready() for node in nodes)
        assert N.join(nodes)
        wait_until(lambda: all(int(info(i).get("cluster_job_links_up", 0)) == WORKERS * WORKERS
                               * (NODES - 1) for i in range(NODES)),
                   timeout=30, interval=0.2, message="the job links did not come up")
        wait_until(lambda: replicated(0) and replicated(1), timeout=20, interval=0.2)
        # the bus (both ways) and the job links (worker to worker, both ways)
        assert blackhole_connections() >= 2 + 2 * WORKERS * WORKERS
        wait_until(lambda: replicated(0) and replicated(1), timeout=40, interval=0.3,
                   message="replication between nodes 0 and 1 did not come back")
        for node in nodes:
            assert node.is_alive()
    finally:
        try:
            for node in nodes:
                node.stop()
        finally:
            NET.cleanup()
