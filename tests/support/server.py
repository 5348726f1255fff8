"""`DisqueServer`: start and stop one real `python -m disque` process, track every descendant
PID (workers included) and kill them all by PID at the end, even when a test fails."""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis

from support.info import parse_info
from support.ports import _PortLease, lease_port
from support.resp_client import RawConn


REPO_ROOT = Path(__file__).resolve().parents[2]   # tests/support/server.py -> the repository


START_TIMEOUT = 30.0


STOP_TIMEOUT = 10.0


DESCENDANT_EXIT_TIMEOUT = 8.0


# multiprocessing helper processes are not "workers"
_HELPER_MARKERS = ("resource_tracker", "semaphore_tracker", "forkserver")


class ServerStartError(RuntimeError):
    pass


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return False


def _descendants(pid: int):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _is_helper(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(m in cmd for m in _HELPER_MARKERS)


def ipc_dirs(port):
    """The workers' ipc directories of nodes on `port` (disque/server.py, start_workers)."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "disque-%d-*" % port)))


def remove_new_ipc_dirs(port, before):
    """Remove those not in `before`: a node killed outright leaves its own behind."""
    for d in ipc_dirs(port) - before:
        shutil.rmtree(d, ignore_errors=True)


class DisqueServer:
    """One ``python -m disque`` process tree."""

    def __init__(self, workers: int = 1, extra_args=(), workdir: Path | None = None,
                 start_timeout: float = START_TIMEOUT):
        self.workers = workers
        self.extra_args = [str(a) for a in extra_args]
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="disque-test-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        # port -> the workers' ipc directories of that port before this server first used it
        self._ipc_before: dict[int, set[str]] = {}
        self._lease: _PortLease | None = None
        self._tracked: dict[int, psutil.Process] = {}
        self._clients: list = []
        self._raws: list[RawConn] = []
        self.log_path = self.workdir / "server.log"
        self._log_fh = None
        self.starts = 0

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
        return [sys.executable, "-m", "disque", "--port", str(port), "--workers",
                str(self.workers), "--bind", "127.0.0.1", *extra]

    def _env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def spawn(self, port=None):
        """Start the process without waiting for readiness; returns the Popen."""
        if port is None:
            self._lease = lease_port()
            port = self._lease.port
        self.port = port
        if port not in self._ipc_before:
            self._ipc_before[port] = ipc_dirs(port)
        self._log_fh = open(self.log_path, "ab")
        self._log_fh.write(f"=== start {time.strftime('%H:%M:%S')} {' '.join(self.command_line(port))}\n".encode())
        self._log_fh.flush()
        self.proc = subprocess.Popen(
            self.command_line(port), stdin=subprocess.DEVNULL, stdout=self._log_fh,
            stderr=subprocess.STDOUT, cwd=str(self.workdir), env=self._env(),
            start_new_session=True)
        self._tracked = {self.proc.pid: psutil.Process(self.proc.pid)}
        self.starts += 1
        return self.proc

    def start(self, attempts: int = 3):
        last = None
        for _ in range(attempts):
            self.spawn()
            try:
                self.wait_ready()
                return self
            except ServerStartError as exc:
                last = exc
                log = self.log_text()
                self._hard_kill_all()
                self._release_port()
                if not re.search(r"in use|EADDRINUSE|Errno 98", log, re.I):
                    raise
        raise last

    def wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerStartError(
                    f"server exited with {rc} before answering PING; log:\n{self.log_tail()}")
            if self._ping():
                break
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"server did not answer PING within {self.start_timeout}s; log:\n{self.log_tail()}")
            time.sleep(0.05)
        # workers may be spawned slightly after the front-end listens
        end = time.monotonic() + 10.0
        while time.monotonic() < end and len(self.worker_pids()) < self.workers:
            time.sleep(0.05)
        self.record_descendants()

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                s.settimeout(2.0)
                data = b""
                while not data.endswith(b"\r\n"):
                    chunk = s.recv(100)
                    if not chunk:
                        return False
                    data += chunk
                return data == b"+PONG\r\n"
        except OSError:
            return False

    def record_descendants(self):
        if self.proc is None:
            return
        for p in _descendants(self.proc.pid):
            self._tracked.setdefault(p.pid, p)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def worker_pids(self):
        """PIDs of the front-end's descendant processes (multiprocessing helper
        processes such as resource_tracker excluded)."""
        if self.proc is None:
            return []
        return sorted(p.pid for p in _descendants(self.proc.pid) if not _is_helper(p) and _alive(p))

    def tracked_pids(self):
        return sorted(self._tracked)

    def all_alive(self) -> bool:
        """Front-end and every recorded descendant still running."""
        return self.is_alive() and all(_alive(p) for p in self._tracked.values())

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

    # -- logs ----------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- shutdown ------------------------------------------------------------
    def _remove_ipc_dirs(self):
        """The workers' ipc directories a node could not remove (it was SIGKILLed): those
        of the ports this server used, made since it first used them, once its process
        tree is gone."""
        for port, before in self._ipc_before.items():
            remove_new_ipc_dirs(port, before)

    def _release_port(self):
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _hard_kill_all(self):
        procs = list(self._tracked.values())
        if self.proc is not None:
            for p in _descendants(self.proc.pid):
                procs.append(p)
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None

    def wait_exit(self, timeout=STOP_TIMEOUT):
        """Wait for the front-end to exit; return its exit code or None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def surviving_descendants(self, timeout=DESCENDANT_EXIT_TIMEOUT):
        """Wait up to ``timeout`` for every recorded process to exit; return survivors."""
        deadline = time.monotonic() + timeout
        while True:
            alive = [p for p in self._tracked.values() if _alive(p)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM, check_orphans=True):
        """Stop the server: ``sig`` (SIGTERM), deadline, SIGKILL; then make sure
        every descendant recorded at start is gone. Leftovers are killed and an
        AssertionError is raised listing them."""
        self.close_clients()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.record_descendants()
            try:
                self.proc.send_signal(sig)
            except OSError:
                pass
            if self.wait_exit(STOP_TIMEOUT) is None:
                self.proc.kill()
                self.proc.wait(5)
        survivors = self.surviving_descendants()
        details = []
        for p in survivors:
            try:
                details.append(f"pid={p.pid} cmd={' '.join(p.cmdline())!r}")
            except psutil.Error:
                details.append(f"pid={p.pid}")
            try:
                p.kill()
            except psutil.Error:
                pass
        # reap / settle
        for p in survivors:
            try:
                p.wait(3)
            except psutil.Error:
                pass
        rc = self.proc.returncode
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None
        self._remove_ipc_dirs()
        self._release_port()
        if survivors and check_orphans:
            raise AssertionError(
                f"server on port {self.port} left processes behind after stop: {details}\n"
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
