"""Free loopback ports for nodes: below 32768 (outside the ephemeral range), with port + 10000
(the cluster bus) free too, leased through lock files so parallel runs never share one."""
from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path

PORT_MIN = 20000
PORT_MAX = 22700        # so that the bus port, port + 10000, stays below 32768 too
BUS_OFFSET = 10000
LOCK_DIR = Path(tempfile.gettempdir()) / "disque-test-port-locks"


def pair_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Both `port` and its bus port can be bound on `host` now."""
    for p in (port, port + BUS_OFFSET):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host, p))
        except OSError:
            return False
        finally:
            s.close()
    return True


class PortLease:
    """A port (and its bus port) reserved by a lock file while the lease is held, so that
    concurrent sessions on this machine (tests, benchmarks) never pick the same one."""

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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def lease_port(exclude=()) -> PortLease:
    """A free port pair, locked until the lease is released."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(500):
        port = rng.randint(PORT_MIN, PORT_MAX)
        if port in exclude:
            continue
        fd = os.open(LOCK_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if pair_is_free(port):
            return PortLease(port, fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    raise RuntimeError("could not find a free port pair")
