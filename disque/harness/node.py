"""`Node`: one node process (`python -m disque`, or any binary such as the original C
`disque-server`) started with its arguments, environment, working directory and log file,
waited on until it answers PING, and stopped by PID: the signal asked for (SIGTERM), a
deadline, then SIGKILL of every process of its tree. Every PID is recorded from the moment
the process exists, so a node that fails to start is killed whole too."""
from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import redis

from disque.harness.ports import PortLease, lease_port

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
DESCENDANT_EXIT_TIMEOUT = 8.0
CHILDREN_TIMEOUT = 10.0     # workers are forked a little after the front-end listens
POLL = 0.05

# multiprocessing's helper processes are not workers
_HELPER_MARKERS = ("resource_tracker", "semaphore_tracker", "forkserver")


class NodeStartError(RuntimeError):
    """The node exited, or did not answer PING in time; the message ends with its log."""


def server_command(explicit=None):
    """How to start our server: `explicit` (a command line, such as a benchmark's
    --server-cmd), else the disque-server next to this interpreter, else `python -m disque`."""
    if explicit:
        return shlex.split(explicit) if isinstance(explicit, str) else list(explicit)
    script = os.path.join(os.path.dirname(sys.executable), "disque-server")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "disque"]


def disque_argv(port, workers=1, *extra, python=None, host="127.0.0.1", command=None):
    """Command line of our node on `port`: `python -m disque` (this interpreter, or
    `python`), or `command` (a list: server_command's) when given."""
    head = command if command is not None else [python or sys.executable, "-m", "disque"]
    return [*head, "--port", str(port), "--workers", str(workers), "--bind", host,
            *map(str, extra)]


def original_argv(binary, port, workdir, *extra, host="127.0.0.1"):
    """Command line of the original C `disque-server`: it has no --workers, and it needs a
    cluster file of its own (several nodes may share a working directory)."""
    conf = os.path.join(str(workdir), f"nodes-{port}.conf")
    return [str(binary), "--port", str(port), "--bind", host, "--appendonly", "no",
            "--cluster-config-file", conf, *map(str, extra)]


