"""The disk faults of the harness (faults/disks.py, docs/faults-disks.md), short form for
CI: the AOF directories of 3 nodes on small tmpfs, filled to ENOSPC and freed while the
workload runs, appendfsync always. No acknowledged job lost, no process crashed, every
node answers afterwards, and the full disks were seen (-MISCONF). About 30 s. Needs root
(namespaces, mount), iproute2 and iptables."""
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
    reason="network namespaces and mounts need root, iproute2 and iptables")


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_full_disks_lose_and_crash_nothing(tmp_path):
    out = tmp_path / "results.json"
    code = harness.main(["--json", str(out), "--scenarios", "disk-full-always",
                         "--nodes", "3", "--duration", "5"])
    [r] = json.loads(out.read_text())
    assert not r.get("error"), r
    assert r["lost"] == 0 and r["crashed"] == 0 and r["all_answer"], r
    assert r["acked"] > 0, r
    assert r["producer_errors"].get("MISCONF", 0) + r["consumer_errors"].get("MISCONF", 0), r
    assert code == 0
