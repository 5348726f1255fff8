"""Membership under load (faults/membership.py, docs/faults-membership.md) as a short test:
on 3 nodes, two spares join and two members leave gracefully (LEAVING, drained, stopped,
FORGET) while producers and consumers run. No acknowledged job lost, no process crashed,
every node left answers. Needs root, iproute2 and iptables (CI has them)."""
import pytest

from support.faults_runs import needs_namespaces, run_faults


@needs_namespaces()
@pytest.mark.cluster
@pytest.mark.slow
def test_nodes_join_and_leave_under_load_losing_nothing(tmp_path):
    [r] = run_faults(tmp_path, "--nodes", "3", "--duration", "5", "--warmup", "2",
                     "--scenarios", "join-leave")
    assert r["leave_timeouts"] == 0, r
