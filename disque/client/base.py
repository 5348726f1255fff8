"""What `Disque` and `AsyncDisque` share besides the typed methods: their settings, the
node table, the switching counts, and the decisions taken on replies (no I/O here)."""
from __future__ import annotations

import logging
import time

from disque.client.commands import JobCommands
from disque.client.nodes import PRIORITY_GONE, NodeTable
from disque.client.replies import jobs_from_reply
from disque.client.servers import read_servers
from disque.client.switching import JobSources, SwitchRule
from disque.client.tls import merged as merged_tls

log = logging.getLogger("disque.client")


class NodeUnfit(ConnectionError):
    """The node answered HELLO but is leaving (priority 100 for itself) while others can
    serve: the failover goes on to the next node."""


class ClientBase(JobCommands):

    def __init__(self, *servers, password=None, socket_timeout=None, connect_timeout=2.0,
                 failover_timeout=10.0, hello_interval=5.0, switch_window=1000,
                 switch_margin=0.5, max_connections=None, tls=None, clock=time.monotonic):
        """`servers`: `host:port` strings, (host, port) pairs or `disque://` URLs
        (`disques://` for TLS); the default is 127.0.0.1:7711.

        - `password`: the nodes' requirepass (a URL's password is used when not given).
        - `tls`: True (the system's CAs, the host name checked), a dict of redis-py's ssl
          options (`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, `ssl_cert_reqs`,
          `ssl_check_hostname`, `ssl_password`, ...) or an `ssl.SSLContext`; every node is
          reached with it. A `disques://` URL turns it on, and `tls` options win over the
          URL's.
        - `socket_timeout`: seconds a reply may take (None: no limit); a blocking GETJOB
          gets its own block time on top.
        - `connect_timeout`: seconds to open a connection to one node.
        - `failover_timeout`: how long a command keeps trying other nodes when the one in
          use fails, before `UnavailableError`.
        - `hello_interval`: seconds between two HELLOs that refresh the node list.
        - `switch_window`, `switch_margin`: the rule that moves a consumer to the node
          producing its jobs (docs/client.md; `switch_window=0` never moves).
        """
        addresses, url_password, url_tls = read_servers(list(servers) or ["127.0.0.1:7711"])
        self.password = password if password is not None else url_password
        self.tls = merged_tls(url_tls, tls)     # None: plaintext
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.failover_timeout = failover_timeout
        self.hello_interval = hello_interval
        self.max_connections = max_connections
        self._clock = clock
        self._table = NodeTable(addresses, clock=clock)
        self._sources = JobSources(SwitchRule(switch_window, switch_margin))
        # (address, control) -> redis-py pool; HELLO has a connection of its own, since a
        # node command makes the node take back a connection its worker serves
        # (docs/design.md, "Connections served by their worker")
        self._pools = {}
        self._current = None            # the address in use
        self._current_id = None
        self._hello_due = 0.0
        self.moves = 0                  # consumer moves made by the switching rule
        self.failovers = 0              # nodes given up after a connection error

    def _pool(self, address, control=False):
        """The redis-py pool of a node (`_make_pool` is the sync or asyncio kind)."""
        key = (address, control)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools.setdefault(key, self._make_pool(
                address, self.password, self.socket_timeout, self.connect_timeout,
                None if control else self.max_connections, self.tls))
        return pool

    # -- read-only views --------------------------------------------------------
    @property
    def node(self):
        """The ID of the node in use (None before the first command)."""
        return self._current_id

    @property
    def address(self):
        return self._current

    @property
    def nodes(self):
        """The nodes of the last HELLO, by ID."""
        return dict(self._table.by_id)

    # -- decisions on replies -----------------------------------------------------
    def _adopt(self, hello, address):
        """Make `address` the node in use after its HELLO, unless it is leaving and
        another node can serve."""
        self._table.learn(hello)
        me = self._table.by_id.get(hello.node_id)
        if (me is not None and me.priority >= PRIORITY_GONE
                and any(self._table.usable(n) for n in self._table.by_id.values())):
            raise NodeUnfit("node %s at %s:%s is leaving" % (hello.node_id[:8], *address))
        if self._current != address:
            log.info("disque client: using node %s at %s:%s", hello.node_id[:8], *address)
        self._current, self._current_id = address, hello.node_id
        self._hello_due = self._clock() + self.hello_interval
        return hello

    def _jobs(self, reply, address):
        node = self._table.by_address.get(address)
        jobs = jobs_from_reply(reply, node.id if node is not None else None, self)
        if jobs and node is not None:
            target = self._sources.observe([j.id[2:10] for j in jobs], node.prefix)
            if target is not None:
                self._move_to(target)
        return jobs

    def _move_to(self, prefix):
        node = self._table.by_prefix.get(prefix)
        if not self._table.usable(node) or node.address == self._current:
            return
        log.info("disque client: most jobs come from node %s, moving there from %s",
                 node.id[:8], (self._current_id or "?")[:8])
        self.moves += 1
        self._current, self._current_id = node.address, node.id
        self._hello_due = 0.0           # HELLO there with the next command

    def _note_failure(self, address, error):
        self.failovers += 1
        log.warning("disque client: node at %s:%s failed (%s), trying the next one",
                    address[0], address[1], error)

    def _failover_timeout(self, override):
        """A failover's deadline in s: the call's own (`failover_timeout=` of get_jobs and
        connect), else the client's."""
        return self.failover_timeout if override is None else override

    def consumer_failover(self, wait):
        """The failover deadline of a consumer's fetch that waits at most `wait` s: no longer
        than that wait (nor than failover_timeout). A framework's worker sees its stop only
        between two fetches; with every node down, its reconnect or restart loop, which does
        stop for a shutdown, does the waiting (docs/client.md, "Failover")."""
        return min(self.failover_timeout, wait)

    def _unavailable_message(self, error=None, failover_timeout=None):
        """UnavailableError's text; it names the last error (a refused TLS certificate
        shows there as itself)."""
        return "no Disque node answered within %.3g s (tried %s)%s" % (
            self._failover_timeout(failover_timeout),
            ", ".join("%s:%s" % a for a in self._table.connect_order()) or "nothing",
            "; last error: %s" % error if error is not None else "")

    @staticmethod
    def _sum_or_one(results):
        return results[0] if len(results) == 1 else sum(results)

    def _blocking_timeout(self, block):
        """The read timeout of a GETJOB that may block `block` seconds (0: forever)."""
        if self.socket_timeout is None:
            return None
        if block == 0:
            return float("inf")
        return block + self.socket_timeout
