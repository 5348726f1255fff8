#!/usr/bin/env python3
"""Single-node benchmark: our Python Disque vs a real redis-server.

Starts a real ``redis-server`` and our ``disque-server`` (for each requested
``--workers`` value), applies the SAME client load to both and prints a table
with the figures and the ratio ours/Redis:

  (a) redis-benchmark (C client), 50 connections: ADDJOB vs LPUSH with the same
      body, unpipelined and with ``-P 16``  -> req/s, p50/p99 latency.
  (b) produce/consume/ack cycle with one redis-py (hiredis, RESP2) client, one
      command at a time: 100x ADDJOB + GETJOB COUNT 100 + ACKJOB <100 ids>
      vs the Redis reliable-queue pattern 100x LPUSH + 100x LMOVE + 100x LREM
      -> jobs/s, client-side per-command p50/p99 of ADDJOB vs LPUSH.
  (c) memory per job: 1M jobs (100-byte bodies, 16 queues) loaded with
      pipelined redis-py on a FRESH server -> RSS delta / jobs.

For every phase the server CPU time per job (user+sys of all server processes,
i.e. the front-end plus all its descendants) is reported too.

Run (from the repo root):
    .venv/bin/python bench/bench_single_node.py            # full run
    .venv/bin/python bench/bench_single_node.py --quick    # smoke run
    .venv/bin/python bench/bench_single_node.py --json /tmp/bench.json

Note: the machine has 2 cores and the load generator runs on the same
machine, so client and server compete for CPU; the ratios are what matter.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import psutil
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - environment problem
    sys.stderr.write(
        f"missing dependency ({exc}); run with the project venv: "
        ".venv/bin/python bench/bench_single_node.py\n")
    sys.exit(2)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Reference figures of the original C Disque measured on this machine.
TARGETS = {
    "a_plain_rps": ("~1.0x", 1.0),
    "a_pipe_rps": ("~0.17x", 0.17),
    "b_cycle_jobs_s": ("~2.7x", 2.7),
    "c_bytes_per_job": ("~560 B/job", None),
}

T0 = time.monotonic()
_ALL_SERVERS: list["Server"] = []
_ALL_POPENS: list[subprocess.Popen] = []
_USED_PORTS: set[int] = set()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] WARNING: {msg}", flush=True)


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _port_bindable(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pick_port() -> int:
    """A port < 32768 such that port and port+10000 are both free (and +10000 < 32768)."""
    candidates = list(range(12000, 22700))
    random.shuffle(candidates)
    for p in candidates:
        if p in _USED_PORTS or (p + 10000) in _USED_PORTS:
            continue
        if _port_bindable(p) and _port_bindable(p + 10000):
            _USED_PORTS.add(p)
            _USED_PORTS.add(p + 10000)
            return p
    raise BenchError("no free port pair found")


def percentile(sorted_vals, q: float):
    if not sorted_vals:
        return None
    k = min(len(sorted_vals) - 1, max(0, int(round(q / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def make_body(size: int, seq: int | None = None) -> bytes:
    if seq is None:
        return (b"abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1))[:size]
    prefix = b"%010d-" % seq
    return (prefix + b"x" * size)[:size]


def _tail(path: str, n: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return "<unreadable>"
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:]) if lines else "<empty>"


def raw_ping(port: int, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(256)
            if not chunk:
                break
            buf += chunk
        return buf


def _busy_cpu(t) -> float:
    return (t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
            + getattr(t, "steal", 0.0))


def _own_cpu() -> float:
    t = os.times()  # includes reaped children (redis-benchmark)
    return t.user + t.system + t.children_user + t.children_system


class OtherLoad:
    """CPU used on the machine by anything else than the server under test and this script
    (and its redis-benchmark child), in cores. Tells whether a figure was disturbed."""

    def __init__(self):
        self.t = time.monotonic()
        self.sys = _busy_cpu(psutil.cpu_times())
        self.me = _own_cpu()

    def finish(self, server_cpu_s: float) -> float:
        wall = time.monotonic() - self.t
        other = (_busy_cpu(psutil.cpu_times()) - self.sys) - (_own_cpu() - self.me) - server_cpu_s
        return max(0.0, other / wall) if wall > 0 else 0.0


def _kill_pid(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------
# server management
# --------------------------------------------------------------------------

class Server:
    def __init__(self, label: str, kind: str, argv: list[str], port: int, logdir: str):
        self.label = label
        self.kind = kind  # "redis", "disque" (ours) or "cdisque" (the original, C)
        self.argv = argv
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.known_pids: set[int] = set()
        safe = "".join(ch if ch.isalnum() else "_" for ch in label).strip("_")
        self.stdout_path = os.path.join(logdir, f"{safe}.{port}.stdout")
        self.stderr_path = os.path.join(logdir, f"{safe}.{port}.stderr")
        self._procs_cache: dict[int, psutil.Process] = {}

    # -- lifecycle --------------------------------------------------------
    def start(self, timeout: float) -> None:
        log(f"{self.label}: starting: {' '.join(shlex.quote(a) for a in self.argv)}")
        out = open(self.stdout_path, "wb")
        err = open(self.stderr_path, "wb")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                cwd=os.path.dirname(self.stdout_path), start_new_session=True)   # nodes.conf, AOF
        except OSError as exc:
            raise BenchError(f"{self.label}: cannot exec {self.argv[0]!r}: {exc}") from exc
        finally:
            out.close()
            err.close()
        _ALL_POPENS.append(self.proc)
        self.known_pids.add(self.proc.pid)
        deadline = time.monotonic() + timeout
        last_exc = None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise BenchError(
                    f"{self.label}: server exited with code {rc} before answering PING\n"
                    f"--- stderr ({self.stderr_path}) ---\n{_tail(self.stderr_path)}\n"
                    f"--- stdout ({self.stdout_path}) ---\n{_tail(self.stdout_path)}")
            try:
                reply = raw_ping(self.port)
                if reply.startswith(b"+PONG"):
                    break
                last_exc = f"PING replied {reply!r}"
            except OSError as exc:
                last_exc = exc
            time.sleep(0.1)
        else:
            raise BenchError(
                f"{self.label}: no +PONG on port {self.port} within {timeout:.0f}s "
                f"(last error: {last_exc})\n"
                f"--- stderr ({self.stderr_path}) ---\n{_tail(self.stderr_path)}\n"
                f"--- stdout ({self.stdout_path}) ---\n{_tail(self.stdout_path)}")
        # give forked workers a moment to show up, then record them
        time.sleep(0.3)
        procs = self.procs()
        log(f"{self.label}: ready on port {self.port}, pid {self.proc.pid}, "
            f"{len(procs)} process(es): {sorted(p.pid for p in procs)}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(
                f"{self.label}: server died (exit code {self.proc.returncode})\n"
                f"--- stderr ({self.stderr_path}) ---\n{_tail(self.stderr_path)}")

    def stop(self) -> None:
        if self.proc is None:
            return
        pids = set(self.known_pids)
        try:
            for p in self.procs():
                pids.add(p.pid)
        except Exception:
            pass
        if self.proc.poll() is None:
            _kill_pid(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                warn(f"{self.label}: did not exit 10s after SIGTERM, killing")
        # anything left (root or descendants, by PID) gets SIGKILL
        deadline = time.monotonic() + 5
        for pid in sorted(pids):
            while time.monotonic() < deadline and psutil.pid_exists(pid):
                try:
                    st = psutil.Process(pid).status()
                    if st == psutil.STATUS_ZOMBIE:
                        break
                except psutil.Error:
                    break
                time.sleep(0.05)
            if psutil.pid_exists(pid):
                try:
                    if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                        warn(f"{self.label}: pid {pid} still alive, SIGKILL")
                        _kill_pid(pid, signal.SIGKILL)
                except psutil.Error:
                    pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        log(f"{self.label}: stopped")

    # -- introspection ----------------------------------------------------
    def procs(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        out = []
        try:
            root = self._procs_cache.get(self.proc.pid) or psutil.Process(self.proc.pid)
            self._procs_cache[root.pid] = root
            out.append(root)
            for ch in root.children(recursive=True):
                cached = self._procs_cache.get(ch.pid)
                if cached is None:
                    self._procs_cache[ch.pid] = ch
                    cached = ch
                out.append(cached)
        except psutil.NoSuchProcess:
            pass
        for p in out:
            self.known_pids.add(p.pid)
        return out

    def cpu_snapshot(self) -> dict[int, float]:
        snap = {}
        for p in self.procs():
            try:
                t = p.cpu_times()
                snap[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        return snap

    @staticmethod
    def cpu_delta(before: dict[int, float], after: dict[int, float]) -> tuple[float, bool]:
        """Seconds of CPU between two snapshots; second value False if the process set changed."""
        total = 0.0
        for pid, t in after.items():
            total += t - before.get(pid, 0.0)
        stable = set(before) == set(after)
        return total, stable

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
    if args.server_cmd:
        base = shlex.split(args.server_cmd)
    else:
        script = os.path.join(REPO, ".venv", "bin", "disque-server")
        if os.path.exists(script):
            base = [script]
        else:
            py = os.path.join(REPO, ".venv", "bin", "python")
            base = [py if os.path.exists(py) else sys.executable, "-m", "disque"]
    return base + ["--port", str(port), "--workers", str(workers), "--bind", "127.0.0.1",
                   "--cluster-config-file", nodes_conf(args, port)]


def nodes_conf(args, port: int) -> str:
    """Each node its own cluster file: several nodes share the working directory."""
    return os.path.join(args.logdir, f"nodes-{port}.conf")


def cdisque_argv(args, port: int) -> list[str]:
    return [args.disque_binary, "--port", str(port), "--bind", "127.0.0.1", "--appendonly", "no",
            "--cluster-config-file", nodes_conf(args, port)]


def new_server(args, kind: str, label: str, workers: int = 1) -> Server:
    port = pick_port()
    if kind == "redis":
        argv = redis_argv(args, port)
    elif kind == "cdisque":
        argv = cdisque_argv(args, port)
    else:
        argv = disque_argv(args, port, workers)
    srv = Server(label, kind, argv, port, args.logdir)
    _ALL_SERVERS.append(srv)
    return srv


# --------------------------------------------------------------------------
# (a) redis-benchmark
# --------------------------------------------------------------------------

def run_redis_benchmark(args, srv: Server, n: int, pipeline: int, keyspace: int = 0) -> dict:
    """redis-benchmark ADDJOB (LPUSH for Redis) on queue q, or with keyspace > 0 spread over
    that many queues q:<n> (redis-benchmark's -r and __rand_int__)."""
    body = make_body(args.body_size).decode()
    queue = "q:__rand_int__" if keyspace else "q"
    if srv.kind == "redis":
        cmd = ["LPUSH", queue, body]
    else:
        cmd = ["ADDJOB", queue, body, "0"]
    argv = [args.redis_benchmark, "-h", "127.0.0.1", "-p", str(srv.port),
            "-c", str(args.clients), "-n", str(n), "--csv"]
    if pipeline > 1:
        argv += ["-P", str(pipeline)]
    if keyspace:
        argv += ["-r", str(keyspace)]
    argv += cmd
    srv.flush()
    q_before = srv.qlen("q") or 0
    timeout = args.rb_timeout if args.rb_timeout else 60 + n / 5000.0
    cpu0 = srv.cpu_snapshot()
    other = OtherLoad()
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    _ALL_POPENS.append(p)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                out, err = p.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                # redis-benchmark spins forever if the server dies: watch both
                if not srv.alive() or time.monotonic() > deadline:
                    _kill_pid(p.pid)
                    out, err = p.communicate()
                    srv.check_alive()
                    raise BenchError(f"redis-benchmark timed out after {timeout:.0f}s "
                                     f"(server alive, queue len now {srv.qlen('q')})\n"
                                     f"{err.decode('utf-8', 'replace')[-1000:]}")
    finally:
        if p.poll() is None:
            _kill_pid(p.pid)
            p.wait()
    elapsed = time.monotonic() - t0
    cpu1 = srv.cpu_snapshot()
    cpu_s, stable = Server.cpu_delta(cpu0, cpu1)
    other_cores = other.finish(cpu_s)
    out_s = out.decode("utf-8", "replace")
    err_s = err.decode("utf-8", "replace")
    srv.check_alive()
    if p.returncode != 0 or "Error from server" in out_s + err_s:
        raise BenchError(f"redis-benchmark failed (rc={p.returncode}):\n"
                         f"{out_s[-2000:]}\n{err_s[-2000:]}")
    rows = [ln for ln in out_s.splitlines() if ln.startswith('"')]
    parsed = list(csv.DictReader(io.StringIO("\n".join(rows))))
    if not parsed:
        raise BenchError(f"cannot parse redis-benchmark output:\n{out_s[-2000:]}\n{err_s[-2000:]}")
    row = parsed[-1]
    q_after = srv.qlen("q")
    res = {
        "n": n, "pipeline": pipeline, "clients": args.clients,
        "rps": float(row["rps"]),
        "avg_ms": float(row["avg_latency_ms"]),
        "p50_ms": float(row["p50_latency_ms"]),
        "p95_ms": float(row["p95_latency_ms"]),
        "p99_ms": float(row["p99_latency_ms"]),
        "max_ms": float(row["max_latency_ms"]),
        "wall_s": round(elapsed, 3),
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_job": cpu_s / n * 1e6,
        "cpu_us_per_job_by_role": {k: round(v / n * 1e6, 3)
                                   for k, v in srv.cpu_by_role(cpu0, cpu1).items()},
        "queue_len_delta": None if q_after is None else q_after - q_before,
        "other_load_cores": round(other_cores, 3),
    }
    if not stable:
        res["note"] = "server process set changed during the run"
        warn(f"{srv.label}: server process set changed during the run (CPU figure approximate)")
    if keyspace:
        res["queue_len_delta"] = None      # spread over many queues: not counted
    elif res["queue_len_delta"] != n:
        warn(f"{srv.label}: queue length grew by {res['queue_len_delta']} but {n} jobs were sent")
    if "WARNING" in err_s:
        res["stderr"] = err_s.strip()[-500:]
    srv.flush()
    return res


# --------------------------------------------------------------------------
# (b) produce / consume / ack cycle with redis-py
# --------------------------------------------------------------------------

def _cycle_round_disque(c, seq0: int, batch: int, body_size: int, lat_add, lat_get, lat_ack, stats):
    pc = time.perf_counter_ns
    ex = c.execute_command
    for i in range(batch):
        body = make_body(body_size, seq0 + i)
        t = pc()
        ex("ADDJOB", "q", body, 0)
        lat_add.append(pc() - t)
    ids = []
    t = pc()
    reply = ex("GETJOB", "COUNT", batch, "FROM", "q")
    lat_get.append(pc() - t)
    if reply:
        ids.extend(j[1] for j in reply)
    extra = 0
    while len(ids) < batch:
        extra += 1
        if extra > 50:
            raise BenchError(f"GETJOB returned only {len(ids)}/{batch} jobs after 50 extra calls")
        reply = ex("GETJOB", "TIMEOUT", 1000, "COUNT", batch - len(ids), "FROM", "q")
        if reply:
            ids.extend(j[1] for j in reply)
    stats["extra_getjob"] += extra
    t = pc()
    n = ex("ACKJOB", *ids)
    lat_ack.append(pc() - t)
    if int(n) != len(ids):
        stats["ack_mismatch"] += 1


def _cycle_round_redis(c, seq0: int, batch: int, body_size: int, lat_add, lat_get, lat_ack, stats):
    pc = time.perf_counter_ns
    ex = c.execute_command
    for i in range(batch):
        body = make_body(body_size, seq0 + i)
        t = pc()
        ex("LPUSH", "q", body)
        lat_add.append(pc() - t)
    vals = []
    for _ in range(batch):
        t = pc()
        v = ex("LMOVE", "q", "processing", "RIGHT", "LEFT")
        lat_get.append(pc() - t)
        if v is None:
            raise BenchError("LMOVE returned nil: queue unexpectedly empty")
        vals.append(v)
    for v in vals:
        t = pc()
        n = ex("LREM", "processing", 1, v)
        lat_ack.append(pc() - t)
        if int(n) != 1:
            stats["ack_mismatch"] += 1


def run_cycle(args, srv: Server) -> dict:
    batch = args.batch
    rounds = args.rounds
    fn = _cycle_round_redis if srv.kind == "redis" else _cycle_round_disque
    srv.flush()
    c = srv.client()
    stats = {"extra_getjob": 0, "ack_mismatch": 0}
    try:
        # warm-up (connection, code paths); not measured
        for r in range(min(5, rounds)):
            fn(c, 10_000_000 + r * batch, batch, args.body_size, [], [], [], stats)
        stats = {"extra_getjob": 0, "ack_mismatch": 0}
        lat_add: list[int] = []
        lat_get: list[int] = []
        lat_ack: list[int] = []
        cpu0 = srv.cpu_snapshot()
        other = OtherLoad()
        t0 = time.perf_counter()
        for r in range(rounds):
            fn(c, r * batch, batch, args.body_size, lat_add, lat_get, lat_ack, stats)
        elapsed = time.perf_counter() - t0
        cpu1 = srv.cpu_snapshot()
        cpu_s, stable = Server.cpu_delta(cpu0, cpu1)
        other_cores = other.finish(cpu_s)
    finally:
        c.close()
    srv.check_alive()
    jobs = rounds * batch
    for lst in (lat_add, lat_get, lat_ack):
        lst.sort()
    ms = lambda ns: None if ns is None else ns / 1e6  # noqa: E731
    res = {
        "rounds": rounds, "batch": batch, "jobs": jobs,
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": jobs / elapsed,
        "commands_per_round": (batch + 2) if srv.kind != "redis" else 3 * batch,
        "add_p50_ms": ms(percentile(lat_add, 50)),
        "add_p99_ms": ms(percentile(lat_add, 99)),
        "get_p50_ms": ms(percentile(lat_get, 50)),
        "get_p99_ms": ms(percentile(lat_get, 99)),
        "ack_p50_ms": ms(percentile(lat_ack, 50)),
        "ack_p99_ms": ms(percentile(lat_ack, 99)),
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_job": cpu_s / jobs * 1e6,
        "cpu_us_per_job_by_role": {k: round(v / jobs * 1e6, 3)
                                   for k, v in srv.cpu_by_role(cpu0, cpu1).items()},
        "extra_getjob_calls": stats["extra_getjob"],
        "ack_count_mismatches": stats["ack_mismatch"],
        "add_cmd": "LPUSH" if srv.kind == "redis" else "ADDJOB",
        "get_cmd": "LMOVE" if srv.kind == "redis" else "GETJOB COUNT %d" % batch,
        "ack_cmd": "LREM" if srv.kind == "redis" else "ACKJOB <%d ids>" % batch,
        "other_load_cores": round(other_cores, 3),
    }
    if not stable:
        res["note"] = "server process set changed during the run"
    if stats["extra_getjob"]:
        warn(f"{srv.label}: GETJOB COUNT {batch} returned fewer jobs than queued; "
             f"{stats['extra_getjob']} extra GETJOB calls were needed")
    if stats["ack_mismatch"]:
        warn(f"{srv.label}: {stats['ack_mismatch']} ack replies did not match the number of ids")
    srv.flush()
    return res


# --------------------------------------------------------------------------
# (c) memory per job
# --------------------------------------------------------------------------

def settle_rss(srv: Server, max_wait: float, interval: float = 0.5, tol: float = 0.002,
               stable_reads: int = 3) -> int:
    last = srv.rss()
    ok = 0
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        time.sleep(interval)
        cur = srv.rss()
        if last and abs(cur - last) <= tol * last:
            ok += 1
            if ok >= stable_reads:
                return cur
        else:
            ok = 0
        last = cur
    return last


def run_memory(args, srv: Server) -> dict:
    jobs = args.mem_jobs
    nq = args.mem_queues
    per_batch = args.mem_batch
    body = make_body(args.body_size)
    queues = [f"q{i}" for i in range(nq)]
    c = srv.client(timeout=120)
    # warm the connection & code paths with a throwaway queue, then remove it
    try:
        if srv.kind == "redis":
            c.lpush("warmup", body)
            c.delete("warmup")
        else:
            jid = c.execute_command("ADDJOB", "warmup", body, 0)
            jid = jid.decode() if isinstance(jid, bytes) else jid
            c.execute_command("DELJOB", jid)
    except redis.RedisError as exc:
        warn(f"{srv.label}: warm-up command failed: {exc}")
    rss0 = settle_rss(srv, args.settle)
    uss0 = srv.uss()
    cpu0 = srv.cpu_snapshot()
    other = OtherLoad()
    t0 = time.perf_counter()
    errors = 0
    first_err = None
    sent = 0
    qi = 0
    try:
        while sent < jobs:
            n = min(per_batch, jobs - sent)
            pipe = c.pipeline(transaction=False)
            for _ in range(n):
                q = queues[qi]
                qi = (qi + 1) % nq
                if srv.kind == "redis":
                    pipe.execute_command("LPUSH", q, body)
                else:
                    pipe.execute_command("ADDJOB", q, body, 0)
            replies = pipe.execute(raise_on_error=False)
            for r in replies:
                if isinstance(r, Exception):
                    errors += 1
                    if first_err is None:
                        first_err = repr(r)
            sent += n
            if sent % (jobs // 10 or 1) < per_batch:
                log(f"{srv.label}: (c) loaded {sent:,}/{jobs:,} jobs")
        load_s = time.perf_counter() - t0
        cpu1 = srv.cpu_snapshot()
        other_cores = other.finish(Server.cpu_delta(cpu0, cpu1)[0])
        lens = []
        for q in queues:
            if srv.kind == "redis":
                lens.append(int(c.llen(q)))
            else:
                lens.append(int(c.execute_command("QLEN", q)))
    finally:
        c.close()
    srv.check_alive()
    log(f"{srv.label}: (c) waiting for RSS to settle")
    rss1 = settle_rss(srv, args.settle)
    uss1 = srv.uss()
    cpu_s, stable = Server.cpu_delta(cpu0, cpu1)
    stored = sum(lens)
    res = {
        "jobs": jobs, "queues": nq, "batch": per_batch, "body_size": args.body_size,
        "errors": errors, "first_error": first_err, "stored_jobs": stored,
        "rss_before": rss0, "rss_after": rss1,
        "bytes_per_job": (rss1 - rss0) / jobs,
        "uss_bytes_per_job": None if (uss0 is None or uss1 is None) else (uss1 - uss0) / jobs,
        "processes": len(srv.procs()),
        "load_s": round(load_s, 3),
        "load_jobs_per_s": jobs / load_s,
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_job": cpu_s / jobs * 1e6,
        "other_load_cores": round(other_cores, 3),
    }
    if errors:
        warn(f"{srv.label}: {errors} errors while loading, first: {first_err}")
    if stored != jobs:
        warn(f"{srv.label}: {stored} jobs stored in the queues, {jobs} sent")
    if not stable:
        res["note"] = "server process set changed during the run"
    return res


# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------

NOISY_CORES = 0.15


def _other_note(r: dict) -> str:
    o = r.get("other_load_cores") or 0.0
    return f"  [!! other processes used {o:.2f} cores meanwhile: noisy]" if o > NOISY_CORES else ""


WAIT_QUIET = 0.0  # set from --wait-quiet


def other_load_now(srv: "Server | None", seconds: float = 1.0) -> float:
    """Cores used by other processes than this script and `srv` over the next `seconds`."""
    c0 = srv.cpu_snapshot() if srv else {}
    o = OtherLoad()
    time.sleep(seconds)
    c1 = srv.cpu_snapshot() if srv else {}
    return o.finish(Server.cpu_delta(c0, c1)[0])


def check_machine_quiet(seconds: float = 1.0) -> float:
    """Before a benchmark starts: the CPU other processes use now, in cores, with a warning
    naming the busiest of them when it is more than NOISY_CORES. A client left spinning by
    an earlier run (a redis-benchmark whose server went away uses a whole core) skews every
    figure that follows, ratios included, since it slows the servers unevenly."""
    procs = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            p.cpu_percent(None)
            procs.append(p)
        except psutil.Error:
            pass
    load = other_load_now(None, seconds)
    if load > NOISY_CORES:
        busy = []
        for p in procs:
            try:
                pct = p.cpu_percent(None)
            except psutil.Error:
                continue
            if pct >= 10 and p.pid != os.getpid():
                cmd = " ".join(p.info.get("cmdline") or [p.info.get("name") or "?"])[:80]
                busy.append((pct, p.pid, cmd))
        busy.sort(reverse=True)
        named = "; ".join(f"pid {pid} {pct:.0f}% {cmd}" for pct, pid, cmd in busy[:3])
        warn(f"other processes use {load:.2f} cores before the benchmark starts: the figures "
             f"will be skewed ({named or 'short-lived processes'})")
    return load


def wait_quiet(srv: "Server | None" = None) -> None:
    """Wait (up to --wait-quiet seconds) until other processes use < NOISY_CORES of CPU."""
    if WAIT_QUIET <= 0:
        return
    deadline = time.monotonic() + WAIT_QUIET
    said = False
    while True:
        load = other_load_now(srv)
        if load <= NOISY_CORES:
            if said:
                log("      machine is quiet now")
            return
        if time.monotonic() > deadline:
            log(f"      still {load:.2f} cores of other load after {WAIT_QUIET:.0f}s; measuring anyway")
            return
        if not said:
            log(f"      waiting for the machine to quiet down (other processes use {load:.2f} cores)")
            said = True


def best_of(repeat: int, fn, key: str, srv: "Server | None" = None) -> dict:
    """Run fn() `repeat` times, keep the run with the highest `key` (all values kept)."""
    runs = []
    for i in range(max(1, repeat)):
        wait_quiet(srv)
        r = fn()
        runs.append(r)
        if repeat > 1:
            log(f"      run {i + 1}/{repeat}: {key} {r[key]:,.0f}" + _other_note(r))
    best = dict(max(runs, key=lambda r: r[key]))
    if repeat > 1:
        best["all_runs_" + key] = [r[key] for r in runs]
    return best


def bench_target(args, kind: str, label: str, workers: int = 1) -> dict:
    """Run phases (a), (b) on one server instance and (c) on a fresh one."""
    results: dict = {"label": label, "kind": kind, "workers": workers, "errors": {}}
    phases = args.phases
    start_failed = False
    if "a" in phases or "b" in phases:
        srv = new_server(args, kind, label, workers)
        try:
            srv.start(args.start_timeout)
            results["server_cmd"] = srv.argv
            results["processes"] = len(srv.procs())
            if "a" in phases:
                for key, n, pl in (("a_plain", args.n_plain, 1), ("a_pipe", args.n_pipe, args.pipeline)):
                    what = ("LPUSH" if kind == "redis" else "ADDJOB")
                    log(f"{label}: (a) redis-benchmark {what} c={args.clients} "
                        f"{'-P ' + str(pl) if pl > 1 else 'unpipelined'} n={n:,}")
                    try:
                        r = best_of(args.repeat, lambda: run_redis_benchmark(args, srv, n, pl), "rps", srv)
                        results[key] = r
                        log(f"{label}:     -> {r['rps']:,.0f} req/s  p50 {r['p50_ms']:.3f} ms  "
                            f"p99 {r['p99_ms']:.3f} ms  server CPU {r['cpu_us_per_job']:.2f} us/job"
                            + _other_note(r))
                    except BenchError as exc:
                        results["errors"][key] = str(exc)
                        warn(f"{label}: (a) failed: {exc}")
                        if not srv.alive():
                            raise
            if "b" in phases:
                log(f"{label}: (b) redis-py cycle, {args.rounds} rounds x {args.batch} jobs "
                    f"({'LPUSH/LMOVE/LREM' if kind == 'redis' else 'ADDJOB/GETJOB/ACKJOB'})")
                try:
                    r = best_of(args.repeat, lambda: run_cycle(args, srv), "jobs_per_s", srv)
                    results["b_cycle"] = r
                    log(f"{label}:     -> {r['jobs_per_s']:,.0f} jobs/s  {r['add_cmd']} p50 "
                        f"{r['add_p50_ms']:.3f} ms p99 {r['add_p99_ms']:.3f} ms  "
                        f"server CPU {r['cpu_us_per_job']:.2f} us/job" + _other_note(r))
                except (BenchError, redis.RedisError) as exc:
                    results["errors"]["b_cycle"] = f"{type(exc).__name__}: {exc}"
                    warn(f"{label}: (b) failed: {type(exc).__name__}: {exc}")
                    if not srv.alive():
                        raise BenchError(str(exc))
        except BenchError as exc:
            results["errors"]["server"] = str(exc)
            warn(str(exc))
            if "exited with code" in str(exc) or "no +PONG" in str(exc):
                start_failed = True
        finally:
            srv.stop()
    if "c" in phases and start_failed:
        warn(f"{label}: skipping (c) because the server did not start")
    elif "c" in phases:
        srv = new_server(args, kind, label, workers)
        try:
            srv.start(args.start_timeout)
            log(f"{label}: (c) memory: loading {args.mem_jobs:,} jobs into {args.mem_queues} "
                f"queues ({'LPUSH' if kind == 'redis' else 'ADDJOB'}, pipelined x{args.mem_batch}) "
                f"on a fresh server")
            wait_quiet(srv)
            r = run_memory(args, srv)
            results["c_mem"] = r
            log(f"{label}:     -> {r['bytes_per_job']:,.1f} bytes/job RSS "
                f"({r['rss_before'] / 2**20:.1f} -> {r['rss_after'] / 2**20:.1f} MiB), "
                f"load {r['load_jobs_per_s']:,.0f} jobs/s, server CPU {r['cpu_us_per_job']:.2f} us/job"
                + _other_note(r))
        except (BenchError, redis.RedisError) as exc:
            results["errors"]["c_mem"] = f"{type(exc).__name__}: {exc}"
            warn(f"{label}: (c) failed: {type(exc).__name__}: {exc}")
        finally:
            srv.stop()
    if not results["errors"]:
        del results["errors"]
    return results


SUMMARY_ROWS = [
    # (metric label, phase key, field, fmt, target key)
    ("(a) c50 unpipelined  req/s", "a_plain", "rps", "{:,.0f}", "a_plain_rps"),
    ("(a) c50 unpipelined  p50 ms", "a_plain", "p50_ms", "{:.3f}", None),
    ("(a) c50 unpipelined  p99 ms", "a_plain", "p99_ms", "{:.3f}", None),
    ("(a) c50 unpipelined  CPU us/job", "a_plain", "cpu_us_per_job", "{:.2f}", None),
    ("(a) c50 -P16  req/s", "a_pipe", "rps", "{:,.0f}", "a_pipe_rps"),
    ("(a) c50 -P16  p50 ms", "a_pipe", "p50_ms", "{:.3f}", None),
    ("(a) c50 -P16  p99 ms", "a_pipe", "p99_ms", "{:.3f}", None),
    ("(a) c50 -P16  CPU us/job", "a_pipe", "cpu_us_per_job", "{:.2f}", None),
    ("(b) cycle  jobs/s", "b_cycle", "jobs_per_s", "{:,.0f}", "b_cycle_jobs_s"),
    ("(b) ADDJOB|LPUSH client p50 ms", "b_cycle", "add_p50_ms", "{:.3f}", None),
    ("(b) ADDJOB|LPUSH client p99 ms", "b_cycle", "add_p99_ms", "{:.3f}", None),
    ("(b) GETJOB(100)|LMOVE p50 ms/call", "b_cycle", "get_p50_ms", "{:.3f}", "-"),
    ("(b) ACKJOB(100)|LREM p50 ms/call", "b_cycle", "ack_p50_ms", "{:.3f}", "-"),
    ("(b) cycle  CPU us/job", "b_cycle", "cpu_us_per_job", "{:.2f}", None),
    ("(c) memory bytes/job (RSS)", "c_mem", "bytes_per_job", "{:,.1f}", "c_bytes_per_job"),
    ("(c) load jobs/s (pipelined x1000)", "c_mem", "load_jobs_per_s", "{:,.0f}", None),
    ("(c) load CPU us/job", "c_mem", "cpu_us_per_job", "{:.2f}", None),
]


def _get(res: dict | None, phase: str, field: str):
    if not res:
        return None
    ph = res.get(phase)
    if not ph:
        return None
    return ph.get(field)


def build_summary(all_results: dict, workers_list: list[int]) -> list[dict]:
    rows = []
    red = all_results.get("redis")
    for label, phase, field, fmt, tkey in SUMMARY_ROWS:
        row = {"metric": label, "phase": phase, "field": field, "fmt": fmt,
               "redis": _get(red, phase, field),
               "cdisque": _get(all_results.get("cdisque"), phase, field)}
        for w in workers_list:
            v = _get(all_results.get(f"ours_w{w}"), phase, field)
            row[f"ours_w{w}"] = v
            rv = row["redis"]
            # "-" target = not comparable call-for-call (1 call per 100 jobs vs 1 per job)
            row[f"ratio_w{w}"] = (v / rv) if (v is not None and rv and tkey != "-") else None
            cv = row["cdisque"]
            row[f"vs_c_w{w}"] = (v / cv) if (v is not None and cv) else None
        row["target"] = TARGETS[tkey][0] if tkey and tkey != "-" else ""
        rows.append(row)
    return rows


def print_cpu_by_role(all_results: dict) -> None:
    """Server CPU per job of every process (front-end, each worker), per target and load."""
    print("\nServer CPU us/job by process:")
    for key, res in all_results.items():
        for phase in ("a_plain", "a_pipe", "b_cycle"):
            roles = (res.get(phase) or {}).get("cpu_us_per_job_by_role")
            if roles:
                parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(roles.items()))
                print(f"  {res.get('label', key):<14} {phase:<8} {parts}")


def print_summary(rows: list[dict], workers_list: list[int]) -> None:
    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    with_c = any(r.get("cdisque") is not None for r in rows)
    headers = ["metric", "Redis"] + (["C Disque"] if with_c else [])
    for w in workers_list:
        headers += [f"ours(workers={w})", "/Redis"] + (["/C"] if with_c else [])
    headers += ["C-Disque ref"]
    table = []
    for r in rows:
        line = [r["metric"], f(r["redis"], r["fmt"])] + ([f(r["cdisque"], r["fmt"])] if with_c else [])
        for w in workers_list:
            line += [f(r[f"ours_w{w}"], r["fmt"]), f(r[f"ratio_w{w}"], "{:.2f}x")]
            if with_c:
                line += [f(r[f"vs_c_w{w}"], "{:.2f}x")]
        line += [r["target"]]
        table.append(line)
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    sep = "+".join("-" * (w + 2) for w in widths)
    title = ("SUMMARY  (ratio = ours / Redis; higher is better for req/s and jobs/s, "
             "lower is better for latency, CPU and memory)")
    print()
    print("=" * max(len(sep), len(title)))
    print(title)
    print("=" * max(len(sep), len(title)))
    print(" | ".join(h.ljust(widths[i]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(headers)))
    print(sep)
    for t in table:
        print(" | ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(t)))
    print(sep)
    print("Targets (original C Disque measured on this machine): ADDJOB ~1.0x LPUSH unpipelined c50, "
          "~0.17x with -P 16,\n  ~2.7x the Redis reliable-queue cycle (jobs/s), ~560 bytes/job RSS.")
    print("Notes: (b) uses one redis-py+hiredis RESP2 client, one command at a time: ours = 100 ADDJOB + "
          "1 GETJOB COUNT 100 + 1 ACKJOB(100 ids)\n  per 100 jobs; Redis = 100 LPUSH + 100 LMOVE + 100 LREM. "
          "CPU us/job = user+sys CPU of all server processes / jobs.\n  (c) runs on a freshly started "
          "server; client and servers share the machine's cores.")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes for a fast smoke run (~1 minute)")
    ap.add_argument("--workers", default="1,2",
                    help="comma-separated --workers values for our server (default 1,2)")
    ap.add_argument("--only-redis", action="store_true", help="benchmark only redis-server")
    ap.add_argument("--only-ours", action="store_true", help="benchmark only our server")
    ap.add_argument("--phases", default="abc", help="subset of 'abc' to run (default abc)")
    ap.add_argument("--json", metavar="PATH", help="dump all figures as JSON to PATH")
    ap.add_argument("--n-plain", type=int, help="requests for unpipelined redis-benchmark (200000)")
    ap.add_argument("--n-pipe", type=int, help="requests for pipelined redis-benchmark (1000000)")
    ap.add_argument("--clients", type=int, default=50, help="redis-benchmark connections (50)")
    ap.add_argument("--pipeline", type=int, default=16, help="redis-benchmark -P value (16)")
    ap.add_argument("--rounds", type=int, help="cycle rounds for (b) (400)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="repeat each (a)/(b) measurement N times and keep the best (1)")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each measurement wait up to SECONDS for other processes on the "
                         "machine to use < 0.15 cores (default 0 = don't wait)")
    ap.add_argument("--batch", type=int, default=100, help="jobs per cycle round (100)")
    ap.add_argument("--mem-jobs", type=int, help="jobs for the memory phase (1000000)")
    ap.add_argument("--mem-queues", type=int, default=16, help="queues for the memory phase (16)")
    ap.add_argument("--mem-batch", type=int, default=1000, help="pipeline batch for loading (1000)")
    ap.add_argument("--body-size", type=int, default=100, help="job body size in bytes (100)")
    ap.add_argument("--settle", type=float, default=15.0,
                    help="max seconds to wait for RSS to settle (15)")
    ap.add_argument("--start-timeout", type=float, default=30.0,
                    help="seconds to wait for a server to answer PING (30)")
    ap.add_argument("--rb-timeout", type=float, default=0,
                    help="redis-benchmark timeout in seconds (default 60 + n/5000)")
    ap.add_argument("--server-cmd", default=os.environ.get("DISQUE_SERVER_CMD"),
                    help="command for our server (default .venv/bin/disque-server, else "
                         "'.venv/bin/python -m disque'); --port/--workers/--bind are appended")
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"), metavar="PATH",
                    help="the original C disque-server, built by hand from antirez/disque: "
                         "measured in the same run, with ours/C ratios (also $DISQUE_C_BINARY)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    ap.add_argument("--redis-benchmark",
                    default=shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark")
    ap.add_argument("--keep-logs", action="store_true", help="keep server logs directory")
    args = ap.parse_args(argv)
    q = args.quick
    if args.n_plain is None:
        args.n_plain = 20_000 if q else 200_000
    if args.n_pipe is None:
        args.n_pipe = 100_000 if q else 1_000_000
    if args.rounds is None:
        args.rounds = 40 if q else 400
    if args.mem_jobs is None:
        args.mem_jobs = 100_000 if q else 1_000_000
    if q and args.settle == 15.0:
        args.settle = 5.0
    args.phases = set(args.phases.lower())
    if not args.phases <= set("abc") or not args.phases:
        ap.error("--phases must be a non-empty subset of 'abc'")
    try:
        args.workers_list = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        ap.error("--workers must be a comma-separated list of integers")
    if args.only_redis and args.only_ours:
        ap.error("--only-redis and --only-ours are exclusive")
    if args.only_redis:
        args.workers_list = []
    return args


def _on_signal(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def cleanup_all() -> None:
    for srv in _ALL_SERVERS:
        try:
            srv.stop()
        except Exception as exc:  # pragma: no cover
            warn(f"cleanup of {srv.label} failed: {exc}")
    for p in _ALL_POPENS:
        if p.poll() is None:
            _kill_pid(p.pid, signal.SIGKILL)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def main(argv=None) -> int:
    global WAIT_QUIET
    args = parse_args(argv)
    WAIT_QUIET = args.wait_quiet
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)  # also when started in the background (SIG_IGN)
    args.logdir = tempfile.mkdtemp(prefix="disque-bench-")
    for tool in (args.redis_benchmark, args.redis_server):
        if not os.path.exists(tool):
            print(f"missing {tool}", file=sys.stderr)
            return 2
    log(f"bench_single_node: phases={''.join(sorted(args.phases))} "
        f"workers={args.workers_list} quick={args.quick} logs in {args.logdir}")
    log(f"sizes: (a) n={args.n_plain:,} unpipelined / n={args.n_pipe:,} -P {args.pipeline}, "
        f"c={args.clients}; (b) {args.rounds} rounds x {args.batch}; (c) {args.mem_jobs:,} jobs; "
        f"body {args.body_size} B")
    all_results: dict = {}
    rc = 0
    try:
        if not args.only_ours:
            all_results["redis"] = bench_target(args, "redis", "redis")
        if args.disque_binary:
            all_results["cdisque"] = bench_target(args, "cdisque", "C-disque")
        for w in args.workers_list:
            all_results[f"ours_w{w}"] = bench_target(args, "disque", f"ours(w={w})", w)
    except KeyboardInterrupt:
        warn("interrupted; cleaning up")
        rc = 130
    finally:
        cleanup_all()

    workers_shown = [w for w in args.workers_list if f"ours_w{w}" in all_results]
    rows = build_summary(all_results, workers_shown)
    print_summary(rows, workers_shown)
    print_cpu_by_role(all_results)
    noisy = []
    for k, v in all_results.items():
        for ph in ("a_plain", "a_pipe", "b_cycle", "c_mem"):
            o = (v.get(ph) or {}).get("other_load_cores")
            if o is not None and o > NOISY_CORES:
                noisy.append(f"{k}/{ph}: {o:.2f} cores")
    if noisy:
        print("NOISE: other processes on the machine used CPU during these measurements "
              "(throughput/latency figures are disturbed; CPU-per-job and memory much less):\n  "
              + ", ".join(noisy))
    errs = {k: v.get("errors") for k, v in all_results.items() if v.get("errors")}
    if errs:
        rc = rc or 1
        print("\nERRORS:")
        for k, e in errs.items():
            for ph, msg in e.items():
                first = msg.strip().splitlines()
                print(f"  {k} [{ph}]: " + ("\n      ".join(first[:25])))
    if args.json:
        doc = {
            "meta": {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "host": platform.node(), "cpus": os.cpu_count(),
                "python": sys.version.split()[0], "redis_py": redis.__version__,
                "quick": args.quick, "phases": "".join(sorted(args.phases)),
                "n_plain": args.n_plain, "n_pipe": args.n_pipe, "clients": args.clients,
                "pipeline": args.pipeline, "rounds": args.rounds, "batch": args.batch,
                "mem_jobs": args.mem_jobs, "mem_queues": args.mem_queues,
                "body_size": args.body_size,
            },
            "targets": {k: v[0] for k, v in TARGETS.items()},
            "results": all_results,
            "summary": [{k: v for k, v in r.items() if k != "fmt"} for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        log(f"figures written to {args.json}")
    if args.keep_logs or errs:
        log(f"server logs kept in {args.logdir}")
    else:
        shutil.rmtree(args.logdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
