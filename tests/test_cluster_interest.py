"""Federation interest ends with the consumers that caused it (issue 10, item 4).

A node whose consumers wait on a queue tells the other nodes (INTEREST, see
docs/federation-interest.md) and they push jobs queued there at once. When the last of
those consumers stops waiting (timeout, disconnect, served from elsewhere) the interest is
cancelled, so a job added afterwards on another node stays where it was added, as with the
original: QLEN 1 there, 0 on the node whose consumers left.
"""
import json
import threading
import time

import pytest

from support.info import parse_info
from support.resp_client import NULL_ARRAY, RawConn
from support.waits import wait_until
from support.resp_client import encode_command
from support.slots import queues_on_distinct_workers

pytestmark = pytest.mark.cluster

# a push takes a few ms; this is long enough to see one, short enough to keep tests quick
MOVE_WINDOW_S = 0.6


def blocked_clients(node):
    return int(parse_info(node.execute("INFO", "clients"))["blocked_clients"])


def interest_messages_in(node):
    """INTEREST messages the node's workers received (INFO workerstats)."""
    total = 0
    for line in node.execute("INFO", "workerstats").decode().splitlines():
        if line.startswith("worker") and ":" in line:
            stats = json.loads(line.split(":", 1)[1])       # schema v2 (docs/stats-schema.md)
            bus_in = stats.get("bi", {}) if stats.get("v", 1) >= 2 else stats["bus"]["in"]
            total += bus_in.get("INTEREST", 0)
    return total


def interest_ended(c, src, before):
    """The asking node's cancel reached `src` (one INTEREST more than `before`). The
    consumer's reply can beat it (client socket against bus): a job added on `src` in
    between may still move, see docs/federation-interest.md."""
    wait_until(lambda: interest_messages_in(c[src]) > before, timeout=5,
               message=f"node {src} was never told the consumers stopped waiting")


def interest_reached(c, src, queue):
    """The asking node's INTEREST reached `src` (which creates the queue to hold it)."""
    wait_until(lambda: c[src].execute("QSTAT", queue) is not NULL_ARRAY, timeout=5,
               message=f"node {src} never heard of the consumers' interest in {queue}")


def assert_job_stays(c, queue, src, dst):
    """Add a job on `src` (REPLICATE 1) and check it is not moved to `dst` for a while."""
    jid = c[src].execute("ADDJOB", queue, "stay", 0, "REPLICATE", 1)
    assert isinstance(jid, bytes), jid
    deadline = time.monotonic() + MOVE_WINDOW_S
    while time.monotonic() < deadline:
        lens = (c[src].execute("QLEN", queue), c[dst].execute("QLEN", queue))
        assert lens == (1, 0), f"job moved to a node nobody waits on: QLEN src,dst={lens}"
        time.sleep(0.02)
    return jid


@pytest.mark.parametrize("spanning", [False, True], ids=["one-queue", "queues-on-two-workers"])
def test_consumer_that_timed_out_leaves_no_interest(start_cluster, spanning):
    c = start_cluster(2)
    if spanning:
        # GETJOB over queues of two workers: the front-end owns the timeout
        queues = queues_on_distinct_workers("to", 1, 2)
    else:
        queues = ["to"]
    with RawConn(c[1].port, timeout=10) as r:
        # under the 1 s refresh: the only INTEREST after `told` is the cancel
        r.send(encode_command("GETJOB", "TIMEOUT", 500, "FROM", *queues))
        for q in queues:
            interest_reached(c, 0, q)
        told = interest_messages_in(c[0])
        assert r.read_parsed(timeout=5) is NULL_ARRAY
    interest_ended(c, 0, told)
    for q in queues:
        assert_job_stays(c, q, 0, 1)


def test_consumer_that_disconnected_leaves_no_interest(start_cluster):
    c = start_cluster(2)
    r = RawConn(c[1].port, timeout=10)
    try:
        r.send(encode_command("GETJOB", "TIMEOUT", 0, "FROM", "dc"))
        interest_reached(c, 0, "dc")
        wait_until(lambda: blocked_clients(c[1]) == 1, timeout=5)
        told = interest_messages_in(c[0])
    finally:
        r.close()
    wait_until(lambda: blocked_clients(c[1]) == 0, timeout=5)
    interest_ended(c, 0, told)
    assert_job_stays(c, "dc", 0, 1)


def test_consumer_served_from_elsewhere_leaves_no_interest(start_cluster):
    c = start_cluster(3)
    result = {}

    def consumer():
        with RawConn(c[1].port, timeout=15) as r:
            result["reply"] = r.execute("GETJOB", "TIMEOUT", 10000, "FROM", "sv")

    th = threading.Thread(target=consumer)
    th.start()
    try:
        interest_reached(c, 0, "sv")
        interest_reached(c, 2, "sv")
        told = interest_messages_in(c[0])
        jid = c[2].execute("ADDJOB", "sv", "from-2", 0, "REPLICATE", 1)
    finally:
        th.join(15)
    assert result["reply"][0][1] == jid              # served by node 2's job
    interest_ended(c, 0, told)
    assert_job_stays(c, "sv", 0, 1)


def test_one_of_two_consumers_leaving_keeps_the_interest_of_the_other(start_cluster):
    c = start_cluster(2)
    result = {}

    def consumer():
        with RawConn(c[1].port, timeout=15) as r:
            result["reply"] = r.execute("GETJOB", "TIMEOUT", 10000, "FROM", "two")
            result["t"] = time.monotonic()

    th = threading.Thread(target=consumer)
    th.start()
    try:
        with RawConn(c[1].port, timeout=10) as r:
            r.send(encode_command("GETJOB", "TIMEOUT", 300, "FROM", "two"))
            wait_until(lambda: blocked_clients(c[1]) == 2, timeout=5)
            interest_reached(c, 0, "two")
            assert r.read_parsed(timeout=5) is NULL_ARRAY
        time.sleep(0.2)
        t0 = time.monotonic()
        jid = c[0].execute("ADDJOB", "two", "x", 0, "REPLICATE", 1)
    finally:
        th.join(15)
    assert result["reply"][0][1] == jid
    assert result["t"] - t0 < 0.5
