"""Queue eviction (SPEC 8.2) and memory limits (SPEC 9) against real servers."""

import time

import pytest

from support.admin import qstat
from support.info import parse_info
from support.jobs import addjob, show
from support.resp_client import encode_command
from support.slots import queues_on_distinct_workers
from support.waits import wait_until

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


# ---------------------------------------------------------------------------
# Queue eviction (SPEC 8.2) and memory limits (SPEC 9)
# ---------------------------------------------------------------------------


def _wait_oom(r, nworkers=1):
    """Until every worker refuses ADDJOB: each applies the level the front-end's poll
    pushes (every ~100 ms) on its own, so one worker refusing does not mean all do."""
    def probe(queue):
        reply = r.call("ADDJOB", queue, "x", 0)
        if reply.startswith(b"+"):
            r.execute("DELJOB", reply[1:-2].decode())
            return False
        assert reply == OOM, reply
        return True
    for queue in queues_on_distinct_workers("oom-probe", nworkers=nworkers):
        wait_until(lambda: probe(queue), timeout=5, message="memory level 2 never reached")


def test_maxmemory_1_refuses_m_commands_only(start_server):
    srv = start_server(workers=3)
    r = srv.raw()
    jids = [addjob(r, "mq-%d" % i, "body%d" % i) for i in range(6)]
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    _wait_oom(r, nworkers=3)
    assert r.call("ADDJOB", "mq-0", "x", 0) == OOM
    assert r.call("ADDJOB", "mq-0", "x", 0, "BOGUS") == OOM      # the OOM check comes first
    # GETJOB / SHOW / QLEN / ACKJOB / DEQUEUE / WORKING still work
    got = r.execute("GETJOB", "COUNT", 2, "FROM", "mq-0", "mq-1")
    assert len(got) == 2
    a, b = got[0][1], got[1][1]
    assert show(r, a)[b"state"] == b"active"
    assert r.call("NACK", a) == OOM
    assert r.call("ENQUEUE", a) == OOM
    assert r.call("ENQUEUE", a, b) == OOM
    assert r.call("ENQUEUE") == OOM
    assert show(r, a)[b"state"] == b"active"                     # nothing was applied
    assert r.execute("WORKING", a) > 0
    assert r.execute("DEQUEUE", jids[3]) == 1
    assert r.execute("ACKJOB", a, b) == 2
    assert r.execute("QLEN", "mq-2") == 1
    assert r.call("PAUSE", "mq-2", "none") == b"+none\r\n"
    assert r.execute("QSCAN", "BUSYLOOP")[0] == b"0"
    assert len(r.execute("JSCAN", "BUSYLOOP")[1]) == 4
    # INFO and CONFIG keep working
    info = parse_info(r.execute("INFO"))
    assert int(info["used_memory"]) > 1
    assert r.execute("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"1"]
    assert r.execute("CONFIG", "GET", "maxmemory-policy") == [b"maxmemory-policy", b"acks"]
    assert r.call("PING") == b"+PONG\r\n"
    # back to a sane limit: accepted again
    assert r.call("CONFIG", "SET", "maxmemory", "1gb") == b"+OK\r\n"
    wait_until(lambda: r.call("ADDJOB", "mq-0", "y", 0).startswith(b"+D-"), timeout=5)
    assert r.call("NACK", jids[3]) == b":1\r\n"


def test_maxmemory_1_from_the_command_line(start_server):
    srv = start_server(workers=1, extra_args=("--maxmemory", "1"))
    r = srv.raw()
    _wait_oom(r)
    assert r.execute("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"1"]
    assert "used_memory" in parse_info(r.execute("INFO", "memory"))
    assert r.call("GETJOB", "NOHANG", "FROM", "x") == b"*-1\r\n"


def test_oom_evicts_delivered_at_most_once_jobs(start_server):
    srv = start_server(workers=1)
    r = srv.raw()
    once = [addjob(r, "amo", "b", 0, "RETRY", 0, "REPLICATE", 1) for _ in range(20)]
    kept = [addjob(r, "alo", "b") for _ in range(5)]
    delivered = [j[1] for j in r.execute("GETJOB", "COUNT", 10, "FROM", "amo")]
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    _wait_oom(r)
    # each refused attempt samples random jobs and deletes the delivered at-most-once ones
    # (and nothing else) until > 10 samples in a row were not evictable: a few attempts
    # get them all
    def all_evicted():
        assert r.call("ADDJOB", "amo", "x", 0) == OOM
        return all(show(r, jid) is None for jid in delivered)
    wait_until(all_evicted, timeout=5)
    assert r.execute("QLEN", "amo") == 10 and r.execute("QLEN", "alo") == 5
    for jid in kept + sorted(set(once) - set(delivered)):
        assert show(r, jid)[b"state"] == b"queued"


def test_noeviction_policy_fails_without_evicting(start_server):
    srv = start_server(workers=1, extra_args=("--maxmemory-policy", "noeviction"))
    r = srv.raw()
    addjob(r, "ne", "b", 0, "RETRY", 0, "REPLICATE", 1)
    jid = r.execute("GETJOB", "FROM", "ne")[0][1]
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    _wait_oom(r)
    assert show(r, jid)[b"state"] == b"active"          # not evicted
    assert r.call("CONFIG", "SET", "maxmemory-policy", "acks") == b"+OK\r\n"
    # with `acks` the next attempt evicts it (and still fails: 1 byte is never enough)
    wait_until(lambda: r.call("ADDJOB", "ne", "x", 0) == OOM and show(r, jid) is None,
               timeout=5)


def _set_room(r, room):
    """maxmemory such that 95% of it is `room` bytes above the current use; no spilling,
    which would keep the node under it (tests/test_spill.py covers that)."""
    assert r.call("CONFIG", "SET", "spill", "no") == b"+OK\r\n"
    used = int(parse_info(r.execute("INFO", "memory"))["used_memory"])
    maxmemory = (used + room) * 100 // 95 + 100
    assert r.call("CONFIG", "SET", "maxmemory", str(maxmemory)) == b"+OK\r\n"
    time.sleep(0.3)        # two memory polls


def _fill_until_oom(r, queue, body, *opts, limit=2000):
    ids = []
    for _ in range(limit):
        reply = r.call("ADDJOB", queue, body, 0, *opts)
        if reply == OOM:
            return ids
        assert reply.startswith(b"+D-"), reply
        ids.append(reply[1:-2])
    raise AssertionError("never reached the memory limit")


@pytest.mark.parametrize("workers", [1, 3])
def test_acking_jobs_makes_room_again(start_server, workers):
    srv = start_server(workers=workers)
    r = srv.raw()
    _set_room(r, 12 * 1024 * 1024)
    body = b"x" * 65536
    ids = _fill_until_oom(r, "room", body)
    assert 40 <= len(ids) <= 400, len(ids)    # ~12 MB of 64 KB jobs (level 1: still accepted)
    assert r.call("ADDJOB", "room", body, 0) == OOM
    # consumers still work at the limit
    got = r.execute("GETJOB", "COUNT", 1, "FROM", "room")
    assert r.call("NACK", got[0][1]) == OOM
    assert r.call("ENQUEUE", got[0][1]) == OOM
    jobs = r.execute("GETJOB", "NOHANG", "COUNT", 10000, "FROM", "room")
    acked = [j[1] for j in jobs] + [got[0][1]]
    assert r.execute("ACKJOB", *acked) == len(ids)
    # deleted jobs are room at once, even though the RSS does not shrink
    wait_until(lambda: r.call("ADDJOB", "room", body, 0).startswith(b"+D-"), timeout=5)
    more = _fill_until_oom(r, "room", body)
    assert len(more) >= len(ids) // 2


def test_oom_eviction_of_delivered_jobs_makes_room(start_server):
    srv = start_server(workers=1)
    r = srv.raw()
    _set_room(r, 8 * 1024 * 1024)
    body = b"y" * 65536
    ids = _fill_until_oom(r, "amo-room", body, "RETRY", 0, "REPLICATE", 1)
    assert len(ids) >= 20
    # deliver them all: at-most-once jobs that were delivered can be evicted
    jobs = r.execute("GETJOB", "NOHANG", "COUNT", 10000, "FROM", "amo-room")
    assert len(jobs) == len(ids)
    # the 8 MB GETJOB reply itself was memory in use until written: let a poll see it gone
    time.sleep(0.3)
    # new jobs take the place of evicted ones. Sampling gives up after 11 non-evictable
    # jobs in a row, which gets likely as new (queued) jobs replace delivered ones
    more = _fill_until_oom(r, "amo-room", body, "RETRY", 0, "REPLICATE", 1)
    assert len(more) >= min(10, len(ids) // 2), (len(more), len(ids))
    evicted = sum(1 for jid in ids if show(r, jid) is None)
    assert evicted >= len(more) // 2


def test_queue_eviction_follows_memory_level(start_server):
    srv = start_server(workers=3, extra_args=("--maxmemory", "1"))
    r = srv.raw()
    waiter = srv.raw()
    r.execute("GETJOB", "NOHANG", "FROM", "idle-q")            # created, empty
    assert r.call("PAUSE", "paused-in", "in") == b"+in\r\n"
    assert r.call("PAUSE", "paused-out", "out") == b"+out\r\n"
    waiter.send(encode_command("GETJOB", "TIMEOUT", 20000, "FROM", "blocked-q"))
    wait_until(lambda: qstat(r, "blocked-q") is not None)
    # level 2: empty queues idle for 2 s go (instead of 300 s)
    wait_until(lambda: qstat(r, "idle-q") is None, timeout=8)
    time.sleep(1.0)
    assert qstat(r, "paused-in")[b"pause"] == b"in"
    assert qstat(r, "paused-out")[b"pause"] == b"out"
    assert qstat(r, "blocked-q")[b"blocked"] == 1
    assert r.call("PAUSE", "paused-in", "none") == b"+none\r\n"
    wait_until(lambda: qstat(r, "paused-in") is None, timeout=8)
    assert qstat(r, "paused-out") is not None


def test_queues_not_evicted_below_the_limit(server):
    r = server.raw()
    r.execute("GETJOB", "NOHANG", "FROM", "stays")
    time.sleep(3.0)
    assert qstat(r, "stays") is not None


