"""Free loopback port pairs for test servers: disque/harness/ports.py, under the names the
tests import."""
from disque.harness.ports import (  # noqa: F401
    BUS_OFFSET, LOCK_DIR as PORT_LOCK_DIR, PORT_MAX, PORT_MIN, PortLease as _PortLease,
    lease_port, pair_is_free as _port_is_free)
