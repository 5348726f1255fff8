"""A disk that refuses (issue 35, docs/faults-disks.md), with real nodes: a write error
under appendfsync always withholds the batch's replies and the node goes on refusing
writes until its file is rewritten; a full disk (tmpfs) refuses writes until space
frees, under both policies; a failed fsync (a FUSE file system, faults/flakyfs.py) makes
the file untrusted until a rewrite works; a node that cannot write takes no copies; a
torn last record is dropped with a log line, a torn record in the middle stops the
start. The tmpfs and FUSE tests need root (and fusepy with libfuse2 for FUSE)."""
import importlib
import os
import resource
import subprocess
import sys

import pytest

import aof_helpers
from disque.contracts.aof_format import RECORD_HEADS
from support.jobs import addjob, queue_names, show
from support.resp_client import Err, Status
from support.server import REPO_ROOT
from support.waits import wait_until

sys.path.insert(0, str(REPO_ROOT))
from faults.disks import fill, free  # noqa: E402

MISCONF = b"MISCONF"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mount needs root")


def set_fsize(pid, limit):
    hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))


def try_addjob(srv, queue, body=b"x" * 200):
    """ADDJOB on a new connection: the ID, an error, or None when the connection closed
    (a worker that exits on a write error takes the connections it serves)."""
    try:
        return srv.execute("ADDJOB", queue, body, 0, timeout=10)
    except (ConnectionError, OSError):
        return None


def ping(srv):
    try:
        return srv.execute("PING", timeout=5)
    except (ConnectionError, OSError):
        return None


def refused(reply):
    return reply is None or (type(reply) is Err and reply.startswith(MISCONF))


def assert_all_back(srv, ok):
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    assert aof_helpers.registered_jobs(srv) == len(ok)
    for jid in ok:
        assert show(r, jid) is not None, jid


