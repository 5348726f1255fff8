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
