"""Shared fixtures for black-box tests of the Disque server (real processes over TCP).

Everything here talks to ``python -m disque`` subprocesses.  Helpers:

* ``DisqueServer``  - start / stop one server, track every descendant PID, raw and
  redis-py clients, log access.
* ``RawConn``       - a raw socket speaking RESP; returns exact reply bytes or a
  type-preserving parse (status vs bulk vs error vs null bulk vs null array).
* ``wait_until``    - condition waits with a deadline (no bare sleeps in tests).

Fixtures: ``server1`` / ``server3`` (module scoped, 1 and 3 workers), ``server``
(parametrized over both), ``start_server`` (function scoped factory for custom
options).  Module-scoped servers are reset with ``DEBUG FLUSHALL`` before each
test that uses them, are checked for liveness after each test, and are
restarted if a test killed or crashed them.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import redis

from support.markers import assign_markers


def pytest_collection_modifyitems(config, items):
    assign_markers(items)

REPO_ROOT = Path(__file__).resolve().parent.parent

# Ports: below 32768 (outside the ephemeral range) and port + 10000 (cluster bus)
# below 32768 as well.
PORT_MIN = 20000
PORT_MAX = 22700
BUS_OFFSET = 10000
PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "disque-test-port-locks"

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
DESCENDANT_EXIT_TIMEOUT = 8.0

# multiprocessing helper processes are not "workers"
_HELPER_MARKERS = ("resource_tracker", "semaphore_tracker", "forkserver")


# ---------------------------------------------------------------------------
# generic helpers
# ---------------------------------------------------------------------------


def wait_until(predicate, timeout=5.0, interval=0.02, message=None):
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Raises AssertionError (with ``message``) when the deadline passes."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # predicate may race with the server
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = message or f"condition not met within {timeout}s"
            if last_exc is not None:
                msg += f" (last exception: {last_exc!r})"
            raise AssertionError(msg)
        time.sleep(interval)


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



def crc16(data: bytes) -> int:
    """CRC16/XMODEM, the slot hash of README "Design" (an independent reference for tests)."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def queues_on_distinct_workers(prefix, per_worker=1, nworkers=3):
    """`per_worker` queue names owned by each worker of an `nworkers` node, worker by worker."""
    found = {w: [] for w in range(nworkers)}
    i = 0
    while any(len(v) < per_worker for v in found.values()):
        name = f"{prefix}-{i}"
        w = (crc16(name.encode()) % 4096) % nworkers
        if len(found[w]) < per_worker:
            found[w].append(name)
        i += 1
    return [q for w in range(nworkers) for q in found[w]]


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


# ---------------------------------------------------------------------------
# RESP over a raw socket
# ---------------------------------------------------------------------------


class Status(bytes):
    """A RESP simple string (``+...``)."""

    def __repr__(self):
        return f"Status({bytes(self)!r})"


class Err(bytes):
    """A RESP error (``-...``), returned, not raised."""

    def __repr__(self):
        return f"Err({bytes(self)!r})"


class _NullArray:
    def __repr__(self):
        return "NULL_ARRAY"

    def __bool__(self):
        return False


NULL_ARRAY = _NullArray()  # ``*-1``; a null bulk (``$-1``) parses as None


class Incomplete(Exception):
    pass


class ProtocolViolation(Exception):
    pass


