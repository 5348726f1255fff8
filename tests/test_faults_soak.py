"""The soak's machinery (faults/soak.py, docs/faults-soak.md) as a short test: 3 nodes,
24 s of the steady-backlog workload with a fault every 12 s, a sample every 2 s. Nothing
acknowledged lost, nothing crashed, every node answers, and the samples (CSV and JSON), the
memory verdict's figures and the picture were produced. The growth verdict itself is not
asserted: 24 s is too short to judge it (the real soak runs 30 minutes). Needs root,
iproute2 and iptables (CI has them)."""
import csv
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


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_short_soak_loses_nothing_and_records_memory(tmp_path):
    out, png = tmp_path / "soak", tmp_path / "memory.png"
    code = harness.main(["--soak", "--soak-seconds", "24", "--soak-period", "12",
                         "--soak-every", "2", "--nodes", "3", "--soak-out", str(out),
                         "--soak-picture", str(png), "--json", str(tmp_path / "r.json")])
    [res] = json.loads((tmp_path / "r.json").read_text())
    assert not res.get("error"), res
    assert res["lost"] == 0 and res["crashed"] == 0 and res["all_answer"], res
    assert res["acked"] > 0 and code == 0
    assert len(res["faults"]) == 2 and len(res["fault_recoveries"]) == 2
    # every node's processes sampled by PID (a front-end and 2 workers each), each node's
    # used_memory, the workload's counters; the verdict has figures for every node
    procs = rows(out / "processes.csv")
    assert {r["node"] for r in procs} == {"0", "1", "2"}
    assert {"front", "w0", "w1"} <= {r["role"] for r in procs}
    assert all(float(r["rss_mb"]) > 0 for r in procs)
    nodes = rows(out / "nodes.csv")
    assert any(r["used_memory_mb"] and float(r["used_memory_mb"]) > 0 for r in nodes)
    assert len(rows(out / "workload.csv")) >= 5
    mem = res["memory"]
    assert set(mem["nodes"]) == {"0", "1", "2"}
    for v in mem["nodes"].values():
        assert v["used_memory"]["slope_mb_per_10min"] is not None
    assert mem["verdict"]
    assert png.stat().st_size > 10000 and png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "soak.json").read_text())["acked"] == res["acked"]
