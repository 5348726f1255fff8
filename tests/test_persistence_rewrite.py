"""AOF rewrites and runtime control (SPEC 12, 14): BGREWRITEAOF compacts every worker's file
without losing the writes made meanwhile, automatic rewrite, CONFIG SET appendonly /
appendfsync at runtime, INFO persistence, -LOADING while a large file loads, DEBUG
FLUSHALL with AOF on."""
import socket
import time

import aof_helpers
from support.info import parse_info
from support.jobs import addjob, queue_names, show
from support.resp_client import Err, RawConn, Status, encode_command
from support.waits import wait_until


PERSISTENCE_FIELDS = ["loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress",
                      "aof_rewrite_scheduled", "aof_last_rewrite_time_sec",
                      "aof_current_rewrite_time_sec", "aof_last_bgrewrite_status",
                      "aof_last_write_status"]
AOF_ON_FIELDS = ["aof_current_size", "aof_base_size", "aof_pending_rewrite", "aof_buffer_length",
                 "aof_rewrite_buffer_length", "aof_pending_bio_fsync", "aof_delayed_fsync"]


def info_keys(srv):
    text = srv.execute("INFO", "persistence").decode()
    return [line.split(":")[0] for line in text.split("\r\n")[1:] if line]


def total_size(srv):
    return sum(p.stat().st_size for p in aof_helpers.aof_files(srv).values())


def test_info_persistence_fields(start_server):
    srv = start_server(workers=2)
    assert info_keys(srv) == PERSISTENCE_FIELDS
    i = aof_helpers.info(srv)
    assert (i["loading"], i["aof_enabled"], i["aof_state"]) == ("0", "0", "off")
    assert i["aof_last_rewrite_time_sec"] == "-1"
    srv2 = start_server(workers=2, extra_args=["--appendonly", "yes"])
    assert info_keys(srv2) == PERSISTENCE_FIELDS + AOF_ON_FIELDS
    r = srv2.raw()
    addjob(r, "inf", b"x" * 50, 0)
    i = aof_helpers.info(srv2)
    assert (i["aof_enabled"], i["aof_state"], i["aof_last_write_status"]) == ("1", "on", "ok")
    assert int(i["aof_current_size"]) == total_size(srv2) > 50      # summed over the workers


def test_bgrewriteaof_compacts_and_keeps_every_live_job(start_server):
    srv = start_server(workers=2, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    queues = queue_names("bg", 10)
    ids = aof_helpers.add_jobs(r, queues, 300)
    dead = list(ids)[:2800]
    for i in range(0, len(dead), 500):
        r.execute("ACKJOB", *dead[i:i + 500])
    live = set(ids) - set(dead)
    before = total_size(srv)
    assert int(aof_helpers.info(srv)["aof_current_size"]) == before
    # a second BGREWRITEAOF while the first runs is refused; writes made while it runs
    # (new jobs, acks) end up in the new files
    extra = [encode_command("ADDJOB", "bg-during", b"d%d" % i, 0) for i in range(50)]
    r.send(encode_command("BGREWRITEAOF") + encode_command("BGREWRITEAOF")
           + b"".join(extra) + encode_command("ACKJOB", *list(live)[:5]))
    assert r.read_parsed() == Status(b"Background append only file rewriting started")
    assert r.read_parsed() == Err(b"ERR Background append only file rewriting already in progress")
    during = {bytes(r.read_parsed()) for _ in range(50)}
    assert r.read_parsed() == 5
    live = (live - set(list(live)[:5])) | during
    i = aof_helpers.wait_rewrite_done(srv)
    after = total_size(srv)
    assert after < before / 4, (before, after)
    assert int(i["aof_current_size"]) == int(i["aof_base_size"]) == after
    assert int(i["aof_last_rewrite_time_sec"]) >= 0
    assert not [p for p in srv.workdir.iterdir() if p.name.startswith("temp-rewriteaof")]
    assert "Background AOF rewrite of 2 worker file(s) terminated with success" in srv.log_text()
    text = b"".join(p.read_bytes() for p in aof_helpers.aof_files(srv).values())
    assert text.count(b"LOADJOB") >= len(live)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    assert aof_helpers.registered_jobs(srv) == len(live)
    for jid in live:
        assert show(r, jid) is not None


def test_bgrewriteaof_with_aof_off_writes_the_files(start_server):
    srv = start_server(workers=2)
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, queue_names("off", 4), 5)
    assert r.execute("BGREWRITEAOF") == Status(b"Background append only file rewriting started")
    wait_until(lambda: len(aof_helpers.aof_files(srv)) == 2 and aof_helpers.info(srv)["aof_rewrite_in_progress"] == "0",
               10)
    assert aof_helpers.info(srv)["aof_state"] == "off"
    text = b"".join(p.read_bytes() for p in aof_helpers.aof_files(srv).values())
    assert text.count(b"LOADJOB") == len(ids)


def test_automatic_rewrite_when_the_file_doubles(start_server):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes",
                                              "--auto-aof-rewrite-min-size", "20kb",
                                              "--auto-aof-rewrite-percentage", "100"])
    r = srv.raw()
    assert r.execute("CONFIG", "GET", "auto-aof-rewrite-min-size") == [
        b"auto-aof-rewrite-min-size", b"20480"]
    keep = addjob(r, "auto", b"keep", 0)
    # jobs that come and go: the file grows, the live data does not
    for _ in range(6):
        ids = aof_helpers.add_jobs(r, ["auto"], 50)
        assert r.execute("ACKJOB", *ids) == 50
    wait_until(lambda: "Starting automatic rewriting of AOF" in srv.log_text(), 5,
               message="no automatic rewrite")
    aof_helpers.wait_rewrite_done(srv)
    wait_until(lambda: total_size(srv) < 1000, 5)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == 1 and show(srv.raw(), keep) is not None


