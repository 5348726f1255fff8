"""TTL expiry on time (issue 10, item 6; docs/timers.md).

A job must leave its queue by its TTL plus the timer resolution, also while other commands
keep its worker busy. In-process tests drive a worker's shard with a clock they move; the
server test measures a real node under load.
"""
import threading
import time

import pytest

from support.resp_client import RawConn, encode_command
from disque.workers.shard import Shard
from disque.contracts.getjob_options import GetjobRequest

MS = 1_000_000_000_000          # an arbitrary wall-clock origin for the in-process tests


def shard_at(now_ms):
    s = Shard(0, 1, b"a" * 40)
    set_clock(s, now_ms)
    return s


def set_clock(s, now_ms):
    s.now_ms = now_ms
    s.now_s = now_ms // 1000


def advance_to(s, now_ms):
    set_clock(s, now_ms)
    s.run_timers()


def qlen(s, queue):
    q = s.queues.get(queue)
    return 0 if q is None else len(q.jobs)


@pytest.mark.unit
@pytest.mark.parametrize("ttl", [1, 2, 5])
@pytest.mark.parametrize("extra", [[], [b"RETRY", b"0"], [b"RETRY", b"3"]],
                         ids=["default-retry", "retry-0", "retry-3"])
def test_queued_job_expires_at_its_ttl_to_the_millisecond(ttl, extra):
    # every phase against the second boundary: the old rule (etime in whole seconds, woken
    # with the retry timers or 1 s after etime) missed by up to a second either way
    for phase in range(0, 1000, 37):
        start = MS + phase
        s = shard_at(start)
        reply = s.execute(1, [b"addjob", b"q", b"body", b"0", b"TTL", str(ttl).encode()]
                          + extra)
        assert reply.startswith(b"+D-"), reply
        # walk the clock in 10 ms steps (the worker's tick) up to just before the TTL
        for t in range(start, start + ttl * 1000, 10):
            advance_to(s, t)
            assert qlen(s, b"q") == 1, f"expired early at +{t - start} ms (phase {phase})"
        advance_to(s, start + ttl * 1000 - 1)
        assert qlen(s, b"q") == 1, f"expired 1 ms early (phase {phase})"
        advance_to(s, start + ttl * 1000)
        assert qlen(s, b"q") == 0, f"still queued at its TTL (phase {phase})"
        assert not s.jobs and s.n_expired == 1


@pytest.mark.unit
def test_delivered_and_delayed_jobs_expire_at_their_ttl_too():
    start = MS + 420
    s = shard_at(start)
    active = s.execute(1, [b"addjob", b"a", b"body", b"0", b"TTL", b"2"])[1:-2]
    delayed = s.execute(2, [b"addjob", b"d", b"body", b"0", b"TTL", b"2", b"DELAY", b"1"])[1:-2]
    reply, ids = s.getjob(GetjobRequest(1, nohang=True, queues=[b"a"], reqid=3, client=7))
    assert ids == [active]
    advance_to(s, start + 1500)
    assert qlen(s, b"d") == 1                      # the delay ended: queued
    assert active in s.jobs and delayed in s.jobs
    advance_to(s, start + 1999)
    assert active in s.jobs and delayed in s.jobs
    advance_to(s, start + 2000)
    assert not s.jobs and qlen(s, b"d") == 0


@pytest.mark.unit
def test_many_jobs_due_together_all_expire_in_one_pass():
    start = MS + 3
    s = shard_at(start)
    for i in range(25000):                          # more than one scheduler batch
        s.execute(i, [b"addjob", b"q", b"%d" % i, b"0", b"TTL", b"1", b"RETRY", b"0"])
    assert qlen(s, b"q") == 25000
    set_clock(s, start + 1000)
    while s.timers_due():
        s.run_timers()
    assert qlen(s, b"q") == 0


def hammer(port, stop, done):
    """Keep the node's only worker busy: pipelined ADDJOB, GETJOB and FASTACK."""
    with RawConn(port, timeout=30) as r:
        while not stop.is_set():
            done.append(50)
            r.send(b"".join(encode_command("ADDJOB", "load", "x" * 100, 0) for _ in range(50))
                   + encode_command("GETJOB", "NOHANG", "COUNT", 50, "FROM", "load"))
            for _ in range(50):
                r.read_parsed()
            jobs = r.read_parsed()
            if isinstance(jobs, list) and jobs:
                r.execute("FASTACK", *[j[1] for j in jobs])


@pytest.mark.server
def test_ttl_expiry_is_on_time_while_the_worker_is_busy(start_server):
    # one worker: the load and the expiring jobs share it
    srv = start_server(workers=1)
    stop = threading.Event()
    load = []
    loaders = [threading.Thread(target=hammer, args=(srv.port, stop, load), daemon=True)
               for _ in range(2)]
    for th in loaders:
        th.start()
    late = []
    samples = 0
    try:
        with RawConn(srv.port, timeout=10) as r:
            pending = {}                            # queue -> (time the ADDJOB reply came)
            deadline = time.time() + 6.0
            i = 0
            while time.time() < deadline or pending:
                if time.time() < deadline:
                    q = "ttl%d" % i
                    i += 1
                    assert r.execute("ADDJOB", q, "body", 0, "TTL", 1).startswith(b"D-")
                    pending[q] = time.time()
                now = time.time()
                # a QLEN sent at or after the TTL (+ the 10 ms timer resolution) must be 0
                for q in [q for q, t in pending.items() if now >= t + 1.010]:
                    n = r.execute("QLEN", q)
                    samples += 1
                    if n != 0:
                        late.append((q, round(time.time() - pending[q], 3)))
                    del pending[q]
                time.sleep(0.047)
    finally:
        stop.set()
        for th in loaders:
            th.join(10)
    assert samples >= 60, samples
    assert sum(load) >= 5000, "the background load did not run"
    assert not late, f"{len(late)} of {samples} jobs still queued after TTL 1: {late[:10]}"
