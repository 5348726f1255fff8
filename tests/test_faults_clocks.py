"""The clock scenarios of the fault harness (faults/clocks.py, docs/faults-clocks.md) in
short: 3 nodes whose wall clocks step by minutes while the workload runs; nothing lost,
nothing crashed, every node answers, and no timing guarantee broken (DELAY, RETRY, TTL,
IDs, order: the workload's probes). Needs root (network namespaces) and gcc (the clock
shim, faults/wallclock.c)."""
import pytest

from support.faults_runs import needs_namespaces, run_faults


@needs_namespaces("gcc", why=" (gcc builds the clock shim)")
@pytest.mark.cluster
@pytest.mark.slow
def test_clock_jumps_break_no_guarantee(tmp_path):
    [r] = run_faults(tmp_path, "--scenarios", "clock-jumps", "--nodes", "3",
                     "--duration", "5", "--warmup", "2")
    assert r["violations"] == 0, r
    assert sum(r["probes_checked"].values()) > 0, r
