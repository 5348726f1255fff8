"""A cluster of real nodes: start N, join them with CLUSTER MEET, wait until every node sees
every other as reachable, stop them all."""
from __future__ import annotations

import time

import redis

from disque.harness.node import Node, NodeStartError

JOIN_TIMEOUT = 30.0


def field(reply, name):
    """One `name:value` field of an INFO-style reply (bytes or str), or None."""
    text = reply.decode() if isinstance(reply, bytes) else (reply or "")
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def reachable_nodes(node: Node) -> int:
    """How many other nodes `node` sees as reachable (-1 when it does not answer)."""
    try:
        value = field(node.call("CLUSTER", "INFO"), "cluster_reachable_nodes")
    except (OSError, redis.RedisError):
        return -1
    return -1 if value is None else int(value)


def wait_mesh(nodes, timeout=JOIN_TIMEOUT) -> bool:
    """Until every node sees every other; False at the deadline."""
    deadline = time.monotonic() + timeout
    while not all(reachable_nodes(n) >= len(nodes) - 1 for n in nodes):
        if time.monotonic() > deadline:
            return False
        time.sleep(max(n.poll_interval for n in nodes))
    return True


def meet(nodes):
    """A chain of CLUSTER MEETs, node i meeting node i - 1: gossip completes the mesh."""
    for prev, node in zip(nodes, nodes[1:]):
        reply = node.call("CLUSTER", "MEET", prev.host, prev.port)
        if reply not in (b"OK", "OK", True):
            raise RuntimeError(f"CLUSTER MEET {prev.host} {prev.port} answered {reply!r}")


def join(nodes, timeout=JOIN_TIMEOUT) -> bool:
    meet(nodes)
    return wait_mesh(nodes, timeout)


class Cluster:
    """Nodes started together (each spawned before any is waited on) and joined."""

    def __init__(self, nodes):
        self.nodes = list(nodes)

    def __getitem__(self, i):
        return self.nodes[i]

    def __len__(self):
        return len(self.nodes)

    def start(self, timeout=None, children=0):
        """Every node answering; on failure every node is stopped before raising."""
        try:
            for node in self.nodes:
                node.spawn()
            for node in self.nodes:
                node.wait_ready(timeout)
                node.wait_children(children)
        except BaseException:
            self.kill()
            raise
        return self

    def join(self, timeout=JOIN_TIMEOUT):
        if not join(self.nodes, timeout):
            raise NodeStartError(f"the {len(self.nodes)} nodes did not form a cluster "
                                 f"within {timeout}s")
        return self

    def kill(self):
        for node in self.nodes:
            node.kill()
            node.release_port()

    def stop(self, **kw):
        """Stop every node (all of them, even when one fails); their exit codes."""
        codes, error = [], None
        for node in self.nodes:
            try:
                codes.append(node.stop(**kw))
            except Exception as exc:            # the others are stopped all the same
                error = error or exc
        if error:
            raise error
        return codes
