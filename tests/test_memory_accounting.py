"""used_memory counts the node's data and clients, not the interpreters (SPEC 9,
docs/memory.md): a fresh node is tiny, jobs add about their size, acks give it back. The
levels a `maxmemory` sized for jobs sets are in tests/test_memory_levels.py."""
import time

import pytest

from support.info import parse_info
from support.waits import wait_until
from support.jobs import addjob, queue_names

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
    queues = queue_names("grow", 4)
    for q in queues:                                  # queues exist before the baseline
        r.execute("GETJOB", "NOHANG", "FROM", q)
    before = used_memory(r)
    n, body = 2000, b"b" * 1000
    ids = [addjob(r, queues[i % 4], body) for i in range(n)]
    grown = used_memory(r) - before
    assert n * len(body) < grown < n * (len(body) + 700), grown / n
    assert int(memory_info(r)["used_memory_peak"]) >= before + grown
    for i in range(0, n, 500):
        assert r.execute("ACKJOB", *ids[i:i + 500]) == 500
    wait_until(lambda: used_memory(r) < before + 4096, timeout=5,
               message="used_memory did not fall after the acks")
