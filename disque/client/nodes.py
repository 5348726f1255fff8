"""What the client knows of the cluster, without any I/O: the nodes HELLO lists, their
addresses and priorities, the nodes that failed on this client, and the order in which to
try them (the original's client protocol: README "Client libraries"; docs/client.md).

HELLO priorities (docs/spec.md, SPEC 4.1): 1 for a node in good standing, 5 for a node the
answering node has no link to, 10 for a node it suspects (PFAIL), 100 for a failed or
leaving one. Lower is better.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

PRIORITY_FAILING = 10       # PFAIL and worse: not a node to move a consumer to
PRIORITY_GONE = 100         # FAIL or LEAVING


@dataclass(frozen=True)
class Node:
    id: str
    host: str
    port: int
    priority: int

    @property
    def address(self):
        return (self.host, self.port)

    @property
    def prefix(self):
        """What job IDs created by this node carry at offset 2 (SPEC 5)."""
        return self.id[:8]


@dataclass(frozen=True)
class Hello:
    """HELLO's reply: the protocol version, the answering node's ID and every node it knows."""
    version: int
    node_id: str
    nodes: tuple

    @classmethod
    def from_reply(cls, reply, address):
        """`address` is where the reply came from: the answering node is reachable there,
        whatever address it advertises for itself."""
        version, my_id = int(reply[0]), _text(reply[1])
        nodes = []
        for entry in reply[2:]:
            node_id, host, port, priority = (_text(v) for v in entry)
            if node_id == my_id:
                host, port = address
            nodes.append(Node(node_id, host or address[0], int(port), int(priority)))
        return cls(version, my_id, tuple(nodes))


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NodeTable:
    """The seeds, the nodes of the last HELLO, and local failure marks.

    Updates replace whole dicts, so readers on other threads see one state or the next."""

    def __init__(self, seeds, failed_for=5.0, clock=time.monotonic, rng=None):
        self.seeds = list(seeds)
        self.failed_for = failed_for        # seconds a node that failed here is tried last
        self.clock = clock
        self.rng = rng or random.Random()
        self.by_id: dict[str, Node] = {}
        self.by_prefix: dict[str, Node] = {}
        self.by_address: dict[tuple, Node] = {}
        self.failed: dict[tuple, float] = {}    # address -> when it failed here
        self.hello: Hello | None = None

    def learn(self, hello: Hello):
        """The node list of a fresh HELLO replaces the one before: a node it no longer
        lists is forgotten, a new one is learnt."""
        self.hello = hello
        self.by_id = {n.id: n for n in hello.nodes}
        self.by_prefix = {n.prefix: n for n in hello.nodes}
        self.by_address = {n.address: n for n in hello.nodes}
        self.failed = {a: t for a, t in self.failed.items() if a != self.address_of(hello.node_id)}

    def address_of(self, node_id):
        node = self.by_id.get(node_id)
        return node.address if node is not None else None

    def mark_failed(self, address):
        self.failed = {**self.failed, address: self.clock()}

    def recently_failed(self, address):
        when = self.failed.get(address)
        return when is not None and self.clock() - when < self.failed_for

    def usable(self, node: Node | None):
        """A node to send work to: in good standing in the last HELLO, not failed here."""
        return (node is not None and node.priority < PRIORITY_FAILING
                and not self.recently_failed(node.address))

    def node_of_job(self, job_id: str):
        """The node whose ID prefix the job ID carries, when known and usable."""
        node = self.by_prefix.get(job_id[2:10])
        return node if self.usable(node) else None

    def connect_order(self, exclude=()):
        """Addresses to try, best first: usable nodes by priority (random among equals),
        then seeds not listed by HELLO, then failing or leaving nodes, then the nodes that
        failed here (the oldest failure first)."""
        key = lambda n: (n.priority, self.rng.random())  # noqa: E731
        known = sorted(self.by_id.values(), key=key)
        good = [n.address for n in known if self.usable(n)]
        seeds = [a for a in self.seeds if a not in self.by_address and not self.recently_failed(a)]
        self.rng.shuffle(seeds)
        poor = [n.address for n in known
                if n.priority >= PRIORITY_FAILING and not self.recently_failed(n.address)]
        failed = sorted((a for a in self.failed if self.recently_failed(a)),
                        key=self.failed.__getitem__)
        order = []
        for address in good + seeds + poor + failed:
            if address not in order and address not in exclude:
                order.append(address)
        return order


class Failover:
    """One failover: which address to try next, and how long to pause when every address
    failed, until the deadline. Iterate it: it yields an address or a pause in seconds,
    and ends once the deadline has passed. Every address but the failed one is tried once
    whatever the deadline: a short one (kombu's, MAX_BLOCK) must not give up on a cluster
    because its first address does not answer before the timeout."""

    FIRST_PAUSE = 0.05
    MAX_PAUSE = 1.0

    def __init__(self, table: NodeTable, failed_address, timeout):
        self.table = table
        self.deadline = table.clock() + timeout
        self.tried = set()
        if failed_address is not None:
            table.mark_failed(failed_address)
            self.tried.add(failed_address)
        self.pause = self.FIRST_PAUSE
        self.last_error = None

    def failed(self, address, error):
        self.table.mark_failed(address)
        self.tried.add(address)
        self.last_error = error

    def __iter__(self):
        first_pass = True
        while True:
            for address in self.table.connect_order(exclude=self.tried):
                yield address
                if not first_pass and self.table.clock() > self.deadline:
                    return
            first_pass = False
            left = self.deadline - self.table.clock()
            if left <= 0:
                return
            yield min(self.pause, left)
            self.pause = min(self.pause * 2, self.MAX_PAUSE)
            self.tried.clear()
