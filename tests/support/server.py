"""`DisqueServer`: one real `python -m disque` process of a test, a `disque.harness.Node`
with what the tests add: the suite-wide switches of docs/tests.md (DISQUE_TEST_AFFINITY,
DISQUE_TEST_JOB_LINKS), a start retried when the port was taken meanwhile, a stop that
fails the test if a process outlived it, the workers' ipc directories removed, and the
test clients closed."""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import redis

from disque.harness.node import (  # noqa: F401  (re-exported for the tests)
    DESCENDANT_EXIT_TIMEOUT, START_TIMEOUT, STOP_TIMEOUT, Node, NodeStartError as ServerStartError,
    checkout_env, disque_argv)
from support.info import parse_info
from support.resp_client import RawConn

REPO_ROOT = Path(__file__).resolve().parents[2]   # tests/support/server.py -> the repository


def ipc_dirs(port):
    """The workers' ipc directories of nodes on `port` (disque/server.py, start_workers)."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "disque-%d-*" % port)))


def remove_new_ipc_dirs(port, before):
    """Remove those not in `before`: a node killed outright leaves its own behind."""
    for d in ipc_dirs(port) - before:
        shutil.rmtree(d, ignore_errors=True)


class DisqueServer(Node):
    """One ``python -m disque`` process tree."""

    def __init__(self, workers: int = 1, extra_args=(), workdir: Path | None = None,
                 start_timeout: float = START_TIMEOUT):
        workdir = Path(workdir or tempfile.mkdtemp(prefix="disque-test-"))
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(None, cwd=workdir, env=checkout_env(REPO_ROOT),
                         log_path=workdir / "server.log", start_timeout=start_timeout,
                         label="server")
        self.workers = workers
        self.extra_args = [str(a) for a in extra_args]
        self.workdir = workdir
        # port -> the workers' ipc directories of that port before this server first used it
        self._ipc_before: dict[int, set[str]] = {}
        self._clients: list = []
        self._raws: list[RawConn] = []

    @property
    def _tracked(self):
        return self.tracked

    # -- lifecycle ---------------------------------------------------------
    def command_line(self, port):
        extra = list(self.extra_args)
        # DISQUE_TEST_AFFINITY=no runs the whole suite with every connection kept in the
        # front-end (docs/tests.md); a test that sets connection-affinity itself wins
        affinity = os.environ.get("DISQUE_TEST_AFFINITY")
        if affinity and "--connection-affinity" not in extra:
            extra += ["--connection-affinity", affinity]
        # DISQUE_TEST_JOB_LINKS=bus: every job message between nodes through the front-ends
        job_links = os.environ.get("DISQUE_TEST_JOB_LINKS")
        if job_links and "--cluster-job-links" not in extra:
            extra += ["--cluster-job-links", job_links]
        return disque_argv(port, self.workers, *extra, python=sys.executable)

    def before_spawn(self, port):
        if port not in self._ipc_before:
            self._ipc_before[port] = ipc_dirs(port)

    def start(self, attempts: int = 3):
        last = None
        for _ in range(attempts):
            try:
                return super().start()
            except ServerStartError as exc:
                last = exc
                if not re.search(r"in use|EADDRINUSE|Errno 98", str(exc), re.I):
                    raise
        raise last

    def wait_ready(self, timeout=None):
        super().wait_ready(timeout)
        self.wait_children(self.workers)
        return self

    def _hard_kill_all(self):
        self.kill()

    # -- clients -------------------------------------------------------------
    def client(self, **kw) -> redis.Redis:
        """redis-py client; response callbacks are removed (raw RESP types) unless
        ``callbacks=True`` is passed."""
        callbacks = kw.pop("callbacks", False)
        opts = dict(host="127.0.0.1", port=self.port, protocol=2, decode_responses=False,
                    socket_timeout=15, socket_connect_timeout=5)
        opts.update(kw)
        c = redis.Redis(**opts)
        if not callbacks:
            c.response_callbacks.clear()
        self._clients.append(c)
        return c

    def raw(self, timeout=10.0) -> RawConn:
        r = RawConn(self.port, timeout=timeout)
        self._raws.append(r)
        return r

    def close_clients(self):
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        for r in self._raws:
            r.close()
        self._clients.clear()
        self._raws.clear()

    # -- shutdown ------------------------------------------------------------
    def stop(self, sig=signal.SIGTERM, check_orphans=True):
        """Stop the server: ``sig`` (SIGTERM), deadline, SIGKILL; then make sure every
        descendant recorded is gone. Leftovers are killed and an AssertionError is raised
        listing them."""
        self.close_clients()
        rc = super().stop(sig)
        # the ipc directories a node could not remove (it was SIGKILLed), once it is gone
        for port, before in self._ipc_before.items():
            remove_new_ipc_dirs(port, before)
        if self.left_behind and check_orphans:
            raise AssertionError(
                f"server on port {self.port} left processes behind after stop: {self.left_behind}\n"
                f"log tail:\n{self.log_tail()}")
        return rc

    def restart(self):
        try:
            self.stop(check_orphans=False)
        except Exception:
            pass
        self.start()

    def flush(self):
        r = RawConn(self.port, timeout=10)
        try:
            reply = r.call("DEBUG", "FLUSHALL")
        finally:
            r.close()
        assert reply == b"+OK\r\n", reply

    # convenience
    def execute(self, *args, timeout=None):
        with RawConn(self.port) as r:
            return r.execute(*args, timeout=timeout)

    def info_fields(self, section=None) -> dict:
        with RawConn(self.port) as r:
            raw = r.execute("INFO", section) if section else r.execute("INFO")
        return parse_info(raw)

    def __repr__(self):
        return f"<DisqueServer port={self.port} workers={self.workers}>"


def stop_servers(servers):
    """Stop every server by PID; fail the test once, listing every one that left a process."""
    errors = []
    for srv in servers:
        try:
            srv.stop()
        except AssertionError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)