def test_config_set_appendonly_at_runtime(start_server):
    srv = start_server(workers=2)
    r = srv.raw()
    before = aof_helpers.add_jobs(r, queue_names("rt", 6), 4)
    assert r.execute("CONFIG", "SET", "appendonly", "yes") == Status(b"OK")
    wait_until(lambda: aof_helpers.info(srv)["aof_state"] == "on", 10, message="aof_state never on")
    assert r.execute("CONFIG", "GET", "appendonly") == [b"appendonly", b"yes"]
    assert sorted(aof_helpers.aof_files(srv)) == [0, 1]
    after = aof_helpers.add_jobs(r, queue_names("rt", 6), 2)
    assert r.execute("CONFIG", "SET", "appendfsync", "always") == Status(b"OK")
    assert r.execute("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"always"]
    always = aof_helpers.add_jobs(r, queue_names("rt", 6), 1)
    assert r.execute("CONFIG", "SET", "appendfsync", "sometimes") == Err(
        b"ERR Invalid argument 'sometimes' for CONFIG SET 'appendfsync'")
    assert r.execute("CONFIG", "SET", "appendonly", "no") == Status(b"OK")
    assert aof_helpers.info(srv)["aof_state"] == "off"
    unlogged = addjob(r, "rt-unlogged", b"u", 0)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    for jid in list(before) + list(after) + list(always):
        assert show(r, jid) is not None
    assert show(r, unlogged) is None
    assert aof_helpers.registered_jobs(srv) == len(before) + len(after) + len(always)


def test_config_set_appendonly_yes_in_an_unwritable_dir(start_server, tmp_path):
    srv = start_server(workers=1)
    r = srv.raw()
    ro = tmp_path / "ro"
    ro.mkdir()
    assert r.execute("CONFIG", "SET", "dir", str(ro)) == Status(b"OK")
    ro.chmod(0o500)
    try:
        import os
        if os.access(ro, os.W_OK):
            return      # root ignores permissions: nothing to check here
        assert r.execute("CONFIG", "SET", "appendonly", "yes") == Err(
            b"ERR Unable to turn on AOF. Check server logs.")
        assert r.execute("CONFIG", "GET", "appendonly") == [b"appendonly", b"no"]
    finally:
        ro.chmod(0o700)


def test_debug_flushall_with_aof_on_logs_deletions(start_server):
    srv = start_server(workers=2, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    aof_helpers.add_jobs(r, queue_names("fl", 4), 5)
    assert r.execute("DEBUG", "FLUSHALL") == Status(b"OK")
    kept = addjob(r, "fl-after", b"k", 0)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == 1 and show(srv.raw(), kept) is not None


def test_clients_get_loading_while_a_large_file_loads(start_server):
    """A small file is loaded before any client is served (tests/test_persistence_startup.py);
    a load that lasts longer than a fraction of a second serves clients meanwhile, with
    -LOADING for every command but INFO (PING included, so +PONG always means loaded), as
    the original does during a long load (it serves its clients every 1000 records)."""
    srv = start_server(workers=1, extra_args=["--appendonly", "yes"])
    node_id = srv.execute("CLUSTER", "MYID")
    aof_helpers.kill_node(srv)
    n = 300000      # a load long enough to be seen several times (about 1 s)
    aof_helpers.write_big_aof(aof_helpers.aof_files(srv)[0], n, node_id)
    aof_helpers.restart(srv, wait=False)
    seen = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with RawConn(srv.port, timeout=5) as c:
                # one write: the three commands are dispatched together, so the load cannot
                # end between them (it ends in another event-loop callback)
                c.send(encode_command("PING") + encode_command("INFO", "persistence")
                       + encode_command("ADDJOB", "q", "x", 0))
                reply, info, added = c.read_parsed(), c.read_parsed(), c.read_parsed()
                if reply == Err(b"LOADING Disque is loading the dataset in memory"):
                    seen.add("loading")
                    assert added == reply           # the gate answers in the same dispatch
                    # INFO is rendered when the workers answer it, so the load may have
                    # ended by then
                    i = parse_info(info)
                    if i["loading"] == "1":
                        assert int(i["loading_total_bytes"]) > 0
                        assert 0 <= float(i["loading_loaded_perc"]) <= 100
                        seen.add("loading fields")
                    time.sleep(0.05)
                    continue
                c.execute("DELJOB", added)      # loaded: the probe job is not part of the count
                assert reply == Status(b"PONG"), reply
                break
        except (ConnectionError, socket.error):
            time.sleep(0.02)
    assert seen == {"loading", "loading fields"}, seen
    srv.wait_ready()
    assert aof_helpers.registered_jobs(srv) == n
    assert aof_helpers.info(srv)["loading"] == "0"


def test_shutdown_refused_while_the_first_aof_is_written(start_server):
    srv = start_server(workers=2)
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, queue_names("first", 4), 10)
    r.send(encode_command("CONFIG", "SET", "appendonly", "yes")
           + encode_command("SHUTDOWN"))
    assert r.read_parsed() == Status(b"OK")
    assert r.read_parsed() == Err(b"ERR Errors trying to SHUTDOWN. Check logs.")
    assert "Writing initial AOF, can't exit." in srv.log_text()
    wait_until(lambda: aof_helpers.info(srv)["aof_state"] == "on", 10)
    r.send(encode_command("SHUTDOWN"))
    assert aof_helpers.wait_exit(srv) == 0
    aof_helpers.restart(srv, extra_args=["--appendonly", "yes"])
    assert aof_helpers.registered_jobs(srv) == len(ids)
