"""Cluster bus nodes run inside the test process: `Cluster` objects on real ZeroMQ sockets
on loopback, and the small loop that plays each one's event loop (the server drives the same
two entry points, `on_readable()` and `cron()`)."""
import time

from support.ports import lease_port
from support.waits import wait_until
from disque.bus.cluster import Cluster


class Net:
    """A few bus nodes and the loop that drives them."""

    def __init__(self, tmp_path, node_timeout):
        self.tmp = tmp_path
        self.node_timeout = node_timeout
        self.nodes = {}        # name -> Cluster
        self.leases = {}
        self.down = set()
        self.last_cron = 0.0

    def add(self, name, port=None):
        if port is None:
            lease = lease_port()
            self.leases[name] = lease
            port = lease.port
        c = Cluster(port, ["127.0.0.1"], self.node_timeout, str(self.tmp / ("%s.conf" % name)))
        self.nodes[name] = c
        self.down.discard(name)
        return c

    def kill(self, name):
        self.nodes[name].close()
        self.down.add(name)

    def restart(self, name):
        port = self.nodes[name].myself.port
        return self.add(name, port)

    def step(self):
        for name, c in self.nodes.items():
            if name not in self.down:
                c.on_readable()
        if time.monotonic() - self.last_cron >= 0.1:
            self.last_cron = time.monotonic()
            for name, c in self.nodes.items():
                if name not in self.down:
                    c.cron()
        time.sleep(0.005)

    def until(self, predicate, timeout=15.0, message=None):
        def check():
            self.step()
            return predicate()
        return wait_until(check, timeout=timeout, interval=0, message=message)

    def close(self):
        for name, c in self.nodes.items():
            if name not in self.down:
                c.close()
        for lease in self.leases.values():
            lease.release()
