"""The bad-network scenarios (faults/network.py, docs/faults-network.md) in short: 3 nodes,
5 s of one-way cuts (the scenario that found stalled links, tests/test_cluster_stalled_links.py);
no acknowledged job lost, no process crashed, every node answers afterwards (about 30 s).
And the heal: no loss rule and no qdisc is left (a few seconds). Needs root, iproute2,
iptables and tc (CI has them)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from faults import network  # noqa: E402
from faults.netns import Net, in_ns  # noqa: E402
from support.faults_runs import needs_namespaces, run_faults  # noqa: E402

needs_root = needs_namespaces("tc")


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_one_way_links_lose_and_crash_nothing(tmp_path):
    results = run_faults(tmp_path, "--nodes", "3", "--duration", "5", "--scenarios", "one-way")
    assert [r["scenario"] for r in results] == ["one-way"]


class Healed:
    """What network.clear reads of the harness' context: its network and its nodes."""

    def __init__(self, net, n):
        self.net = net
        self.all_nodes = list(range(n))


@needs_root
@pytest.mark.cluster
def test_clear_removes_loss_rules_and_qdiscs():
    net = Net(os.environ.get("DQF_PREFIX", "dqf-") + "t", os.environ.get("DQF_SUBNET", "10.77.0."))
    try:
        net.setup(2)
        network.load_rules(net, 2, {0: [network.drop("OUTPUT", net.node_addr(1), 0.3)],
                                    1: [network.drop("INPUT", net.node_addr(0))]})
        network.shape(net, 0, 512, 200)
        assert "tbf" in in_ns(net.node_ns(0), "tc", "qdisc", "show", "dev", "eth0")
        assert "tbf" in in_ns(net.hub, "tc", "qdisc", "show", "dev", "h0")
        assert "statistic" in in_ns(net.node_ns(0), "iptables", "-S")
        network.clear(Healed(net, 2))
        for i in range(2):
            assert "DROP" not in in_ns(net.node_ns(i), "iptables", "-S")
            assert "tbf" not in in_ns(net.node_ns(i), "tc", "qdisc", "show", "dev", "eth0")
            assert "tbf" not in in_ns(net.hub, "tc", "qdisc", "show", "dev", "h%d" % i)
    finally:
        net.cleanup()
