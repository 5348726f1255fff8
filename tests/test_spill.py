"""More jobs than memory (docs/memory.md, "Spilling"): bodies go to the spill log past
spill-threshold, the index stays in RAM, every job comes back once with its body, the files
shrink after the drain, and a node that cannot write its spill log refuses new jobs with a
clear error and loses nothing."""
import subprocess
import threading
import zlib

import redis

import pytest

import aof_helpers
import spill_helpers
from support.waits import wait_until

QUEUES = ["spq0", "spq1", "spq2", "spq3"]
MB = 1024 * 1024


@pytest.mark.parametrize("n, maxmemory_mb", [
    (250_000, 64),                                            # the suite's form: 4x maxmemory
    pytest.param(1_000_000, 256, marks=pytest.mark.long),    # the spilling goal (docs/memory.md)
])
def test_four_times_maxmemory_of_1kb_jobs_on_2_workers(start_server, n, maxmemory_mb):
    srv = start_server(workers=2, extra_args=["--maxmemory", "%dmb" % maxmemory_mb])
    c = spill_helpers.client(srv)
    ids, crc, peak = spill_helpers.fill([c], n, QUEUES, maxmemory=maxmemory_mb * MB)
    assert len(set(ids)) == n
    info = spill_helpers.memory(c)
    assert info["used_memory"] < maxmemory_mb * MB
    assert info["spilled_jobs"] > n * 3 // 4, info
    # index RAM per spilled job: the index's own bytes over the jobs it holds
    assert info["spill_index_bytes"] / info["spilled_jobs"] <= 150, info
    assert sum(c.execute_command("QLEN", q) for q in QUEUES) == n
    got_crc, seen = spill_helpers.drain([c], n, QUEUES)
    assert seen == set(ids) and got_crc == crc
    wait_until(lambda: len(spill_helpers.spill_files(srv.workdir)[1]) == 0 and spill_helpers.memory(c)["spilled_jobs"] == 0,
               timeout=10, message="spill files did not shrink after the drain")
    assert len(spill_helpers.spill_files(srv.workdir)[0]) <= 2          # at most one segment per worker
    info = spill_helpers.memory(c)
    assert info["spill_errors"] == 0 and info["used_memory"] < 16 * MB, info


def test_a_backlog_whose_index_outgrew_the_threshold_drains_without_writing_jobs_again(start_server):
    """So many jobs spilled that their index alone is past the spill threshold: no head
    spilled can bring the worker under it, so the drain loads each job once and writes
    none back (it used to spill the heads its GETJOBs had just loaded: a job written again
    for every two read), and a GETJOB loads only what it takes."""
    srv = start_server(workers=1, extra_args=["--maxmemory", "40mb"])
    c = spill_helpers.client(srv)
    n = 230_000
    ids, crc, _ = spill_helpers.fill([c], n, QUEUES, maxmemory=40 * MB)
    before = spill_helpers.memory(c)
    assert before["spill_index_bytes"] > before["spill_threshold_bytes"], before
    got_crc, seen = spill_helpers.drain([c], n, QUEUES)
    assert seen == set(ids) and got_crc == crc
    after = spill_helpers.memory(c)
    rewritten = after["spill_jobs_written"] - before["spill_jobs_written"]
    reread = after["spill_jobs_read"] - before["spill_jobs_read"] - before["spilled_jobs"]
    assert rewritten <= n // 100 and reread <= n // 100, (before, after)