def test_always_write_error_withholds_the_reply_and_the_node_goes_on(start_server):
    """Before: the worker exited and took the node down (upstream exits too)."""
    srv = start_server(workers=1, extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    r = srv.raw()
    ok = {addjob(r, "al", b"x", 0)}
    [worker] = srv.worker_pids()
    set_fsize(worker, int(aof_helpers.info(srv)["aof_current_size"]) + 10)
    reply = try_addjob(srv, "al")
    assert refused(reply), reply                # never an ID: the record is not on disk
    # a new worker (without the limit) loads its file, rewrites it and serves again
    wait_until(lambda: ping(srv) == Status(b"PONG"), 30, 0.1, "the node does not serve again")
    assert srv.is_alive()
    fields = srv.info_fields("server")
    assert fields["worker_aof_restarts"] == "1" and fields["worker_restarts"] == "0", fields
    ok.add(addjob(srv.raw(), "al", b"z", 0))
    assert "could not write its AOF (appendfsync always)" in srv.log_text()
    assert_all_back(srv, ok)


@pytest.fixture
def tmpfs(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "dqd-test", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)     # lazy: a server may hold it


@needs_root
@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_full_disk_refuses_writes_until_space_frees(start_server, tmpfs, policy):
    srv = start_server(workers=2, extra_args=["--appendonly", "yes", "--appendfsync", policy,
                                              "--dir", str(tmpfs)])
    queues = queue_names("df", 4)
    ok = set(aof_helpers.add_jobs(srv.raw(), queues, 5))
    fill(str(tmpfs))
    refusals = 0
    for i in range(200):
        reply = try_addjob(srv, queues[i % 4])
        if refused(reply):
            refusals += 1
            if refusals >= 4:
                break
        else:
            assert type(reply) is Status, reply     # everysec: the batch that failed first
            ok.add(bytes(reply))
    assert refusals >= 4
    wait_until(lambda: refused(ping(srv)), 10, 0.1, "PING does not answer MISCONF")
    for q in queues:                                # still refused while the disk is full
        assert refused(try_addjob(srv, q))
    assert type(srv.execute("QLEN", queues[0])) is int          # reads still work
    free(str(tmpfs))
    wait_until(lambda: ping(srv) == Status(b"PONG"), 30, 0.1, "MISCONF stays")
    ok.update(aof_helpers.add_jobs(srv.raw(), queues, 2))
    assert_all_back(srv, ok)


def test_a_node_that_cannot_write_takes_no_copies(start_cluster):
    """Before: it stored the copy and confirmed it (GOTJOB) with the record unwritten."""
    c = start_cluster(2, workers=1, extra_args=["--appendonly", "yes"])
    a, b = c[0], c[1]
    addjob(b.raw(), "cp", b"x", 0)
    [worker] = b.worker_pids()
    set_fsize(worker, int(aof_helpers.info(b)["aof_current_size"]) + 10)
    wait_until(lambda: refused(try_addjob(b, "cp")), 10, 0.1, "no MISCONF")
    reply = a.execute("ADDJOB", "cp", b"y", 1000, "REPLICATE", 2, timeout=10)
    assert type(reply) is Err and reply.startswith(b"NOREPL"), reply
    set_fsize(worker, resource.RLIM_INFINITY)
    wait_until(lambda: ping(b) == Status(b"PONG"), 10, 0.1, "MISCONF stays")
    reply = a.execute("ADDJOB", "cp", b"z", 5000, "REPLICATE", 2, timeout=10)
    assert type(reply) is Status, reply


# ---- fsync failures through FUSE ----

def fuse_ready():
    try:
        importlib.import_module("fuse")         # fusepy loads libfuse2 here
    except (ImportError, OSError):
        return False
    return os.geteuid() == 0 and os.path.exists("/dev/fuse")


@pytest.fixture
def flaky(tmp_path):
    """A FUSE pass-through at tmp_path/fuse (n0 inside) whose fsync fails while
    tmp_path/control/fail-fsync-n0 exists."""
    backing, mnt, control = tmp_path / "backing", tmp_path / "fuse", tmp_path / "control"
    for d in (backing / "n0", mnt, control):
        d.mkdir(parents=True)
    p = subprocess.Popen([sys.executable, "-m", "faults.flakyfs", str(backing), str(mnt),
                          str(control)], cwd=str(REPO_ROOT))
    try:
        wait_until(lambda: os.path.ismount(mnt) or p.poll() is not None, 10, 0.05)
        assert os.path.ismount(mnt), "FUSE did not mount"
        yield mnt / "n0", control / "fail-fsync-n0"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.skipif(not fuse_ready(), reason="needs root, /dev/fuse, fusepy and libfuse2")
@pytest.mark.parametrize("policy", ["everysec", "always"])
def test_failed_fsync_refuses_writes_until_the_file_is_rewritten(start_server, flaky, policy):
    """Before: a failed background fsync (everysec) was ignored, and with always the node
    stopped. After one, the file is not trusted: -MISCONF until a rewrite works."""
    d, fail = flaky
    srv = start_server(workers=1, extra_args=["--appendonly", "yes", "--appendfsync", policy,
                                              "--dir", str(d)])
    ok = set(aof_helpers.add_jobs(srv.raw(), ["fs"], 5))
    fail.touch()

    def refusing():
        reply = try_addjob(srv, "fs")
        if type(reply) is Status:
            ok.add(bytes(reply))        # everysec: written before the fsync that fails
        return refused(reply)
    wait_until(refusing, 15, 0.05, "no MISCONF while fsync fails")
    wait_until(lambda: refused(ping(srv)), 10, 0.05, "PING does not answer MISCONF")
    wait_until(lambda: "Background AOF rewrite failed" in srv.log_text(), 15, 0.1,
               "no rewrite tried while fsync fails")
    assert refused(try_addjob(srv, "fs"))       # the rewrite's fsync failed too: still refused
    fail.unlink()
    wait_until(lambda: ping(srv) == Status(b"PONG"), 30, 0.1, "MISCONF stays")
    assert "AOF not trusted" in srv.log_text()
    ok.update(aof_helpers.add_jobs(srv.raw(), ["fs"], 2))
    assert_all_back(srv, ok)


# ---- torn records ----

def jobs_then_kill(start_server, n=5, ack_first=False):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    ids = list(aof_helpers.add_jobs(r, ["torn"], n))
    if ack_first:
        assert r.execute("ACKJOB", ids[0]) == 1
    aof_helpers.kill_node(srv)
    [path] = aof_helpers.aof_files(srv).values()
    return srv, ids, path


def last_start(data, head):
    return data.rfind(head)


@pytest.mark.parametrize("keep", [1, 17, 40, -2])
def test_torn_last_record_is_dropped_with_a_log_line(start_server, keep):
    srv, ids, path = jobs_then_kill(start_server)
    data = path.read_bytes()
    start = last_start(data, RECORD_HEADS[0])
    cut = start + keep if keep > 0 else len(data) + keep
    path.write_bytes(data[:cut])
    aof_helpers.restart(srv)
    assert ("the %d bytes after the last complete record (byte offset %d) are ignored"
            % (cut - start, start)) in srv.log_text()
    r = srv.raw()
    assert aof_helpers.registered_jobs(srv) == len(ids) - 1       # the torn one only
    for jid in ids[:-1]:
        assert show(r, jid) is not None
    rc = subprocess.run([sys.executable, "-m", "disque.check_aof", str(path)],
                        capture_output=True, text=True)
    assert rc.returncode == 0, rc.stdout                # rewritten whole at start


def test_torn_record_in_the_middle_stops_the_start(start_server):
    """A LOADJOB cut short and followed by a whole (shorter) DELJOB: before, the loader
    took everything after the cut for the torn record's tail and dropped the DELJOB with
    it (job 1 came back) under a "short read" warning."""
    srv, ids, path = jobs_then_kill(start_server, ack_first=True)
    data = path.read_bytes()
    deljob = last_start(data, RECORD_HEADS[1])
    torn = data.rfind(RECORD_HEADS[0], 0, deljob)
    path.write_bytes(data[:torn + 30] + data[deljob:])
    aof_helpers.restart(srv, wait=False)
    assert aof_helpers.wait_exit(srv) == 1
    line = ("Bad file format reading the append only file %s at byte offset %d: a record "
            "cut short, followed by whole records %d bytes further" % (path, torn, 30))
    assert line in srv.log_text()
    rc = subprocess.run([sys.executable, "-m", "disque.check_aof", str(path)],
                        capture_output=True, text=True)
    assert rc.returncode == 1 and "CORRUPT" in rc.stdout, rc.stdout


@needs_root
def test_a_full_disk_does_not_stop_the_front_ends_cron(start_server, tmpfs):
    """The cluster config cannot be saved on a full disk. Before, the save raised inside
    the front-end's cron, every 100 ms for as long as the disk was full: a traceback each
    time and the rest of the cron skipped (memory polls, watching the workers)."""
    from disque.harness import cluster as hc
    timeout = ["--cluster-node-timeout", "1000"]
    a = start_server(workers=1, extra_args=[*timeout, "--dir", str(tmpfs)])
    b, c = (start_server(workers=1, extra_args=timeout) for _ in range(2))
    assert hc.join([a, b, c])
    b_id = b.execute("CLUSTER", "MYID").decode()
    fill(str(tmpfs))
    aof_helpers.kill_node(b)              # a and c agree it failed: a's config file must be saved
    wait_until(lambda: " fail" in next(line for line in a.execute("CLUSTER", "NODES").decode()
                                       .splitlines() if line.startswith(b_id)), 20, 0.1)
    wait_until(lambda: "Can't save the cluster config" in a.log_text(), 10, 0.1)
    reply = a.execute("CLUSTER", "SAVECONFIG")
    assert type(reply) is Err and b"No space left" in reply, reply
    assert "Traceback" not in a.log_text()
    free(str(tmpfs))
    wait_until(lambda: "Cluster config" in a.log_text() and "saved again" in a.log_text(),
               10, 0.1, "the config is not saved again")
    line = next(x for x in (tmpfs / "nodes.conf").read_text().splitlines()
                if x.startswith(b_id))
    assert " fail" in line, line
    assert a.execute("CLUSTER", "SAVECONFIG") == Status(b"OK")
