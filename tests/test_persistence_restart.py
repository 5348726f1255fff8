"""AOF persistence across restarts (SPEC 12, README "Persistence"): SIGKILL of the whole
node with appendfsync always / everysec, ACKed jobs, a different number of workers, the
controlled restart with aof-enqueue-jobs-once (RETRY 0 jobs too), SHUTDOWN REWRITE-AOF."""
import time

import pytest

import aof_helpers
from support.info import parse_info
from support.jobs import addjob, queue_names, show
from support.resp_client import Err, NULL_ARRAY, Status, encode_command
from support.slots import queues_on_distinct_workers



def test_jobs_survive_sigkill_with_appendfsync_always(start_server):
    srv = start_server(workers=2, extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    r = srv.raw()
    queues = queues_on_distinct_workers("surv", 2, 2)
    ids = aof_helpers.add_jobs(r, queues, 10)
    delayed = addjob(r, "surv-delayed", b"later", 0, "DELAY", 100, "RETRY", 5)
    acked = list(ids)[::3]
    assert r.execute("ACKJOB", *acked) == len(acked)
    fast = list(ids)[1::3][:3]
    assert r.execute("FASTACK", *fast) == len(fast)
    fetched = r.execute("GETJOB", "COUNT", 2, "FROM", queues[0])
    assert len(fetched) == 2
    live = {jid for jid in ids if jid not in acked and jid not in fast}
    before = {jid: show(r, jid) for jid in live | {delayed}}
    shown_at = time.monotonic()
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    assert aof_helpers.registered_jobs(srv) == len(live) + 1
    for jid in acked + fast:
        assert show(r, jid) is None, "an acked/deleted job came back"
    for jid, old in before.items():
        new = show(r, jid)
        assert new is not None, "job lost: %r" % jid
        assert new[b"state"] == b"active"               # loaded jobs are not queued (SPEC 12)
        for field in (b"queue", b"body", b"ctime", b"delay", b"retry", b"repl"):
            assert new[field] == old[field], field
        # the TTL went down by the time the restart took, give or take a second of rounding
        assert old[b"ttl"] - (time.monotonic() - shown_at) - 1 <= new[b"ttl"] <= old[b"ttl"], (new, old)
    assert sum(r.execute("QLEN", q) for q in queues) == 0
    # every job can still be delivered
    assert aof_helpers.enqueue_all(r, live) == len(live)
    got = aof_helpers.fetch_all(r, queues, len(live))
    assert set(got) == live
    assert all(body.startswith(b"job-" + q) for q, body in got.values())


def test_everysec_keeps_jobs_older_than_two_seconds(start_server):
    """appendfsync everysec loses at most the last second (writes wait at most 2 s for a slow
    fsync): jobs added more than 2 s before a SIGKILL of the node are all back."""
    srv = start_server(workers=2, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    assert r.execute("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"everysec"]
    old = aof_helpers.add_jobs(r, queue_names("es", 6), 20)
    time.sleep(2.2)         # the property is about time: let more than two seconds pass
    young = aof_helpers.add_jobs(r, queue_names("es", 6), 5, body=b"young")
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    for jid in old:
        assert show(r, jid) is not None, "job added > 2 s before the kill was lost"
    # not promised, but the write() happened before the reply: a process kill keeps them
    assert aof_helpers.registered_jobs(srv) == len(old) + len(young)


def test_expired_jobs_are_not_loaded(start_server):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    t0 = time.monotonic()
    short = addjob(r, "exp", b"x", 0, "TTL", 1)
    keep = addjob(r, "exp", b"y", 0, "TTL", 60)
    aof_helpers.kill_node(srv)
    time.sleep(max(0.0, 1.3 - (time.monotonic() - t0)))     # TTL 1 s must pass
    aof_helpers.restart(srv)
    r = srv.raw()
    assert show(r, short) is None and show(r, keep) is not None
    assert "1 expired" in srv.log_text()


@pytest.mark.parametrize("new_workers", [1, 4])
def test_restart_with_another_number_of_workers_loads_every_job(start_server, new_workers):
    srv = start_server(workers=3, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    queues = queue_names("resh", 24)
    ids = aof_helpers.add_jobs(r, queues, 5)
    acked = list(ids)[::4]
    assert r.execute("ACKJOB", *acked) == len(acked)
    live = set(ids) - set(acked)
    aof_helpers.kill_node(srv)
    assert sorted(aof_helpers.aof_files(srv)) == [0, 1, 2]
    aof_helpers.restart(srv, workers=new_workers)
    r = srv.raw()
    # each file now belongs to one worker of the new node; no file of a missing worker stays
    assert sorted(aof_helpers.aof_files(srv)) == list(range(new_workers))
    assert aof_helpers.registered_jobs(srv) == len(live)
    workers = parse_info(r.execute("INFO", "workers"))
    assert len(workers) == new_workers
    assert aof_helpers.enqueue_all(r, live) == len(live)
    got = aof_helpers.fetch_all(r, queues, len(live))
    assert set(got) == live
    assert all(q.decode() == ids[jid] for jid, (q, _) in got.items())
    # and once more, back to 3 workers, from the files the new node wrote
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, workers=3)
    assert aof_helpers.registered_jobs(srv) == len(live)
    assert sorted(aof_helpers.aof_files(srv)) == [0, 1, 2]


@pytest.mark.parametrize("appendonly", ["no", "yes"])
def test_controlled_restart_restores_queues_exactly_once(start_server, tmp_path, appendonly):
    """The upstream README procedure: CONFIG SET aof-enqueue-jobs-once yes, CONFIG REWRITE,
    SHUTDOWN REWRITE-AOF, restart with the config file. Works with AOF off too."""
    conf = tmp_path / ("disque-%s.conf" % appendonly)
    conf.write_text("appendonly %s\n" % appendonly)
    srv = start_server(workers=2, extra_args=[conf])
    r = srv.raw()
    queues = queues_on_distinct_workers("ctl", 2, 2)
    aof_helpers.add_jobs(r, queues, 4)
    aof_helpers.add_jobs(r, queues, 3, "RETRY", 0, body=b"amo")
    delivered = {j[1] for j in r.execute("GETJOB", "COUNT", 3, "FROM", queues[1])}
    amo_delivered = addjob(r, "ctl-amo", b"once", 0, "RETRY", 0)
    assert r.execute("GETJOB", "FROM", "ctl-amo")[0][1] == amo_delivered
    amo_delayed = addjob(r, "ctl-delayed", b"later", 0, "RETRY", 0, "DELAY", 2)
    queued = {q: [j[1] for j in r.execute("QPEEK", q, 100)] for q in queues}
    assert sum(len(v) for v in queued.values()) == 4 * 7 - 3
    assert r.execute("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == Status(b"OK")
    assert r.execute("CONFIG", "REWRITE") == Status(b"OK")
    r.send(encode_command("SHUTDOWN", "REWRITE-AOF"))
    assert aof_helpers.wait_exit(srv) == 0
    assert sorted(aof_helpers.aof_files(srv)) == [0, 1]
    assert "aof-enqueue-jobs-once yes" in conf.read_text()

    aof_helpers.restart(srv, workers=3)
    r = srv.raw()
    assert r.execute("CONFIG", "GET", "aof-enqueue-jobs-once") == [b"aof-enqueue-jobs-once", b"no"]
    text = conf.read_text()
    assert "aof-enqueue-jobs-once no" in text and "aof-enqueue-jobs-once yes" not in text
    # the queues are exactly as they were, in the same order, RETRY 0 jobs included
    assert {q: [j[1] for j in r.execute("QPEEK", q, 100)] for q in queues} == queued
    for jid in delivered | {amo_delivered}:
        s = show(r, jid)
        assert s is not None and s[b"state"] == b"active"
    assert show(r, amo_delivered)[b"next-requeue-within"] is None    # never delivered again
    expected = {jid for ids in queued.values() for jid in ids}
    got = aof_helpers.fetch_all(r, queues, len(expected))
    assert set(got) == expected
    # a RETRY 0 job still in its DELAY is queued when the DELAY ends
    assert r.execute("GETJOB", "TIMEOUT", 5000, "FROM", "ctl-delayed", timeout=10) == [
        [b"ctl-delayed", amo_delayed, b"later"]]
    assert r.execute("GETJOB", "NOHANG", "FROM", "ctl-amo", *queues) == NULL_ARRAY

    # a second restart does not enqueue anything again (the option turned itself off)
    srv.stop()
    aof_helpers.restart(srv)
    r = srv.raw()
    assert sum(r.execute("QLEN", q) for q in queues) == 0
    if appendonly == "no":
        assert aof_helpers.registered_jobs(srv) == 0          # AOF off: nothing is loaded at all
    else:
        assert aof_helpers.registered_jobs(srv) > 0           # AOF on: jobs back, active, not queued


def test_enqueue_once_without_any_file_refuses_to_start(start_server):
    srv = start_server(workers=1, extra_args=["--aof-enqueue-jobs-once", "yes"], wait=False)
    assert aof_helpers.wait_exit(srv) == 1
    log = srv.log_text()
    assert "aof-enqueue-jobs-once is yes but there is no append only file" in log


def test_shutdown_rewrite_aof_writes_files_with_aof_off(start_server):
    srv = start_server(workers=2)
    r = srv.raw()
    assert aof_helpers.aof_files(srv) == {}
    ids = aof_helpers.add_jobs(r, queue_names("sd", 5), 3)
    assert r.execute("SHUTDOWN", "FOO") == Err(b"ERR syntax error")
    r.send(encode_command("shutdown", "rewrite-aof"))
    assert aof_helpers.wait_exit(srv) == 0
    files = aof_helpers.aof_files(srv)
    assert sorted(files) == [0, 1]
    assert not [p for p in srv.workdir.iterdir() if p.name.startswith("temp-rewriteaof")]
    text = b"".join(p.read_bytes() for p in files.values())
    assert text.count(b"LOADJOB") == len(ids) and b"DELJOB" not in text
    # without appendonly nor aof-enqueue-jobs-once the next start ignores them
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == 0
