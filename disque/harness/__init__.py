"""Start and stop real Disque nodes from outside the server: free ports, one node process
(ours or any binary, such as the original C `disque-server`), a cluster of them.

The tests (tests/support/), the benchmarks (bench/) and the fault scenarios (faults/) all
start their nodes through this package. It imports nothing of the server (only the standard
library, psutil and redis-py), so any client-side program can use it."""
from disque.harness.cluster import Cluster, join, wait_mesh
from disque.harness.node import Node, NodeStartError, disque_argv, original_argv, server_command
from disque.harness.ports import BUS_OFFSET, PortLease, lease_port, pair_is_free

__all__ = ["BUS_OFFSET", "Cluster", "Node", "NodeStartError", "PortLease", "disque_argv",
           "join", "lease_port", "original_argv", "pair_is_free", "server_command", "wait_mesh"]