def parse_resp(buf: bytes, pos: int = 0):
    """Parse one RESP2 (or RESP3) reply at ``buf[pos:]``; return (value, new_pos).

    Raises Incomplete if more bytes are needed."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        raise Incomplete
    kind = buf[pos:pos + 1]
    line = buf[pos + 1:nl]
    pos = nl + 2
    if kind == b"+":
        return Status(line), pos
    if kind == b"-":
        return Err(line), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise Incomplete
        if buf[pos + n:pos + n + 2] != b"\r\n":
            raise ProtocolViolation(f"bulk not terminated by CRLF: {buf[pos:pos + n + 2]!r}")
        return bytes(buf[pos:pos + n]), pos + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return NULL_ARRAY, pos
        items = []
        for _ in range(n):
            item, pos = parse_resp(buf, pos)
            items.append(item)
        return items, pos
    # RESP3 (after HELLO 3): null, map, set, boolean, double
    if kind == b"_":
        return None, pos
    if kind == b"%":
        out = {}
        for _ in range(int(line)):
            key, pos = parse_resp(buf, pos)
            out[key], pos = parse_resp(buf, pos)
        return out, pos
    if kind == b"~":
        items = []
        for _ in range(int(line)):
            item, pos = parse_resp(buf, pos)
            items.append(item)
        return items, pos
    if kind == b"#":
        return line == b"t", pos
    if kind == b",":
        return float(line), pos
    raise ProtocolViolation(f"unexpected reply type byte {kind!r} in {bytes(buf[pos - 1:pos + 40])!r}")


def encode_command(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawConn:
    """Raw TCP connection: exact bytes in, exact reply bytes out."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""

    # -- low level ------------------------------------------------------
    def send(self, data: bytes):
        self.sock.sendall(data)

    def _recv_some(self, timeout):
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return None
        except ConnectionResetError:
            return b""
        return chunk

    def read_reply(self, timeout=None) -> bytes:
        """Read exactly one complete RESP reply and return its raw bytes."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if self.buf:
                try:
                    _, end = parse_resp(self.buf, 0)
                except Incomplete:
                    pass
                else:
                    raw, self.buf = self.buf[:end], self.buf[end:]
                    return raw
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete reply within {timeout}s; buffered={self.buf[:200]!r}")
            chunk = self._recv_some(left)
            if chunk is None:
                continue
            if chunk == b"":
                raise ConnectionError(f"connection closed; buffered={self.buf[:200]!r}")
            self.buf += chunk

    def read_parsed(self, timeout=None):
        return parse_resp(self.read_reply(timeout), 0)[0]

    def read_exact(self, n: int, timeout=None) -> bytes:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"wanted {n} bytes, have {self.buf!r}")
            chunk = self._recv_some(left)
            if chunk is None:
                continue
            if chunk == b"":
                raise ConnectionError(f"closed after {self.buf!r}")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until_closed(self, timeout=5.0):
        """Return (all bytes received until EOF, closed?)."""
        deadline = time.monotonic() + timeout
        data = self.buf
        self.buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, False
            chunk = self._recv_some(left)
            if chunk is None:
                continue
            if chunk == b"":
                return data, True
            data += chunk

    def has_data(self, timeout=0.0) -> bool:
        """True if a reply byte (or EOF) is available within ``timeout``."""
        if self.buf:
            return True
        chunk = self._recv_some(timeout) if timeout > 0 else self._peek_nonblocking()
        if chunk is None:
            return False
        if chunk == b"":
            return True
        self.buf += chunk
        return True

    def _peek_nonblocking(self):
        self.sock.setblocking(False)
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return None
        except ConnectionResetError:
            return b""
        finally:
            self.sock.setblocking(True)
        return chunk

    # -- command helpers -------------------------------------------------
    def call(self, *args, timeout=None) -> bytes:
        """Send one multibulk command, return the exact raw reply bytes."""
        self.send(encode_command(*args))
        return self.read_reply(timeout)

    def execute(self, *args, timeout=None):
        """Send one multibulk command, return the type-preserving parsed reply."""
        return parse_resp(self.call(*args, timeout=timeout), 0)[0]

    def inline(self, line: bytes, timeout=None) -> bytes:
        self.send(line)
        return self.read_reply(timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def abort(self):
        """Close with RST (SO_LINGER 0) to simulate an abrupt client death."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------
# server process management
# ---------------------------------------------------------------------------


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
        self._lease: _PortLease | None = None
        self._tracked: dict[int, psutil.Process] = {}
        self._clients: list = []
        self._raws: list[RawConn] = []
        self.log_path = self.workdir / "server.log"
        self._log_fh = None
        self.starts = 0

    # -- lifecycle ---------------------------------------------------------
    def command_line(self, port):
        return [sys.executable, "-m", "disque", "--port", str(port), "--workers",
                str(self.workers), "--bind", "127.0.0.1", *self.extra_args]

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


def parse_info(text: bytes) -> dict:
    out = {}
    for line in text.decode().split("\r\n"):
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        out[k] = v
    return out


def info_sections(text: bytes) -> dict:
    """Map section name -> list of lines (without the header)."""
    sections = {}
    current = None
    for line in text.decode().split("\r\n"):
        if line.startswith("# "):
            current = line[2:].strip()
            sections[current] = []
        elif line and current is not None:
            sections[current].append(line)
    return sections


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


_MODULE_SERVER_FIXTURES = ("server1", "server3", "server3zmq", "server")


def _make_module_server(tmp_path_factory, workers, extra_args=()):
    srv = DisqueServer(workers=workers, extra_args=extra_args,
                       workdir=tmp_path_factory.mktemp(f"disque-w{workers}-"))
    srv.start()
    return srv


