"""A node whose wall clock steps (an NTP step, a VM resumed) keeps its job timers: a real
node with 2 workers, its CLOCK_REALTIME moved by the test through faults/wallclock.c (an
LD_PRELOAD shim reading an offset file the test rewrites; CLOCK_MONOTONIC untouched).
docs/faults-clocks.md, "Bugs found and fixed".

Before the fix the workers read CLOCK_REALTIME for every timer: a step forward expired
jobs before their TTL and queued delayed or delivered jobs at once; a step back held
every timer (DELAY, RETRY, TTL, blocking GETJOB TIMEOUT) back by the step."""
import os
import shutil
import sys
import time

import pytest

from support.resp_client import NULL_ARRAY
from support.server import DisqueServer, stop_servers
from support.slots import queues_on_distinct_workers
from support.waits import wait_until

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from faults.wallclock import Clock  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="the clock shim needs gcc")

STEP_S = 300
QUEUES = queues_on_distinct_workers("q", per_worker=2, nworkers=2)


def on_both_workers(kind):
    """Queue names for `kind`, two on each worker (the name picks the worker)."""
    return queues_on_distinct_workers(kind, per_worker=2, nworkers=2)


@pytest.fixture
def node(tmp_path):
    clock = Clock(str(tmp_path / "wallclock"))
    srv = DisqueServer(workers=2, workdir=tmp_path / "srv")
    srv.env = dict(srv.env, **clock.env())
    srv.clock = clock
    try:
        srv.start()
        yield srv
    finally:
        stop_servers([srv])


def wall_s(srv):
    sec, usec = srv.execute("TIME")
    return int(sec) + int(usec) / 1e6


def ctime_s(srv, queue):
    """Creation time of a fresh job on `queue` (its worker's clock), in seconds."""
    jid = srv.execute("ADDJOB", queue, "probe", 0)
    show = srv.execute("SHOW", jid)
    fields = dict(zip(show[::2], show[1::2]))
    srv.execute("DELJOB", jid)
    return int(fields[b"ctime" if b"ctime" in fields else "ctime"]) / 1e9


def qlen(srv, queue):
    return int(srv.execute("QLEN", queue))


def add_timed_jobs(srv, seconds):
    """On both workers: a job with TTL `seconds`, one with DELAY `seconds`, and one with
    RETRY `seconds`, delivered (so its requeue timer runs)."""
    for ttl, delay, retry in zip(*map(on_both_workers, ("ttl", "delay", "retry"))):
        srv.execute("ADDJOB", ttl, "body", 0, "TTL", seconds)
        srv.execute("ADDJOB", delay, "body", 0, "DELAY", seconds, "TTL", 2 * seconds + 60)
        srv.execute("ADDJOB", retry, "body", 0, "RETRY", seconds, "TTL", 2 * seconds + 60)
        assert srv.execute("GETJOB", "NOHANG", "FROM", retry)


def test_the_shim_moves_the_front_end_and_every_worker(node):
    """The front-end's TIME follows the offset file; the workers (other processes, the
    clock read in C) start at the offset the node started with."""
    node.clock.set(STEP_S)
    wait_until(lambda: abs(wall_s(node) - time.time() - STEP_S) < 5, timeout=10,
               message="TIME showing the step")
    node.clock.set(0)
    wait_until(lambda: abs(wall_s(node) - time.time()) < 5, timeout=10, message="TIME back")
    for queue in QUEUES:            # both workers
        assert abs(ctime_s(node, queue) - time.time()) < 5


def test_a_step_forward_cuts_no_ttl_and_ends_no_delay_or_retry(node):
    add_timed_jobs(node, 60)
    node.clock.set(STEP_S)
    # a barrier: a job DELAYed 1 s after the step is queued, so the workers' timers ran
    # past the step
    for q in on_both_workers("mark"):
        node.execute("ADDJOB", q, "body", 0, "DELAY", 1)
    wait_until(lambda: all(qlen(node, q) == 1 for q in on_both_workers("mark")), timeout=15,
               message="the marker jobs queued after their DELAY")
    for ttl, delay, retry in zip(*map(on_both_workers, ("ttl", "delay", "retry"))):
        assert qlen(node, ttl) == 1, "TTL cut short by the step"
        assert qlen(node, delay) == 0, "DELAY ended early by the step"
        assert qlen(node, retry) == 0, "RETRY requeued early by the step"


def test_a_step_back_holds_no_timer_back(node):
    add_timed_jobs(node, 2)
    node.clock.set(-STEP_S)
    # deadlines far below the step: before the fix these waited STEP_S more
    wait_until(lambda: all(qlen(node, q) == 0 for q in on_both_workers("ttl")), timeout=20,
               message="the TTL 2 jobs expired")
    wait_until(lambda: all(qlen(node, q) == 1 for kind in ("delay", "retry")
                           for q in on_both_workers(kind)), timeout=20,
               message="the DELAY 2 jobs queued and the RETRY 2 jobs requeued")
    # a blocking GETJOB's TIMEOUT runs on the same clock (the socket's timeout is the
    # deadline: before the fix the reply came STEP_S later)
    assert node.execute("GETJOB", "TIMEOUT", 500, "FROM", "empty", timeout=30) is NULL_ARRAY
