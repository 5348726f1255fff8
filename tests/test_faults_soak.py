"""The soak's machinery (faults/soak.py, docs/faults-soak.md) as a short test: 3 nodes,
24 s of the steady-backlog workload with a fault every 12 s, a sample every 2 s. Nothing
acknowledged lost, nothing crashed, every node answers, and the samples (CSV and JSON), the
memory verdict's figures and the picture were produced. The growth verdict itself is not
asserted: 24 s is too short to judge it (the real soak runs 30 minutes). Needs root,
iproute2 and iptables (CI has them). The verdict's rules are tested on made-up samples
below (unit tests)."""
import csv
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from support.faults_runs import needs_namespaces, run_faults  # noqa: E402

needs_root = needs_namespaces()


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
def test_short_soak_loses_nothing_and_records_memory(tmp_path):
    out, png = tmp_path / "soak", tmp_path / "memory.png"
    [res] = run_faults(tmp_path, "--soak", "--soak-seconds", "24", "--soak-period", "12",
                       "--soak-every", "2", "--nodes", "3", "--soak-out", str(out),
                       "--soak-picture", str(png))
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


class FakeSamples:
    """A soak's samples as the sampler keeps them: (t, node, pid, role, rss_mb) and
    (t, node, alive, rss_mb, used_memory_mb, jobs, queued, qlen)."""

    def __init__(self, rss_of, used_of, until=1800, every=10):
        self.procs, self.nodes, self.load = [], [], []
        for t in range(0, until + 1, every):
            for pid, role, rss in rss_of(t):
                self.procs.append((float(t), 0, pid, role, rss))
            self.nodes.append((float(t), 0, 1, 100.0, used_of(t), 1000, 1000, 1000))


@pytest.mark.unit
def test_the_verdict_finds_a_slow_leak_and_passes_a_flat_run():
    from faults.soak_memory import verdict

    def flat(t):
        return [(1, "front", 39.0), (2, "w0", 31.6), (3, "w1", 34.0 + (t % 50) / 100)]

    def leaking(t):                     # w1 gains 3 MB per 10 minutes
        return flat(t)[:2] + [(3, "w1", 34.0 + 3.0 * t / 600)]
    mem = verdict(FakeSamples(flat, lambda t: 2.2), 1800, 0)
    assert mem["verdict"] == "no growth", mem["growing"]
    assert len(mem["nodes"]["0"]["processes_judged"]) == 3
    mem = verdict(FakeSamples(leaking, lambda t: 2.2), 1800, 0)
    assert mem["growing"] == ["node 0 w1 (pid 3)"]
    assert 2.9 < mem["nodes"]["0"]["processes_judged"]["w1 (pid 3)"]["slope_mb_per_10min"] < 3.1
    mem = verdict(FakeSamples(flat, lambda t: 2.2 + t / 3000), 1800, 0)
    assert mem["growing"] == ["cluster used_memory"]


@pytest.mark.unit
def test_a_restarted_process_is_judged_on_its_own_life():
    """A kill at minute 8: the new worker starts small and fills for a minute; judged from
    60 s after its start, it is flat, and the dead one is not judged."""
    from faults.soak_memory import verdict

    def restarted(t):
        if t < 480:
            return [(1, "front", 39.0), (3, "w1", 34.0)]
        return [(1, "front", 39.0), (4, "w1", 34.0 if t >= 530 else 20.0 + (t - 480) / 4)]
    mem = verdict(FakeSamples(restarted, lambda t: 2.2), 1800, 0)
    judged = mem["nodes"]["0"]["processes_judged"]
    assert set(judged) == {"front (pid 1)", "w1 (pid 4, 540-1800 s)"}
    assert mem["verdict"] == "no growth"
    assert mem["nodes"]["0"]["processes_started_during_run"] == 1
