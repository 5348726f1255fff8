"""Free loopback ports for test servers: below 32768 (outside the ephemeral range), with
port + 10000 (the cluster bus) free too, leased through lock files so parallel runs never
share one."""
from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path



# Ports: below 32768 (outside the ephemeral range) and port + 10000 (cluster bus)
# below 32768 as well.
PORT_MIN = 20000


PORT_MAX = 22700


BUS_OFFSET = 10000


PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "disque-test-port-locks"


def _port_is_free(port: int) -> bool:
    for p in (port, port + BUS_OFFSET):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
        finally:
            s.close()
    return True


class _PortLease:
    """A port (and its bus port) reserved via a lock file for the lease's life,
    so concurrent test sessions on this machine do not pick the same one."""

    def __init__(self, port: int, fd: int):
        self.port = port
        self._fd = fd

    def release(self):
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


def lease_port(exclude=()) -> _PortLease:
    PORT_LOCK_DIR.mkdir(parents=True, exist_ok=True)
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(500):
        port = rng.randint(PORT_MIN, PORT_MAX)
        if port in exclude:
            continue
        fd = os.open(PORT_LOCK_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if _port_is_free(port):
            return _PortLease(port, fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    raise RuntimeError("could not find a free port pair")