def test_a_partly_drained_index_shrinks_and_keeps_every_job_through_a_rewrite(start_server):
    """Four fifths of a spilled backlog drained: the index repacks its records into the
    slots left (its memory falls with the jobs, not only once empty), and the rest still
    answer: an AOF rewrite walks them by slot after the repack, and a restart from that
    file drains every body. DEBUG FLUSHALL then forgets every spilled job."""
    srv = start_server(workers=1, extra_args=["--maxmemory", "40mb"])
    c = spill_helpers.client(srv)
    n = 200_000
    ids, crc, _ = spill_helpers.fill([c], n, QUEUES, maxmemory=40 * MB)
    before = spill_helpers.memory(c)
    assert before["spilled_jobs"] > n // 2, before
    crc1, seen1 = spill_helpers.drain([c], n * 4 // 5, QUEUES)
    wait_until(lambda: spill_helpers.memory(c)["spill_index_bytes"]
               < before["spill_index_bytes"] // 2, timeout=30)
    assert c.execute_command("CONFIG", "SET", "appendonly", "yes")
    wait_until(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0
               and c.info("persistence")["aof_enabled"] == 1, timeout=60)
    srv.stop()
    aof_helpers.restart(srv, extra_args=srv.extra_args + ["--appendonly", "yes",
                                                          "--aof-enqueue-jobs-once", "yes"])
    c = spill_helpers.client(srv)
    wait_until(lambda: c.info("persistence")["loading"] == 0, timeout=60)
    rest = n - len(seen1)
    assert sum(c.execute_command("QLEN", q) for q in QUEUES) == rest
    crc2, seen2 = spill_helpers.drain([c], rest, QUEUES)
    assert seen1 | seen2 == set(ids) and crc1 ^ crc2 == crc
    spill_helpers.fill([c], 60_000, QUEUES, salt=b"flushed-")
    assert spill_helpers.memory(c)["spilled_jobs"] > 0
    assert c.execute_command("DEBUG", "FLUSHALL")
    info = spill_helpers.memory(c)
    assert info["spilled_jobs"] == 0 and info["spill_index_bytes"] < 1 * MB, info
    assert sum(c.execute_command("QLEN", q) for q in QUEUES) == 0


def test_a_mostly_dead_log_is_compacted_as_spilling_goes_on_and_loses_nothing(start_server):
    """Four queues spilled together, three drained: most of every segment is dead.
    Compaction copies the live records, past the batches' padding, never more bytes than
    spilling wrote, and every body comes back intact."""
    srv = start_server(workers=1, extra_args=["--maxmemory", "64mb"])
    c = spill_helpers.client(srv)
    big = 16 * 1024
    queues = ["cq0", "cq1", "cq2", "cq3"]

    def body(i):
        return (b"%08d" % i) * (big // 8)

    pipe = c.pipeline(transaction=False)
    # 320 MB: five segments of 64 MB. Whatever part of cq0 its head keeps in RAM, the log
    # is then more than twice its live bytes plus a segment, the point compaction starts
    for i in range(20_000):
        pipe.execute_command("ADDJOB", queues[i % 4], body(i), 0)
        if i % 200 == 199:
            pipe.execute()
    spill_helpers.drain([c], 15_000, queues[1:])
    for i in range(20_000, 24_000):          # 64 MB more, spilled again: compaction may copy as much
        pipe.execute_command("ADDJOB", "cq0", body(i), 0)
        if i % 200 == 199:
            pipe.execute()
    wait_until(lambda: spill_helpers.memory(c)["spill_compactions"] > 0, timeout=30,
               message="the log was not compacted: %r" % (spill_helpers.memory(c),))
    info = spill_helpers.memory(c)
    assert 0 < info["spill_compacted_bytes"] <= info["spill_bytes_written"], info
    want = {i for i in range(0, 20_000, 4)} | set(range(20_000, 24_000))
    while want:
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 500, "FROM", "cq0")
        assert jobs, "%d jobs of cq0 missing" % len(want)
        for _q, _jid, b in jobs:
            i = int(b[:8])
            assert b == body(i) and i in want
            want.discard(i)
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
    assert spill_helpers.memory(c)["spill_errors"] == 0


@pytest.mark.parametrize("n, maxmemory_mb", [
    (150_000, 32),                                            # the suite's form
    pytest.param(300_000, 64, marks=pytest.mark.long),
])
def test_three_times_maxmemory_in_a_3_node_cluster_with_replicate_2(start_cluster, n, maxmemory_mb):
    # with their copies, 3.1 x maxmemory of bodies per node
    cl = start_cluster(3, workers=2, extra_args=["--maxmemory", "%dmb" % maxmemory_mb])
    clients = [spill_helpers.client(node) for node in cl.nodes]
    ids, crc = spill_helpers.fill_concurrently(cl.nodes, n, QUEUES, "REPLICATE", 2, "RETRY", 3600)
    assert len(set(ids)) == n
    for c in clients:
        info = spill_helpers.memory(c)
        assert info["spilled_jobs"] > 0 and info["used_memory"] < maxmemory_mb * MB, info
    # every node's HELLO ranks every spilling node at priority 2 (told in the bus headers)
    wait_until(lambda: all(sorted(e[3] for e in c.execute_command("HELLO")[2:]) == [b"2"] * 3
                           for c in clients), timeout=10)
    got_crc, seen = spill_helpers.drain(clients, n, QUEUES)
    assert seen == set(ids) and got_crc == crc
    for c in clients:
        assert spill_helpers.memory(c)["used_memory"] < maxmemory_mb * MB
    # the copies are acknowledged through SETACK, loaded back and collected
    wait_until(lambda: all(spill_helpers.memory(c)["spilled_jobs"] == 0 for c in clients), timeout=60,
               message="copies still spilled after the drain")


def test_spilled_jobs_answer_every_command_as_others(start_server):
    srv = start_server(workers=1, extra_args=["--maxmemory", "32mb", "--spill-keep", "64"])
    c = spill_helpers.client(srv)
    ids, crc, _ = spill_helpers.fill([c], 40_000, ["one"])
    assert spill_helpers.memory(c)["spilled_jobs"] > 20_000
    last = ids[-1]
    # QLEN and QPEEK count and read what is on disk; QPEEK from the tail reads it back
    assert c.execute_command("QLEN", "one") == 40_000
    tail = c.execute_command("QPEEK", "one", -2)
    assert [j[1] for j in tail] == [ids[-1], ids[-2]]
    assert tail[0][2] == spill_helpers.body_of(39_999, b"spill-test-")
    assert [j[1] for j in c.execute_command("QPEEK", "one", 3)] == ids[:3]
    # JSCAN sees every job, in memory or not
    assert jscan_all(c, 5000) == set(ids)
    # SHOW, DELJOB, ACKJOB of spilled jobs by ID
    shown = dict(zip(*[iter(c.execute_command("SHOW", last))] * 2))
    assert shown[b"state"] == b"queued" and shown[b"body"] == spill_helpers.body_of(39_999, b"spill-test-")
    assert c.execute_command("DELJOB", ids[-3]) == 1
    assert c.execute_command("ACKJOB", ids[-4]) == 1
    assert c.execute_command("QLEN", "one") == 40_000 - 2
    # a rewrite with spilled jobs, then a restart with another number of workers
    assert c.execute_command("CONFIG", "SET", "appendonly", "yes")
    wait_until(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0
               and c.info("persistence")["aof_enabled"] == 1, timeout=30)
    srv.stop()
    aof_helpers.restart(srv, workers=2, extra_args=srv.extra_args + ["--appendonly", "yes",
                                                          "--aof-enqueue-jobs-once", "yes"])
    c = spill_helpers.client(srv)
    wait_until(lambda: c.info("persistence")["loading"] == 0, timeout=30)
    assert c.execute_command("QLEN", "one") == 40_000 - 2
    rest = [jid for jid in ids if jid not in (ids[-3], ids[-4])]
    _, seen = spill_helpers.drain([c], len(rest), ["one"])
    assert seen == set(rest)


def jscan_all(c, count, between=None):
    cursor, found = 0, set()
    while True:
        cursor, part = c.execute_command("JSCAN", cursor, "COUNT", count)
        found.update(part)
        if int(cursor) == 0:
            return found
        if between is not None:
            between()


def test_jscan_returns_jobs_moving_between_disk_and_ram_during_the_scan(start_server):
    srv = start_server(workers=1, extra_args=["--maxmemory", "16mb", "--spill-keep", "64"])
    c = spill_helpers.client(srv)
    ids, _, _ = spill_helpers.fill([c], 40_000, ["one"])
    assert spill_helpers.memory(c)["spilled_jobs"] > 20_000
    taken = set()

    def consume():
        # acked jobs leave; the head is refilled from disk, so spilled jobs come back to RAM
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 1000, "FROM", "one")
        taken.update(j[1] for j in jobs)
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
    found = jscan_all(c, 2000, consume)
    assert len(taken) > 10_000
    wait_until(lambda: spill_helpers.memory(c)["spill_jobs_read"] > 3000, timeout=5)
    assert found >= set(ids) - taken        # every job present for the whole scan


def test_kill_9_with_appendfsync_always_loses_no_acknowledged_job(start_server):
    args = ["--maxmemory", "16mb", "--appendonly", "yes", "--appendfsync", "always"]
    srv = start_server(workers=2, extra_args=args)
    c = spill_helpers.client(srv)
    acknowledged = {}           # job ID -> its body's checksum, once ADDJOB answered
    stop = threading.Event()

    def produce():
        p = c.pipeline(transaction=False)
        i = 0
        try:
            while not stop.is_set():
                crcs = []
                for _ in range(200):
                    b = spill_helpers.body_of(i, b"kill-")
                    crcs.append(zlib.crc32(b))
                    p.execute_command("ADDJOB", QUEUES[i % 4], b, 0)
                    i += 1
                for jid, crc in zip(p.execute(), crcs):
                    acknowledged[jid] = crc
        except redis.ConnectionError:
            pass                # killed in the middle: that batch was not acknowledged

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    wait_until(lambda: len(acknowledged) >= 30_000 and spill_helpers.memory(spill_helpers.client(srv))["spilled_jobs"] > 10_000,
               timeout=60, message="the producer did not get far enough")
    aof_helpers.kill_node(srv)
    stop.set()
    t.join(10)
    aof_helpers.restart(srv, extra_args=srv.extra_args + ["--aof-enqueue-jobs-once", "yes"])
    c = spill_helpers.client(srv)
    wait_until(lambda: c.info("persistence")["loading"] == 0, timeout=60)
    seen = {}
    while True:
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 500, "FROM", *QUEUES)
        if not jobs:
            break
        for _q, jid, body in jobs:
            seen[jid] = zlib.crc32(body)
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
    missing = [jid for jid in acknowledged if seen.get(jid) != acknowledged[jid]]
    assert not missing, "%d acknowledged jobs lost or changed" % len(missing)


