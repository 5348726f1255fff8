"""Process lifecycle: worker processes, SIGKILL/SIGTERM/SIGINT, SHUTDOWN, bad configuration
(SPEC 4.5, 13; docs/design.md, "Starting the workers" and "The worker's loop")."""

import os
import signal
import socket
import time

import psutil
import pytest


from support.resp_client import RawConn
from support.server import ipc_dirs, remove_new_ipc_dirs
from support.jobs import addjob
from support.ports import lease_port
from support.resp_client import encode_command
from support.waits import wait_until
addjob, wait_until, encode = addjob, wait_until, encode_command


def _alive(pid_or_proc):
    p = pid_or_proc if isinstance(pid_or_proc, psutil.Process) else psutil.Process(pid_or_proc)
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _busy(srv, queues=("pa", "pb", "pc", "pd", "pe", "pf")):
    """Put some state in the server: jobs, a blocked client."""
    r = srv.raw()
    for q in queues:
        addjob(r, q, b"x")
    blocked = srv.raw()
    blocked.send(encode("GETJOB", "FROM", "nothing-here-1", "nothing-here-2"))
    wait_until(lambda: int(srv.info_fields("clients")["blocked_clients"]) >= 1, 5)
    return r, blocked


@pytest.mark.parametrize("workers", [1, 3])
def test_worker_processes_exist(start_server, workers):
    srv = start_server(workers=workers)
    wait_until(lambda: len(srv.worker_pids()) >= workers, 10,
               message=f"expected >= {workers} worker processes, got {srv.worker_pids()}")
    for pid in srv.worker_pids():
        assert psutil.Process(pid).ppid() == srv.pid or srv.pid in [p.pid for p in psutil.Process(pid).parents()]


def test_sigkill_frontend_leaves_no_workers(start_server):
    srv = start_server(workers=3)
    _busy(srv)
    srv.record_descendants()
    tracked = [psutil.Process(pid) for pid in srv.tracked_pids() if pid != srv.pid]
    assert len(tracked) >= 3, tracked
    os.kill(srv.pid, signal.SIGKILL)
    assert srv.wait_exit(5) == -signal.SIGKILL
    t0 = time.monotonic()
    survivors = srv.surviving_descendants(timeout=10)
    assert not survivors, (f"workers still alive {time.monotonic() - t0:.1f}s after the front-end "
                           f"was SIGKILLed: {[p.pid for p in survivors]}")


def test_sigkill_frontend_idle_single_worker(start_server):
    srv = start_server(workers=1)
    os.kill(srv.pid, signal.SIGKILL)
    srv.wait_exit(5)
    assert not srv.surviving_descendants(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("workers", [1, 3])
def test_signal_clean_exit(start_server, workers, sig):
    srv = start_server(workers=workers)
    r, blocked = _busy(srv)
    t0 = time.monotonic()
    os.kill(srv.pid, sig)
    rc = srv.wait_exit(10)
    assert rc is not None, "server did not exit within 10 s"
    assert rc == 0, f"exit code {rc}; log:\n{srv.log_tail()}"
    assert time.monotonic() - t0 < 10
    assert not srv.surviving_descendants(timeout=5)
    data, closed = blocked.read_until_closed(5)
    assert closed
    assert "Traceback" not in srv.log_text(), srv.log_tail()


def test_sigterm_as_soon_as_it_answers_stops_it_cleanly(start_server):
    """A SIGTERM that comes while the node finishes starting (its first PONG can be sent
    before the loop runs) stops it through its cleanup: exit 0, no ipc directory left."""
    lease = lease_port()
    try:
        before = ipc_dirs(lease.port)
        srv = start_server(workers=2, wait=False, port=lease.port)

        def pong():
            try:
                r = RawConn(lease.port, timeout=2)
            except OSError:
                return False
            try:
                return r.call("PING") == b"+PONG\r\n"
            except OSError:
                return False
            finally:
                r.close()
        wait_until(pong, timeout=20, message="the node never answered")
        os.kill(srv.pid, signal.SIGTERM)
        rc = srv.wait_exit(10)
        assert rc == 0, f"exit code {rc}; log:\n{srv.log_tail()}"
        assert ipc_dirs(lease.port) == before
        assert not srv.surviving_descendants(timeout=5)
    finally:
        lease.release()


@pytest.mark.parametrize("link", ["unix", "zmq"])
def test_the_private_directory_is_made_only_when_needed_and_removed_at_the_stop(start_server, link):
    """The ZeroMQ worker link's endpoint lives in the node's private directory; the default
    link and an open bus need none, so a start makes none (nor imports tempfile for it)."""
    lease = lease_port()
    try:
        before = ipc_dirs(lease.port)
        srv = start_server(workers=2, port=lease.port, extra_args=["--worker-link", link])
        made = ipc_dirs(lease.port) - before
        assert len(made) == (1 if link == "zmq" else 0), made
        for d in made:
            assert os.stat(d).st_mode & 0o777 == 0o700
        os.kill(srv.pid, signal.SIGTERM)
        rc = srv.wait_exit(10)
        assert rc == 0, f"exit code {rc}; log:\n{srv.log_tail()}"
        assert ipc_dirs(lease.port) == before
    finally:
        lease.release()


@pytest.mark.parametrize("workers", [1, 3])
def test_shutdown_command(start_server, workers):
    srv = start_server(workers=workers)
    r, blocked = _busy(srv)
    assert r.call("SHUTDOWN", "foo") == b"-ERR syntax error\r\n"
    assert r.call("SHUTDOWN", "REWRITE-AOF", "x") == b"-ERR syntax error\r\n"
    assert r.call("PING") == b"+PONG\r\n"
    assert srv.is_alive()
    r.send(encode("shutdown"))
    data, closed = r.read_until_closed(10)
    assert closed
    assert not data.startswith(b"-"), data
    rc = srv.wait_exit(10)
    assert rc == 0, f"exit code {rc}; log:\n{srv.log_tail()}"
    assert not srv.surviving_descendants(timeout=5)
    assert "Traceback" not in srv.log_text(), srv.log_tail()
    # the port is released
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()


def test_restart_on_same_port_after_shutdown(start_server):
    srv = start_server(workers=3)
    port = srv.port
    srv.raw().send(encode("SHUTDOWN"))
    assert srv.wait_exit(10) == 0
    assert not srv.surviving_descendants(timeout=5)
    srv2 = start_server(workers=3, port=port)
    with srv2.raw() as r:
        assert r.call("PING") == b"+PONG\r\n"
        assert r.execute("QLEN", "pa") == 0      # no persistence by default


@pytest.mark.parametrize("extra", [
    ["--foo", "bar"],
    ["--port", "70000"],
    ["--loglevel", "loud"],
    ["--appendfsync", "sometimes"],
    ["--daemonize", "maybe"],
    ["--maxmemory", "0"],
], ids=lambda e: " ".join(e))
def test_bad_configuration_fails_fast(start_server, extra):
    srv = start_server(workers=1, extra_args=extra, wait=False)
    t0 = time.monotonic()
    rc = srv.wait_exit(10)
    elapsed = time.monotonic() - t0
    assert rc is not None, f"server with {extra} kept running; log:\n{srv.log_tail()}"
    assert rc != 0
    assert elapsed < 5, elapsed
    out = srv.log_text()
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("=== start")]
    assert lines, "no reason printed"
    assert "Traceback" not in out, out
    key = extra[0].lstrip("-")
    assert any(key in ln or extra[1] in ln for ln in lines), out
    assert not srv.surviving_descendants(timeout=5)


