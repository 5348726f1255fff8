"""Membership under load (faults/membership.py, docs/faults-membership.md) as a short test:
on 3 nodes, two spares join and two members leave gracefully (LEAVING, drained, stopped,
FORGET) while producers and consumers run. No acknowledged job lost, no process crashed,
every node left answers. Needs root, iproute2 and iptables (CI has them)."""
import json
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from faults import harness  # noqa: E402

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"),
    reason="network namespaces need root, iproute2 and iptables")


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_nodes_join_and_leave_under_load_losing_nothing(tmp_path):
    out = tmp_path / "results.json"
    code = harness.main(["--json", str(out), "--nodes", "3", "--duration", "5", "--warmup", "2",
                         "--scenarios", "join-leave"])
    [r] = json.loads(out.read_text())
    assert not r.get("error"), r
    assert (r["lost"], r["crashed"], r["leave_timeouts"]) == (0, 0, 0), r
    assert r["all_answer"] and r["acked"] > 0, r
    assert code == 0