def hello_priority(c):
    """This node's priority in its own HELLO (1: fine, 2: spilling, 50: its disk refuses)."""
    reply = c.execute_command("HELLO")
    return reply[2][3]


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB tmpfs as the node's dir (root only), unmounted at the end."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_spill_disk_refuses_adds_clearly_loses_nothing_and_recovers(start_server, small_disk):
    ballast = small_disk / "ballast"           # other files on the same disk
    ballast.write_bytes(b"\0" * (12 * MB))
    srv = start_server(workers=1, extra_args=["--maxmemory", "16mb", "--dir", str(small_disk),
                                              "--spill-keep", "64"])
    c = spill_helpers.client(srv)
    accepted = []
    error = None
    i = 0
    while error is None and i < 200_000:
        try:
            accepted.append((c.execute_command("ADDJOB", "full", spill_helpers.body_of(i, b"full-"), 0), i))
        except Exception as e:  # the refusal, once the disk is full and RAM at the threshold
            error = str(e)
        i += 1
    assert error is not None and "spill disk refuses writes" in error, error
    assert "No space left on device" in error
    wait_until(lambda: "Spill disk error" in srv.log_text(), timeout=5)
    # the write that found the disk full was in the background: its jobs came back to RAM
    assert "Spill write failed (No space left on device): its" in srv.log_text()
    info = spill_helpers.memory(c)
    assert info["spill_disk_ok"] == 0 and info["spill_errors"] > 0
    wait_until(lambda: hello_priority(c) == b"50", timeout=5)     # smart clients go elsewhere
    # the operator frees space: the node accepts again
    ballast.unlink()

    def writes_again():
        try:
            accepted.append((c.execute_command("ADDJOB", "full", spill_helpers.body_of(i, b"full-"), 0), i))
            return True
        except Exception:
            return False
    wait_until(writes_again, timeout=20, message="ADDJOB still refused after space freed")
    wait_until(lambda: spill_helpers.memory(c)["spill_disk_ok"] == 1, timeout=20)
    wait_until(lambda: hello_priority(c) == b"2", timeout=5)      # still spilling
    # nothing accepted was lost: every job comes back, body intact
    want = {jid: zlib.crc32(spill_helpers.body_of(k, b"full-")) for jid, k in accepted}
    seen = {}
    while len(seen) < len(want):
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 500, "FROM", "full")
        assert jobs, "drained %d of %d" % (len(seen), len(want))
        for _q, jid, body in jobs:
            seen[jid] = zlib.crc32(body)
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
    assert seen == want