def test_port_in_use_fails_fast(start_server):
    lease = lease_port()
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.bind(("127.0.0.1", lease.port))
        blocker.listen(1)
        before = ipc_dirs(lease.port)
        srv = start_server(workers=1, wait=False, port=lease.port)
        rc = srv.wait_exit(10)
        assert rc is not None and rc != 0, f"server did not fail; log:\n{srv.log_tail()}"
        assert srv.log_text().strip()
        assert not srv.surviving_descendants(timeout=5)
        # nothing of the failed start is left behind (the workers' ipc directory)
        assert ipc_dirs(lease.port) == before
    finally:
        blocker.close()
        lease.release()


def test_bus_port_in_use_fails_fast_with_the_reason(start_server):
    """The bus port (port + 10000) is opened after the workers start: a busy one must stop
    the node with its one-line reason, not leave it hanging in ZeroMQ's context teardown
    (the sockets made before the failed bind used to stay open)."""
    lease = lease_port()
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind(("127.0.0.1", lease.port + 10000))
        blocker.listen(1)
        srv = start_server(workers=2, wait=False, port=lease.port)
        rc = srv.wait_exit(10)
        assert rc == 1, f"server did not fail fast; log:\n{srv.log_tail()}"
        assert "Creating the cluster bus socket on port %d" % (lease.port + 10000) in srv.log_text()
        assert not srv.surviving_descendants(timeout=5)
    finally:
        blocker.close()
        lease.release()


def test_workers_import_the_installed_package_not_the_current_directory(tmp_path):
    """Started from a directory that holds another `disque` package (a source checkout
    without compiled extensions, say), the workers must still import the one the
    front-end runs."""
    import shutil
    import socket
    import subprocess
    import sys as _sys

    script = shutil.which("disque-server", path=os.path.dirname(_sys.executable))
    if script is None:
        pytest.skip("disque-server console script not installed next to the interpreter")
    fake = tmp_path / "disque"
    (fake / "workers").mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('shadowing package imported')\n")
    (fake / "workers" / "__init__.py").write_text("")
    lease = lease_port()
    before = ipc_dirs(lease.port)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([script, "--port", str(lease.port), "--workers", "2"], cwd=tmp_path,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def pong():
            try:
                with socket.create_connection(("127.0.0.1", lease.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(100) == b"+PONG\r\n"
            except OSError:
                assert proc.poll() is None, (tmp_path / "server.log").read_text()
                return False
        wait_until(pong, timeout=20)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        remove_new_ipc_dirs(lease.port, before)     # a SIGTERM before run() kills it outright
        lease.release()