@pytest.fixture(scope="module")
def server1(tmp_path_factory):
    srv = _make_module_server(tmp_path_factory, 1)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server3(tmp_path_factory):
    srv = _make_module_server(tmp_path_factory, 3)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server3zmq(tmp_path_factory):
    """3 workers reached over ZeroMQ instead of the default socketpair link."""
    srv = _make_module_server(tmp_path_factory, 3, ("--worker-link", "zmq"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=["server1", "server3", "server3zmq"], ids=["w1", "w3", "w3zmq"])
def server(request):
    """A module-scoped server, flushed: 1 worker, 3 workers, or 3 workers over ZeroMQ."""
    return request.getfixturevalue(request.param)


@pytest.fixture(autouse=True)
def _module_server_hygiene(request):
    """Before a test: make sure the shared servers it uses are alive and empty.
    After it: close its clients and fail the test if it killed the server."""
    used = []
    for name in ("server1", "server3", "server3zmq"):
        if name in request.fixturenames:
            used.append(request.getfixturevalue(name))
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        if srv not in used:
            used.append(srv)
    for srv in used:
        if not srv.all_alive():
            srv.restart()
        srv.flush()
    yield
    for srv in used:
        srv.close_clients()
    dead = [srv for srv in used if not srv.all_alive()]
    for srv in dead:
        tail = srv.log_tail()
        srv.restart()
        pytest.fail(f"{srv!r} (or one of its workers) died during the test; log tail:\n{tail}",
                    pytrace=False)


@pytest.fixture
def start_server(tmp_path):
    """Factory: start_server(workers=1, extra_args=(), wait=True, port=None) -> DisqueServer.

    Every server started through it is stopped at teardown, by PID, and the test
    fails if any of its processes survive."""
    started: list[DisqueServer] = []
    counter = [0]

    def factory(workers=1, extra_args=(), wait=True, start_timeout=START_TIMEOUT, port=None):
        counter[0] += 1
        srv = DisqueServer(workers=workers, extra_args=extra_args,
                           workdir=tmp_path / f"srv{counter[0]}", start_timeout=start_timeout)
        started.append(srv)
        if wait and port is None:
            srv.start()
        else:
            srv.spawn(port=port)
            if wait:
                srv.wait_ready()
        return srv

    yield factory
    errors = []
    for srv in started:
        try:
            srv.stop()
        except AssertionError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


# ---------------------------------------------------------------------------
# shared small helpers for tests
# ---------------------------------------------------------------------------

JOB_ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")

SHOW_FIELDS = [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry",
               b"nacks", b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed",
               b"next-requeue-within", b"next-awake-within", b"body"]


def show(conn: RawConn, job_id):
    """SHOW as a dict (None for unknown jobs)."""
    reply = conn.execute("SHOW", job_id)
    if reply is None:
        return None
    assert isinstance(reply, list) and len(reply) == 30, reply
    return dict(zip(reply[0::2], reply[1::2]))


def addjob(conn: RawConn, queue, body=b"body", timeout=0, *opts) -> bytes:
    reply = conn.execute("ADDJOB", queue, body, timeout, *opts)
    assert type(reply) is Status, reply
    return bytes(reply)


def queue_names(prefix: str, n: int):
    return [f"{prefix}-{i}" for i in range(n)]


# ---------------------------------------------------------------------------
# clusters of real nodes
# ---------------------------------------------------------------------------

CLUSTER_NODE_TIMEOUT = 2000     # ms: failures are detected within a few seconds in tests


class DisqueCluster:
    """`n` real nodes (each `workers` workers) joined by a chain of CLUSTER MEETs.

    Nodes keep their port and working directory (and so nodes.conf) across kill/restart."""

    def __init__(self, factory, n, workers=2, extra_args=(), node_timeout=CLUSTER_NODE_TIMEOUT):
        args = ["--cluster-node-timeout", str(node_timeout), *extra_args]
        self.nodes = [factory(workers=workers, extra_args=args, wait=False) for _ in range(n)]
        for node in self.nodes:
            node.wait_ready()
        self.ids = [node.execute("CLUSTER", "MYID").decode() for node in self.nodes]

    def __getitem__(self, i):
        return self.nodes[i]

    def __len__(self):
        return len(self.nodes)

    def join(self, timeout=20.0):
        """Chain: node i meets node i-1; gossip must complete the mesh."""
        for i in range(1, len(self.nodes)):
            assert self.nodes[i].execute("CLUSTER", "MEET", "127.0.0.1",
                                         self.nodes[i - 1].port) == b"OK"
        self.wait_mesh(timeout=timeout)
        return self

    def cluster_info(self, i):
        return parse_info(self.nodes[i].execute("CLUSTER", "INFO"))

    def wait_mesh(self, nodes=None, timeout=20.0):
        """Every listed node (default all) sees every other listed node as reachable."""
        nodes = list(range(len(self.nodes))) if nodes is None else nodes

        def full():
            for i in nodes:
                info = self.cluster_info(i)
                if int(info["cluster_reachable_nodes"]) < len(nodes) - 1:
                    return False
            return True
        wait_until(full, timeout=timeout, message="cluster mesh did not form")

    def kill(self, i):
        """SIGKILL the node's whole process tree, keeping its port reserved."""
        node = self.nodes[i]
        node.close_clients()
        node._hard_kill_all()
        wait_until(lambda: not node.is_alive(), timeout=10)

    def restart(self, i):
        node = self.nodes[i]
        node.spawn(port=node.port)
        node.wait_ready()
        return node

    def flags_of(self, observer, target):
        """The flags field of `target` in `observer`'s CLUSTER NODES (None if unknown)."""
        text = self.nodes[observer].execute("CLUSTER", "NODES").decode()
        for line in text.splitlines():
            parts = line.split(" ")
            if parts[0] == self.ids[target]:
                return parts[2].split(",")
        return None


@pytest.fixture
def start_cluster(start_server):
    """Factory: start_cluster(n, workers=2, extra_args=(), join=True) -> DisqueCluster."""
    def factory(n, workers=2, extra_args=(), join=True, node_timeout=CLUSTER_NODE_TIMEOUT):
        c = DisqueCluster(start_server, n, workers=workers, extra_args=extra_args,
                          node_timeout=node_timeout)
        if join:
            c.join()
        return c
    return factory
