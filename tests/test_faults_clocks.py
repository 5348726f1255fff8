"""The clock scenarios of the fault harness (faults/clocks.py, docs/faults-clocks.md) in
short: 3 nodes whose wall clocks step by minutes while the workload runs; nothing lost,
nothing crashed, every node answers, and no timing guarantee broken (DELAY, RETRY, TTL,
IDs, order: the workload's probes). Needs root (network namespaces) and gcc (the clock
shim, faults/wallclock.c)."""
import json
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from faults import harness  # noqa: E402

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables")
    or not shutil.which("gcc"), reason="network namespaces need root, iproute2 and iptables; "
    "the clock shim needs gcc")


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_clock_jumps_break_no_guarantee(tmp_path):
    out = tmp_path / "results.json"
    code = harness.main(["--json", str(out), "--scenarios", "clock-jumps", "--nodes", "3",
                         "--duration", "5", "--warmup", "2"])
    [r] = json.loads(out.read_text())
    assert not r.get("error"), r
    assert r["lost"] == 0 and r["crashed"] == 0 and r["all_answer"], r
    assert r["acked"] > 0 and r["violations"] == 0, r
    assert sum(r["probes_checked"].values()) > 0, r
    assert code == 0
