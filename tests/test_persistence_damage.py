"""Damaged AOF files and failing writes (SPEC 12): a truncated tail, corruption in the
middle, disque-check-aof on a server's files, a full disk (a file-size limit on the
worker) giving -MISCONF until writes work again (appendfsync always, fsync failures and a
torn record in the middle: tests/test_persistence_disk_errors.py)."""
import resource
import subprocess
import sys

import aof_helpers
from support.jobs import queue_names, show
from support.resp_client import Err, Status, encode_command
from support.waits import wait_until


PARTIAL = b"*2\r\n$7\r\nLOADJOB\r\n$300\r\n" + b"\x01" * 40      # a record cut by a crash


def node_with_jobs(start_server, workers=2, n=8, extra=()):
    srv = start_server(workers=workers, extra_args=["--appendonly", "yes", *extra])
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, queue_names("dmg", 8), n)
    aof_helpers.kill_node(srv)
    return srv, ids


def test_truncated_tail_loads_up_to_the_last_complete_record(start_server):
    srv, ids = node_with_jobs(start_server)
    files = aof_helpers.aof_files(srv)
    victim = files[1]
    size = victim.stat().st_size
    with open(victim, "ab") as f:
        f.write(PARTIAL)
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == len(ids)
    log = srv.log_text()
    assert "short read while loading the AOF file %s" % victim in log
    assert "byte offset %d" % size in log
    # the worker rewrote its file at start: it is whole again
    rc = subprocess.run([sys.executable, "-m", "disque.check_aof", str(victim)],
                        capture_output=True, text=True)
    assert rc.returncode == 0, rc.stdout


def test_truncated_tail_refused_with_aof_load_truncated_no(start_server):
    srv, ids = node_with_jobs(start_server, workers=1)
    victim = aof_helpers.aof_files(srv)[0]
    size = victim.stat().st_size
    with open(victim, "ab") as f:
        f.write(PARTIAL)
    aof_helpers.restart(srv, extra_args=["--appendonly", "yes", "--aof-load-truncated", "no"], wait=False)
    assert aof_helpers.wait_exit(srv) == 1
    log = srv.log_text()
    assert "Unexpected end of file reading the append only file %s at byte offset %d" % (
        victim, size) in log
    assert victim.stat().st_size == size + len(PARTIAL)        # left as it was
    # disque-check-aof --fix repairs it, and the node starts with every job
    rc = subprocess.run([sys.executable, "-m", "disque.check_aof", "--fix", "--yes", str(victim)],
                        capture_output=True, text=True)
    assert rc.returncode == 0 and "truncated to %d bytes" % size in rc.stdout, rc.stdout
    aof_helpers.restart(srv, extra_args=["--appendonly", "yes", "--aof-load-truncated", "no"])
    assert aof_helpers.registered_jobs(srv) == len(ids)


def test_corrupt_file_refuses_to_start_with_the_offset(start_server):
    srv, ids = node_with_jobs(start_server, workers=2)
    victim = aof_helpers.aof_files(srv)[0]
    data = victim.read_bytes()
    # the start of the third record gets overwritten
    offsets = [i for i in range(len(data)) if data.startswith(b"*2\r\n$7\r\nLOADJOB", i)]
    bad_at = offsets[2]
    victim.write_bytes(data[:bad_at] + b"#garbage" + data[bad_at + 8:])
    aof_helpers.restart(srv, wait=False)
    assert aof_helpers.wait_exit(srv) == 1
    log = srv.log_text()
    line = [ln for ln in log.splitlines() if "Fatal" in ln]
    assert line, log
    assert "Bad file format reading the append only file %s at byte offset %d" % (
        victim, bad_at) in line[0]
    # the checker says the same and cannot fix it
    rc = subprocess.run([sys.executable, "-m", "disque.check_aof", "--fix", "--yes", str(victim)],
                        capture_output=True, text=True)
    assert rc.returncode == 1
    assert "CORRUPT" in rc.stdout and "byte offset %d" % bad_at in rc.stdout


def test_corrupt_job_payload_is_reported(start_server):
    srv, ids = node_with_jobs(start_server, workers=1, n=2)
    victim = aof_helpers.aof_files(srv)[0]
    data = bytearray(victim.read_bytes())
    # inside the first record: make the job's own length field disagree with the record
    payload_at = data.index(b"\r\n", data.index(b"$", 10)) + 2
    data[payload_at] ^= 0x7f
    victim.write_bytes(bytes(data))
    aof_helpers.restart(srv, wait=False)
    assert aof_helpers.wait_exit(srv) == 1
    assert "at byte offset 0: bad serialized job" in srv.log_text()


def test_check_aof_reports_a_servers_files(start_server):
    srv, ids = node_with_jobs(start_server, workers=2)
    files = [str(p) for p in aof_helpers.aof_files(srv).values()]
    rc = subprocess.run([sys.executable, "-m", "disque.check_aof", *files],
                        capture_output=True, text=True)
    assert rc.returncode == 0
    assert sum(int(line.split("OK, ")[1].split()[0]) for line in rc.stdout.splitlines()) == len(ids)


def set_fsize(pid, limit):
    hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))


