"""used_memory counts the node's data and clients, not the interpreters (SPEC 9,
docs/memory.md): a fresh node is tiny, jobs add about their size, acks give it back, and a
`maxmemory` sized for jobs behaves as upstream (75%: external replication; 95%: -OOM)."""
import time

import pytest

import conftest as _c
from support.info import parse_info
from support.jobs import show
from support.resp_client import RawConn
from support.waits import wait_until

FRESH_NODE_MAX = 512 * 1024      # well under a 3 MB maxmemory


def memory_info(r):
    return parse_info(r.execute("INFO", "memory"))


def used_memory(r):
    return int(memory_info(r)["used_memory"])


@pytest.mark.server
def test_fresh_node_is_small_and_accepts_jobs_under_3mb(start_server):
    srv = start_server(workers=2)
    r = srv.raw()
    assert r.call("CONFIG", "SET", "maxmemory", "3mb") == b"+OK\r\n"
    info = memory_info(r)
    used, rss = int(info["used_memory"]), int(info["used_memory_rss"])
    assert 0 < used < FRESH_NODE_MAX, info
    assert rss > 10 * used                          # the interpreters are in the RSS only
    assert int(info["used_memory_peak"]) >= used
    assert info["used_memory_human"] == "%.2fK" % (used / 1024)
    workers = [dict(kv.split("=") for kv in line.split(","))
               for line in parse_info(r.execute("INFO", "workers")).values()]
    assert len(workers) == 2
    for w in workers:
        assert int(w["rss"]) > 1024 * 1024 and 0 < int(w["used_memory"]) < used
    # several memory polls (every ~100 ms) see a 3 MB limit: ADDJOB is accepted throughout
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        reply = r.call("ADDJOB", "small", "job", 0)
        assert reply.startswith(b"+D-"), reply
        time.sleep(0.05)
    # a limit below the current use is accepted, with upstream's warning in the log
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    wait_until(lambda: "smaller than the current memory usage" in srv.log_text(), timeout=5)
    wait_until(lambda: r.call("ADDJOB", "small", "job", 0).startswith(b"-OOM "), timeout=5)


@pytest.mark.server
def test_used_memory_follows_job_bytes(start_server):
    srv = start_server(workers=2)
    r = srv.raw()
    queues = _c.queue_names("grow", 4)
    for q in queues:                                  # queues exist before the baseline
        r.execute("GETJOB", "NOHANG", "FROM", q)
    before = used_memory(r)
    n, body = 2000, b"b" * 1000
    ids = [_c.addjob(r, queues[i % 4], body) for i in range(n)]
    grown = used_memory(r) - before
    assert n * len(body) < grown < n * (len(body) + 700), grown / n
    assert int(memory_info(r)["used_memory_peak"]) >= before + grown
    for i in range(0, n, 500):
        assert r.execute("ACKJOB", *ids[i:i + 500]) == 500
    wait_until(lambda: used_memory(r) < before + 4096, timeout=5,
               message="used_memory did not fall after the acks")


def _held_by(cluster, jid):
    return [i for i in range(len(cluster)) if show(cluster[i].raw(), jid) is not None]


@pytest.mark.cluster
@pytest.mark.slow
def test_maxmemory_3mb_turns_to_external_replication_not_oom(start_cluster):
    c = start_cluster(3)
    r = c[0].raw()
    # the levels as upstream, without spilling (which would keep the node under 75%)
    assert r.call("CONFIG", "SET", "spill", "no") == b"+OK\r\n"
    assert r.call("CONFIG", "SET", "maxmemory", "3mb") == b"+OK\r\n"
    body = b"p" * 200
    added = 0
    for added in range(1, 50001):
        repl = 1 + added % 2                        # REPLICATE 1 and 2, alternately
        reply = r.call("ADDJOB", "mq", body, 5000, "REPLICATE", repl)
        assert reply.startswith(b"+D-"), (added, reply)     # never -OOM
        if show(r, reply[1:-2]) is None:
            break
    else:
        pytest.fail("jobs were still kept locally after 50000")
    assert 1000 < added < 50000, added
    used = used_memory(r)
    assert 3 * 2**20 * 0.75 < used < 3 * 2**20 * 0.95, used
    # above 75%: each job is held by REPLICATE other nodes and not here
    for repl in (1, 2):
        jid = _c.addjob(r, "mq", body, 5000, "REPLICATE", repl)
        held = _held_by(c, jid)
        assert 0 not in held and len(held) == repl, (repl, held)
    # a sane limit again: local copies again
    assert r.call("CONFIG", "SET", "maxmemory", "1gb") == b"+OK\r\n"

    def local_copy():
        jid = _c.addjob(r, "mq", body, 5000, "REPLICATE", 1)
        return show(r, jid) is not None
    wait_until(local_copy, timeout=5, message="no local copies after CONFIG SET maxmemory 1gb")
    jid = _c.addjob(r, "mq", body, 5000, "REPLICATE", 2)
    held = _held_by(c, jid)
    assert 0 in held and len(held) == 2, held
