"""The fault harness (faults/, docs/faults.md) as a test: real partitions, pauses and
kills of nodes in network namespaces; no acknowledged REPLICATE >= 2 job lost, no process
crashed, every node answers afterwards. Needs root, iproute2 and iptables (CI has them)."""
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


def run(tmp_path, *args):
    out = tmp_path / "results.json"
    code = harness.main(["--json", str(out), *args])
    import json
    results = json.loads(out.read_text())
    for r in results:
        assert not r.get("error"), r
        assert r["lost"] == 0, r
        assert r["crashed"] == 0, r
        assert r["all_answer"], r
        assert r["acked"] > 0, r
    assert code == 0
    return results


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_short_fault_run_loses_and_crashes_nothing(tmp_path):
    """About 2 minutes: a partition into random halves, pauses, kill -9 of workers."""
    run(tmp_path, "--scenarios", "halves,pause,kill-worker", "--duration", "8")


@needs_root
@pytest.mark.cluster
@pytest.mark.long
def test_long_fault_run_loses_and_crashes_nothing(tmp_path):
    run(tmp_path, "--long")
