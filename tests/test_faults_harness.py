"""The fault harness (faults/, docs/faults.md) as a test: real partitions, pauses and
kills of nodes in network namespaces; no acknowledged REPLICATE >= 2 job lost, no process
crashed, every node answers afterwards. Needs root, iproute2 and iptables (CI has them)."""
import pytest

from support.faults_runs import needs_namespaces, run_faults


@needs_namespaces()
@pytest.mark.cluster
@pytest.mark.slow
def test_short_fault_run_loses_and_crashes_nothing(tmp_path):
    """About 2 minutes: a partition into random halves, pauses, kill -9 of workers."""
    run_faults(tmp_path, "--scenarios", "halves,pause,kill-worker", "--duration", "8")


@needs_namespaces()
@pytest.mark.cluster
@pytest.mark.long
def test_long_fault_run_loses_and_crashes_nothing(tmp_path):
    run_faults(tmp_path, "--long")


@needs_namespaces()
@pytest.mark.cluster
@pytest.mark.slow
def test_job_groups_keep_order_and_one_at_a_time_without_faults(tmp_path):
    """About 30 s: the group workload (docs/faults.md, "Job groups") on 3 nodes with no
    fault: no group delivered out of order, never two jobs of a group in flight, none
    waiting past its bound."""
    results = run_faults(tmp_path, "--scenarios", "calm", "--duration", "5", "--nodes", "3",
                         "--groups", "20")
    calm = results[0]
    assert calm["group_jobs"] > 100, calm
    assert (calm["group_out_of_order"], calm["group_two_in_flight"], calm["group_stuck"]) == (
        0, 0, 0), calm