def test_disk_full_gives_misconf_until_writes_work_again(start_server):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    ok = set(aof_helpers.add_jobs(r, ["full"], 5))
    size = int(aof_helpers.info(srv)["aof_current_size"])
    [worker] = srv.worker_pids()
    set_fsize(worker, size + 400)           # room for about two more jobs
    refused = 0
    for i in range(20):
        reply = r.execute("ADDJOB", "full", b"x" * 100, 0)
        if type(reply) is Status:
            ok.add(bytes(reply))
        else:
            assert reply == Err(b"MISCONF Errors writing to the AOF file: File too large"), reply
            refused += 1
    assert refused >= 15
    misconf = Err(b"MISCONF Errors writing to the AOF file: File too large")
    wait_until(lambda: r.execute("PING") == misconf, 3, message="PING does not answer MISCONF")
    i = aof_helpers.info(srv)
    assert i["aof_last_write_status"] == "err" and int(i["aof_buffer_length"]) > 0
    assert r.execute("GETJOB", "NOHANG", "FROM", "full").startswith(b"MISCONF")
    assert r.execute("ACKJOB", next(iter(ok))).startswith(b"MISCONF")
    assert type(r.execute("QLEN", "full")) is int           # reads still work
    # space again: the buffered records are written within a second or so
    set_fsize(worker, resource.RLIM_INFINITY)
    wait_until(lambda: r.execute("PING") == Status(b"PONG"), 5, message="MISCONF stays")
    assert aof_helpers.info(srv)["aof_last_write_status"] == "ok"
    ok.update(aof_helpers.add_jobs(r, ["full"], 3))
    assert "AOF write error looks solved" in srv.log_text()
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    assert aof_helpers.registered_jobs(srv) == len(ok)
    for jid in ok:
        assert show(r, jid) is not None


def test_crash_during_the_start_up_rewrite_loses_nothing(start_server):
    """A start with another number of workers sets the old files aside
    (<stem>.<port>.old<g>.w<k>.aof) before the workers write theirs; a crash in between
    leaves both, and the next start loads them all, each job once."""
    srv, ids = node_with_jobs(start_server, workers=3, n=6)
    files = aof_helpers.aof_files(srv)
    # what a start-up killed in the middle leaves: every old file set aside, one new file
    # written (holding only part of the jobs), the others not yet
    sizes = {k: path.stat().st_size for k, path in files.items()}
    for k, path in files.items():
        path.rename(srv.workdir / ("disque.%d.old1.w%d.aof" % (srv.port, k)))
    k = max(sizes, key=sizes.get)
    old = (srv.workdir / ("disque.%d.old1.w%d.aof" % (srv.port, k))).read_bytes()
    cut = old.index(b"*2\r\n$7\r\nLOADJOB", 1)
    files[k].write_bytes(old[:cut])
    aof_helpers.restart(srv, workers=4)
    assert aof_helpers.registered_jobs(srv) == len(ids)
    assert sorted(p.name for p in srv.workdir.iterdir() if p.suffix == ".aof") == [
        "disque.%d.w%d.aof" % (srv.port, k) for k in range(4)]
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, workers=2)
    assert aof_helpers.registered_jobs(srv) == len(ids)


def test_shutdown_rewrite_aof_failure_keeps_the_node_running(start_server):
    srv = start_server(workers=1)
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, ["sdf"], 20)
    [worker] = srv.worker_pids()
    set_fsize(worker, 100)                  # the new file cannot be written
    other = srv.raw()
    r.send(encode_command("SHUTDOWN", "REWRITE-AOF"))
    other.send(encode_command("QLEN", "sdf"))      # held if it comes during the rewrite
    assert r.read_parsed() == Err(b"ERR Errors trying to SHUTDOWN. Check logs.")
    assert other.read_parsed() == 20                  # and served once it failed
    assert r.execute("PING") == Status(b"PONG")
    assert srv.is_alive()
    assert not [p for p in srv.workdir.iterdir() if p.name.startswith("temp-rewriteaof")]
    set_fsize(worker, resource.RLIM_INFINITY)
    r.send(encode_command("SHUTDOWN", "REWRITE-AOF"))
    assert aof_helpers.wait_exit(srv) == 0
    aof_helpers.restart(srv, extra_args=["--aof-enqueue-jobs-once", "yes"])
    assert aof_helpers.registered_jobs(srv) == len(ids)
    assert srv.execute("QLEN", "sdf") == 20


def test_failed_bgrewriteaof_reports_err_and_leaves_no_temp_file(start_server):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, ["bgf"], 30)
    [worker] = srv.worker_pids()
    set_fsize(worker, 1000)                 # the temp file cannot grow past 1000 bytes
    assert r.execute("BGREWRITEAOF") == Status(b"Background append only file rewriting started")
    wait_until(lambda: aof_helpers.info(srv)["aof_last_bgrewrite_status"] == "err", 10)
    wait_until(lambda: aof_helpers.info(srv)["aof_rewrite_in_progress"] == "0", 10)
    assert not [p for p in srv.workdir.iterdir() if p.name.startswith("temp-rewriteaof")]
    assert aof_helpers.info(srv)["aof_last_write_status"] == "ok"      # the AOF itself is fine
    set_fsize(worker, resource.RLIM_INFINITY)
    assert r.execute("BGREWRITEAOF") == Status(b"Background append only file rewriting started")
    aof_helpers.wait_rewrite_done(srv)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == len(ids)
