"""TLS nodes and clients for the tests of the client port (tests/test_server_tls.py,
tests/test_cluster_tls.py); the certificates are disque/harness/certs.py's."""
from __future__ import annotations

import ssl
import sys
from contextlib import contextmanager

import redis

from disque.harness.certs import Certs, tls_ping  # noqa: F401  (for the tests)
from disque.harness.cluster import join
from disque.harness.node import disque_argv
from disque.harness.ports import lease_port
from support.server import DisqueServer, stop_servers


class TlsServer(DisqueServer):
    """A node with `tls-port`: beside a plaintext `port` (tls_only False; the TLS port is
    leased too) or instead of it (tls_only True: `--port 0`, the leased port is the TLS
    one, so the bus is on it + 10000, and readiness is a PING over TLS)."""

    def __init__(self, certs: Certs, workers=2, extra_args=(), tls_only=False, **kw):
        super().__init__(workers=workers, extra_args=extra_args, **kw)
        self.certs = certs
        self.tls_only = tls_only
        self.tls_lease = None if tls_only else lease_port()

    @property
    def tls_port(self):
        return self.port if self.tls_only else self.tls_lease.port

    def command_line(self, port):
        tls_port = port if self.tls_only else self.tls_lease.port
        tls = ["--tls-port", str(tls_port)] + self.certs.server_args()
        if self.tls_only:
            tls += ["--port", "0"]
        # the test's own arguments last: they win over these
        return disque_argv(port, self.workers, *tls, *self.extra_args, python=sys.executable)

    def ready(self):
        try:
            reply = tls_ping(self.certs, self.tls_port, timeout=2.0)
            return reply.startswith((b"+PONG", b"-NOAUTH"))     # it answers
        except (OSError, ssl.SSLError):
            return False

    def tls_client(self, client="client", **kw) -> redis.Redis:
        """redis-py over TLS (raw RESP types, as DisqueServer.client)."""
        opts = dict(host="127.0.0.1", port=self.tls_port, ssl=True,
                    ssl_ca_certs=self.certs.path("ca.crt"), protocol=2,
                    socket_timeout=15, socket_connect_timeout=5)
        if client:
            opts.update(ssl_certfile=self.certs.path(client + ".crt"),
                        ssl_keyfile=self.certs.path(client + ".key"))
        opts.update(kw)
        c = redis.Redis(**opts)
        c.response_callbacks.clear()
        self._clients.append(c)
        return c

    def call(self, *args):
        """One command over TLS (the cluster harness joins TLS-only nodes with it)."""
        if self._client is None:
            self._client = self.tls_client()
        return self._client.execute_command(*args)

    def stop(self, *a, **kw):
        try:
            return super().stop(*a, **kw)
        finally:
            if self.tls_lease is not None:
                self.tls_lease.release()
                self.tls_lease = None


@contextmanager
def tls_only_cluster(certs: Certs, workdir, n=3, workers=2):
    """`n` TLS-only nodes (`port 0`) joined into a cluster; all stopped by PID at the end."""
    nodes = [TlsServer(certs, workers=workers, tls_only=True, workdir=workdir / ("n%d" % i))
             for i in range(n)]
    try:
        for node in nodes:
            node.start()
        assert join(nodes), "the TLS-only nodes did not form a cluster"
        yield nodes
    finally:
        stop_servers(nodes)
