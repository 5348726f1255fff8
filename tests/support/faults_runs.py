"""The fault harness (faults/, docs/faults.md) run from a test: the marker that skips it
without root and the tools it needs, and one run whose every scenario must have lost
nothing, crashed nothing and left every node answering."""
import json
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)            # faults/ is not installed: it runs from the checkout

from faults import harness  # noqa: E402


def needs_namespaces(*tools, why=""):
    """Skip without root, iproute2 and iptables (network namespaces), or without `tools`."""
    wanted = ("ip", "iptables") + tools
    return pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in wanted),
        reason="network namespaces need root and %s%s" % (", ".join(wanted), why))


def run_faults(tmp_path, *args):
    """faults/run with `args`: the results, each checked (no error, lost 0, crashed 0,
    every node answering, some jobs acknowledged), and the run's exit status 0."""
    out = tmp_path / "results.json"
    code = harness.main(["--json", str(out), *args])
    results = json.loads(out.read_text())
    for r in results:
        assert not r.get("error"), r
        assert r["lost"] == 0 and r["crashed"] == 0, r
        assert r["all_answer"] and r["acked"] > 0, r
    assert code == 0
    return results
