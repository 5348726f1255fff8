"""`DisqueCluster`: several real test nodes joined with CLUSTER MEET and waited on until they
agree (disque/harness/cluster.py)."""
from __future__ import annotations

from disque.harness import cluster as harness
from support.info import parse_info
from support.waits import wait_until


CLUSTER_NODE_TIMEOUT = 2000     # ms: failures are detected within a few seconds in tests


class DisqueCluster:
    """`n` real nodes (each `workers` workers) joined by a chain of CLUSTER MEETs.

    Nodes keep their port and working directory (and so nodes.conf) across kill/restart."""

    def __init__(self, factory, n, workers=2, extra_args=(), node_timeout=CLUSTER_NODE_TIMEOUT):
        args = ["--cluster-node-timeout", str(node_timeout), *extra_args]
        self.nodes = [factory(workers=workers, extra_args=args, wait=False) for _ in range(n)]
        for node in self.nodes:
            node.wait_ready()
        self.ids = [node.execute("CLUSTER", "MYID").decode() for node in self.nodes]

    def __getitem__(self, i):
        return self.nodes[i]

    def __len__(self):
        return len(self.nodes)

    def join(self, timeout=20.0):
        """Chain: node i meets node i-1; gossip must complete the mesh."""
        harness.meet(self.nodes)
        self.wait_mesh(timeout=timeout)
        return self

    def cluster_info(self, i):
        return parse_info(self.nodes[i].execute("CLUSTER", "INFO"))

    def wait_mesh(self, nodes=None, timeout=20.0):
        """Every listed node (default all) sees every other listed node as reachable."""
        listed = self.nodes if nodes is None else [self.nodes[i] for i in nodes]
        assert harness.wait_mesh(listed, timeout), "cluster mesh did not form"

    def kill(self, i):
        """SIGKILL the node's whole process tree, keeping its port reserved."""
        node = self.nodes[i]
        node.close_clients()
        node.kill()
        wait_until(lambda: not node.is_alive(), timeout=10)

    def restart(self, i):
        node = self.nodes[i]
        node.spawn(port=node.port)
        node.wait_ready()
        return node

    def flags_of(self, observer, target):
        """The flags field of `target` in `observer`'s CLUSTER NODES (None if unknown)."""
        text = self.nodes[observer].execute("CLUSTER", "NODES").decode()
        for line in text.splitlines():
            parts = line.split(" ")
            if parts[0] == self.ids[target]:
                return parts[2].split(",")
        return None