@pytest.mark.parametrize("args, reason", [
    (["--spill-threshold", "5"], "spill-threshold must be between 10 and 90"),
    (["--spill", "maybe"], "argument must be 'yes' or 'no'"),
    (["--spill-keep", "1"], "spill-keep must be 64 or greater"),
])
def test_bad_spill_configuration_fails_fast_with_one_line(start_server, args, reason):
    srv = start_server(extra_args=args, wait=False)
    assert srv.proc.wait(20) != 0
    assert reason in srv.log_text()


@pytest.mark.parametrize("workers", [1, 2])
def test_held_jobs_of_a_group_spill_and_come_back_in_order(start_server, workers):
    """docs/job-groups.md: four groups of 1,250 jobs of 16 KB (80 MB) on maxmemory 32mb. The
    jobs held behind each head spill; each group is then delivered whole, in order, one at
    a time, every body intact."""
    srv = start_server(workers=workers, extra_args=["--maxmemory", "32mb"])
    c = spill_helpers.client(srv)
    big = 16 * 1024
    keys = [b"k%d" % g for g in range(4)]

    def body(g, i):
        return (b"%02d%06d" % (g, i)) * (big // 8)

    pipe = c.pipeline(transaction=False)
    for i in range(1250):
        for g, key in enumerate(keys):
            pipe.execute_command("ADDJOB", "gspill", body(g, i), 0, "GROUP", key)
        if i % 50 == 49:
            assert all(isinstance(x, bytes) for x in pipe.execute())
    assert spill_helpers.memory(c)["spilled_jobs"] > 2000
    nxt = [0] * 4
    while nxt != [1250] * 4:
        jobs = c.execute_command("GETJOB", "TIMEOUT", 5000, "COUNT", 10, "FROM", "gspill")
        assert jobs, "stuck at %r" % nxt
        assert len({b[:2] for _q, _jid, b in jobs}) == len(jobs)    # one per group at most
        for _q, jid, b in jobs:
            g, i = int(b[:2]), int(b[2:8])
            assert i == nxt[g] and b == body(g, i), (g, i, nxt[g])
            nxt[g] += 1
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
    assert spill_helpers.memory(c)["spill_errors"] == 0