def checkout_env(repo_root):
    """The environment of a node run from a checkout: the checkout first on its path, and
    its output unbuffered so that the log is complete when it dies."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo_root) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def ping(host, port, timeout=2.0) -> bool:
    """The node at host:port answers +PONG to a PING written as raw RESP."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = s.recv(256)
                if not chunk:
                    return False
                data += chunk
            return data.startswith(b"+PONG")
    except OSError:
        return False


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_helper(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(m in cmd for m in _HELPER_MARKERS)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid={proc.pid} cmd={' '.join(proc.cmdline())!r}"
    except psutil.Error:
        return f"pid={proc.pid}"


def kill_tree(pid, known=()):
    """SIGKILL `pid`, its descendants, the `known` processes of its tree (those that left it)
    and its session (started with start_new_session: nothing else is in it); wait until
    they are gone, but for `pid` itself, which its parent reaps (Popen.wait)."""
    procs = [p for p in (*known, *descendants(pid)) if p.pid != pid]
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    # a SIGKILLed process takes a moment to go; a zombie is gone for every purpose (its
    # sockets and files are closed), and an orphan's may wait a second or more for an
    # init that reaps slowly
    deadline = time.monotonic() + 5
    while any(alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.005)


class Node:
    """One node process tree.

    `argv` is the command line, or a function of the port giving it (for a node whose port
    is leased when it starts); `prefix` goes before it (`ip netns exec NS` starts the node
    in a network namespace). Output goes to `log_path` (appended, one header per start),
    standard error to `stderr_path` when given. `ready` says whether the node answers
    (default: PING on host:port); `call` sends it one command (default: redis-py)."""

    def __init__(self, argv, *, port=None, host="127.0.0.1", cwd=None, env=None,
                 log_path=None, stderr_path=None, prefix=(), ready=None, call=None,
                 start_timeout=START_TIMEOUT, label=None):
        self._argv = argv
        self.fixed_port = port      # None: a port is leased at each start
        self.port = port
        self.host = host
        self.cwd = Path(cwd) if cwd else Path.cwd()
        self.env = env
        self.log_path = Path(log_path) if log_path else self.cwd / "node.log"
        self.stderr_path = Path(stderr_path) if stderr_path else None
        self.prefix = [str(a) for a in prefix]
        self._ready = ready
        self._call = call
        self.start_timeout = start_timeout
        self.poll_interval = POLL       # larger when a check spawns a process (redis-cli)
        self.label = label or "node"
        self.proc: subprocess.Popen | None = None
        self.tracked: dict[int, psutil.Process] = {}   # every PID of the tree ever seen
        self.left_behind: list[str] = []               # what the last stop had to SIGKILL
        self.starts = 0
        self._lease: PortLease | None = None
        self._client: redis.Redis | None = None

    # -- lifecycle ---------------------------------------------------------------
    def command_line(self, port) -> list[str]:
        argv = self._argv(port) if callable(self._argv) else self._argv
        return [str(a) for a in argv]

    def spawn(self, port=None) -> subprocess.Popen:
        """Start the process without waiting, on `port`, else the node's fixed port, else
        (when the command line is made from the port) a newly leased one, held until stop."""
        if port is None:
            port = self.fixed_port
        if port is None and not isinstance(self._argv, (list, tuple)):   # argv of the port
            self.release_port()
            self._lease = lease_port()
            port = self._lease.port
        self.port = port
        self.before_spawn(port)
        argv = self.prefix + self.command_line(self.port)
        with open(self.log_path, "ab") as out:
            out.write(f"=== start {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            err = open(self.stderr_path, "ab") if self.stderr_path else None
            try:
                self.proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=err or subprocess.STDOUT, cwd=str(self.cwd), env=self.env,
                    start_new_session=True)
            except OSError as exc:
                raise NodeStartError(f"{self.label}: cannot run {argv[0]!r}: {exc}") from exc
            finally:
                if err:
                    err.close()
        try:
            self.tracked = {self.proc.pid: psutil.Process(self.proc.pid)}
        except psutil.NoSuchProcess:    # gone already: Popen still has its exit code
            self.tracked = {}
        self.starts += 1
        return self.proc

    def before_spawn(self, port):
        """Called on each start with the port, before the process exists."""

    def ready(self) -> bool:
        return self._ready(self) if self._ready else ping(self.host, self.port)

    def wait_ready(self, timeout=None):
        """Until the node answers, or raise NodeStartError (the node is left as it is)."""
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self.ready():
            rc = self.proc.poll()
            if rc is not None:
                raise NodeStartError(f"{self.label} exited with {rc} before answering PING; "
                                     f"log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise NodeStartError(f"{self.label} did not answer PING within {timeout}s; "
                                     f"log:\n{self.log_tail()}")
            time.sleep(self.poll_interval)
        self.record_descendants()
        return self

    def start(self, timeout=None, children=0):
        """Spawn, wait until it answers and has `children` worker processes; on failure
        kill the whole tree (and free the leased port) before raising."""
        try:
            self.spawn()
            self.wait_ready(timeout)
            self.wait_children(children)
        except BaseException:
            self.kill()
            self.release_port()
            raise
        return self

    def wait_children(self, n, timeout=CHILDREN_TIMEOUT):
        end = time.monotonic() + timeout
        while len(self.worker_pids()) < n and time.monotonic() < end:
            time.sleep(POLL)
        self.record_descendants()

    # -- processes ------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.proc.pid

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def record_descendants(self):
        if self.proc is not None:
            for p in descendants(self.proc.pid):
                self.tracked.setdefault(p.pid, p)

    def procs(self) -> list[psutil.Process]:
        """The live tree, root first; the same psutil objects from call to call."""
        if not self.is_alive():
            return []
        self.record_descendants()
        pids = [self.proc.pid] + [p.pid for p in descendants(self.proc.pid)]
        return [self.tracked[pid] for pid in pids if pid in self.tracked]

    def worker_pids(self) -> list[int]:
        """The root's live descendants, multiprocessing's helpers excluded."""
        if self.proc is None:
            return []
        return sorted(p.pid for p in descendants(self.proc.pid) if not is_helper(p) and alive(p))

    def tracked_pids(self) -> list[int]:
        return sorted(self.tracked)

    def all_alive(self) -> bool:
        return self.is_alive() and all(alive(p) for p in self.tracked.values())

    def signal_all(self, sig):
        """`sig` to every live process of the tree (SIGSTOP / SIGCONT to pause a node)."""
        for p in self.procs():
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def kill(self):
        """SIGKILL the whole tree at once, by PID; the port stays leased (restart on it)."""
        self.close_client()
        if self.proc is None:
            return
        self.record_descendants()
        kill_tree(self.proc.pid, self.tracked.values())
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def wait_exit(self, timeout=STOP_TIMEOUT):
        """The root's exit code, or None if it is still running after `timeout`."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def surviving_descendants(self, timeout=DESCENDANT_EXIT_TIMEOUT):
        """Wait up to `timeout` for every recorded process to exit; return the survivors."""
        deadline = time.monotonic() + timeout
        while True:
            left = [p for p in self.tracked.values() if alive(p)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(POLL)

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT,
             descendant_timeout=DESCENDANT_EXIT_TIMEOUT):
        """`sig`, up to `timeout` for the root to exit, SIGKILL; then every recorded
        process gets `descendant_timeout` to exit before it is SIGKILLed and named in
        `left_behind`. Returns the root's exit code; the port lease is released."""
        self.close_client()
        self.left_behind = []
        if self.proc is None:
            self.release_port()
            return None
        if self.proc.poll() is None:
            self.record_descendants()
            try:
                self.proc.send_signal(sig)
            except OSError:
                pass
            if self.wait_exit(timeout) is None:
                self.proc.kill()
                self.proc.wait(5)
        survivors = self.surviving_descendants(descendant_timeout)
        self.left_behind = [describe(p) for p in survivors]
        for p in survivors:
            try:
                p.kill()
                p.wait(3)
            except psutil.Error:
                pass
        self.release_port()
        return self.proc.returncode

    def release_port(self):
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    # -- commands -------------------------------------------------------------------
    def call(self, *args):
        """One command; replies as bytes, ints and lists (no redis-py reply parsing)."""
        if self._call:
            return self._call(self, *args)
        if self._client is None:
            self._client = redis.Redis(host=self.host, port=self.port, protocol=2,
                                       socket_timeout=15, socket_connect_timeout=5)
            self._client.response_callbacks.clear()
        return self._client.execute_command(*args)

    def close_client(self):
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- log --------------------------------------------------------------------------
    def log_text(self) -> str:
        text = ""
        for path in filter(None, (self.log_path, self.stderr_path)):
            try:
                text += path.read_bytes().decode("utf-8", "replace")
            except OSError:
                pass
        return text

    def log_tail(self, n=40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def __repr__(self):
        return f"<{type(self).__name__} {self.label} port={self.port}>"
