"""The disk faults of the harness (faults/disks.py, docs/faults-disks.md), short form for
CI: the AOF directories of 3 nodes on small tmpfs, filled to ENOSPC and freed while the
workload runs, appendfsync always. No acknowledged job lost, no process crashed, every
node answers afterwards, and the full disks were seen (-MISCONF). About 30 s. Needs root
(namespaces, mount), iproute2 and iptables."""
import pytest

from support.faults_runs import needs_namespaces, run_faults


@needs_namespaces(why=" (and mounts)")
@pytest.mark.cluster
@pytest.mark.slow
def test_full_disks_lose_and_crash_nothing(tmp_path):
    [r] = run_faults(tmp_path, "--scenarios", "disk-full-always", "--nodes", "3",
                     "--duration", "5")
    assert r["producer_errors"].get("MISCONF", 0) + r["consumer_errors"].get("MISCONF", 0), r
