"""The servers a benchmark measures: a real `redis-server`, our node, or the original C
`disque-server`, each a disque.harness node on a leased port pair, with what the figures
need (CPU time of every process of the tree, by role; RSS and USS) and clients that never
retry. Every server and every child process is stopped by PID at the end (cleanup_all)."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess

import psutil
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.machine import cpu_delta
from common.report import BenchError, StartError, log, warn
from disque.harness import Node, NodeStartError, lease_port, original_argv, server_command
from disque.harness import disque_argv as harness_argv
from disque.harness.node import kill_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_ALL_SERVERS: list["Server"] = []
_ALL_POPENS: list[subprocess.Popen] = []     # redis-benchmark runs, killed if left running


class Server(Node):
    def __init__(self, label: str, kind: str, argv: list[str], port: int, logdir: str,
                 workers: int = 0, lease=None):
        safe = "".join(ch if ch.isalnum() else "_" for ch in label).strip("_")
        super().__init__(argv, port=port, cwd=logdir,          # nodes.conf, AOF
                         log_path=os.path.join(logdir, f"{safe}.{port}.stdout"),
                         stderr_path=os.path.join(logdir, f"{safe}.{port}.stderr"),
                         label=label)
        self.kind = kind  # "redis", "disque" (ours) or "cdisque" (the original, C)
        self.argv = argv
        self.workers = workers
        self._lease = lease
        _ALL_SERVERS.append(self)

    # -- lifecycle --------------------------------------------------------
    def start(self, timeout: float) -> None:
        log(f"{self.label}: starting: {' '.join(shlex.quote(a) for a in self.argv)}")
        try:
            super().start(timeout, children=self.workers)
        except NodeStartError as exc:
            raise StartError(f"{exc}\n--- ({self.log_path}, {self.stderr_path})") from exc
        procs = self.procs()
        log(f"{self.label}: ready on port {self.port}, pid {self.proc.pid}, "
            f"{len(procs)} process(es): {sorted(p.pid for p in procs)}")

    def alive(self) -> bool:
        return self.is_alive()

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(f"{self.label}: server died (exit code {self.proc.returncode})\n"
                             f"--- log ---\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        super().stop()
        if self.left_behind:
            warn(f"{self.label}: still alive after SIGTERM, SIGKILLed: {self.left_behind}")
        self.proc = None
        log(f"{self.label}: stopped")

    # -- introspection ----------------------------------------------------
    cpu_delta = staticmethod(cpu_delta)

    def cpu_snapshot(self) -> dict[int, float]:
        snap = {}
        for p in self.procs():
            try:
                t = p.cpu_times()
                snap[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        return snap

    def roles(self) -> dict[int, str]:
        """pid -> role: the started process is the front-end (or the whole server),
        its descendants are workers, numbered by pid order."""
        if self.proc is None:
            return {}
        out = {self.proc.pid: "front-end" if self.kind == "disque" else "server"}
        others = sorted(p.pid for p in self.procs() if p.pid != self.proc.pid)
        for i, pid in enumerate(others):
            out[pid] = f"worker-{i}"
        return out

    def cpu_by_role(self, before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
        roles = self.roles()
        return {roles.get(pid, str(pid)): t - before.get(pid, 0.0) for pid, t in after.items()}

    def rss(self) -> int:
        total = 0
        for p in self.procs():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def uss(self) -> int | None:
        total = 0
        try:
            for p in self.procs():
                total += p.memory_full_info().uss
        except (psutil.Error, AttributeError):
            return None
        return total

    # -- client helpers ---------------------------------------------------
    def client(self, timeout: float = 30) -> redis.Redis:
        # no automatic retries: a retried ADDJOB/LPUSH would distort the figures
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=2,
                           socket_timeout=timeout, socket_connect_timeout=5,
                           retry=Retry(NoBackoff(), 0))

    _flush_warned = False

    def flush(self, queues=("q", "processing")) -> None:
        c = self.client()
        try:
            if self.kind == "redis":
                c.delete(*queues)
            else:
                try:
                    c.execute_command("DEBUG", "FLUSHALL")
                except redis.ResponseError as exc:
                    if not Server._flush_warned:
                        warn(f"{self.label}: DEBUG FLUSHALL failed ({exc}); ignoring")
                        Server._flush_warned = True
        finally:
            c.close()

    def qlen(self, q: str) -> int | None:
        c = self.client()
        try:
            if self.kind == "redis":
                return int(c.llen(q))
            return int(c.execute_command("QLEN", q))
        except redis.RedisError:
            return None
        finally:
            c.close()


def redis_argv(args, port: int) -> list[str]:
    return [args.redis_server, "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no"]


def disque_argv(args, port: int, workers: int) -> list[str]:
    """Our server (--server-cmd, else the disque-server of this interpreter's environment)."""
    return harness_argv(port, workers, "--cluster-config-file", nodes_conf(args, port),
                        command=server_command(args.server_cmd))


def nodes_conf(args, port: int) -> str:
    """Each node its own cluster file: several nodes share the working directory."""
    return os.path.join(args.logdir, f"nodes-{port}.conf")


def new_server(args, kind: str, label: str, workers: int = 1, extra=()) -> Server:
    """A server of `kind` on a newly leased port pair (held until it stops)."""
    lease = lease_port()
    port = lease.port
    # a port leased again in the same run must not find the cluster file of the node
    # that had it before (a lone node would join that node's old cluster and wait for
    # copies on nodes that are gone)
    for stale in (nodes_conf(args, port), nodes_conf(args, port) + ".lock"):
        if os.path.exists(stale):
            os.unlink(stale)
    if kind == "redis":
        argv = redis_argv(args, port)
    elif kind == "cdisque":
        argv = original_argv(args.disque_binary, port, args.logdir)
    else:
        argv = disque_argv(args, port, workers)
    return Server(label, kind, argv + list(extra), port, args.logdir,
                  workers=workers if kind == "disque" else 0, lease=lease)


def run_child(argv, **kw) -> subprocess.Popen:
    """A client program (redis-benchmark) in a session of its own, killed at cleanup."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
    _ALL_POPENS.append(p)
    return p


def kill_child(p: subprocess.Popen) -> None:
    kill_tree(p.pid)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def cleanup_all() -> None:
    for srv in _ALL_SERVERS:
        try:
            srv.stop()
        except Exception as exc:  # pragma: no cover
            warn(f"cleanup of {srv.label} failed: {exc}")
    for p in _ALL_POPENS:
        if p.poll() is None:
            kill_child(p)


def on_signal(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_signals() -> None:
    """SIGTERM, SIGHUP and SIGINT (also when started in the background, where SIGINT is
    ignored) end the run through the cleanup."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
