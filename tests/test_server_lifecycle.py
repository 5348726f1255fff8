"""Time-driven job lifecycle: RETRY requeue, at-most-once, DELAY, TTL expiry (SPEC 6, 7, 15).

Timing bounds are generous: the scheduler is allowed ~100 ms lateness (SPEC 7.1) and
requeues carry a +-250 ms jitter (rand_err(500)); we add another 0.5 s of slack for
a loaded 2-core machine."""

import time
from support.info import parse_info
from support.jobs import addjob, show
from support.resp_client import NULL_ARRAY, Status, encode_command
from support.waits import wait_until




JITTER = 0.25
SCHED = 0.1
SLACK = 0.5


def first_time(predicate, timeout, interval=0.02):
    """Poll until predicate() is truthy; return time.monotonic() at that moment (or None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    return None


def test_retry_requeues_unacked_job(server):
    r = server.raw()
    t0 = time.monotonic()
    job_id = addjob(r, "rq", b"x", 0, "RETRY", 1)
    assert r.execute("GETJOB", "FROM", "rq")[0][1] == job_id
    assert show(r, job_id)[b"additional-deliveries"] == 0
    t = first_time(lambda: r.execute("QLEN", "rq") == 1, 1 + JITTER + SCHED + SLACK + 1)
    assert t is not None, "job was not requeued after RETRY"
    elapsed = t - t0
    assert 1 - JITTER - 0.1 <= elapsed <= 1 + JITTER + SCHED + SLACK, elapsed
    s = show(r, job_id)
    assert s[b"state"] == b"queued"
    assert s[b"additional-deliveries"] == 1          # SPEC 6.4: every requeue after the first
    reply = r.execute("GETJOB", "WITHCOUNTERS", "FROM", "rq")
    assert reply == [[b"rq", job_id, b"x", b"nacks", 0, b"additional-deliveries", 1]]


def test_retry_requeue_repeats_until_acked(server):
    r = server.raw()
    job_id = addjob(r, "rq2", b"x", 0, "RETRY", 1)
    for expected in (1, 2):
        assert r.execute("GETJOB", "FROM", "rq2")[0][1] == job_id
        reply = r.execute("GETJOB", "WITHCOUNTERS", "TIMEOUT", 3000, "FROM", "rq2", timeout=10)
        assert reply != NULL_ARRAY, "not requeued"
        assert reply[0][1] == job_id and reply[0][6] == expected
        assert r.execute("NACK", job_id) == 1            # back in queue for the next loop round
    assert r.execute("ACKJOB", job_id) == 1
    assert r.execute("GETJOB", "TIMEOUT", 1800, "FROM", "rq2", timeout=10) == NULL_ARRAY


def test_queued_job_is_not_duplicated_by_retry(server):
    """A job sitting in the queue at requeue time stays queued once (SPEC 7.1 step 4)."""
    r = server.raw()
    job_id = addjob(r, "rq3", b"x", 0, "RETRY", 1)
    time.sleep(1 + JITTER + SCHED + 0.4)    # time-based behaviour: let one retry period pass
    assert r.execute("QLEN", "rq3") == 1
    assert r.execute("GETJOB", "COUNT", 10, "FROM", "rq3") == [[b"rq3", job_id, b"x"]]
    assert show(r, job_id)[b"additional-deliveries"] == 0


def test_retry0_never_requeued(server):
    r = server.raw()
    job_id = addjob(r, "amo", b"x", 0, "RETRY", 0, "TTL", 60)
    assert r.execute("GETJOB", "FROM", "amo")[0][1] == job_id
    s = show(r, job_id)
    assert s[b"state"] == b"active"
    assert s[b"next-requeue-within"] is None
    assert r.execute("GETJOB", "TIMEOUT", 2000, "FROM", "amo", timeout=10) == NULL_ARRAY
    assert show(r, job_id)[b"state"] == b"active"


def test_delay_holds_job_back(server):
    r = server.raw()
    t0 = time.monotonic()
    job_id = addjob(r, "dq", b"x", 0, "DELAY", 1)
    s = show(r, job_id)
    assert s[b"state"] == b"active"
    assert 0 < s[b"next-requeue-within"] <= 1000
    assert r.execute("QLEN", "dq") == 0
    assert r.call("GETJOB", "NOHANG", "FROM", "dq") == b"*-1\r\n"
    t = first_time(lambda: r.execute("QLEN", "dq") == 1, 3)
    assert t is not None, "delayed job never queued"
    # DELAY has no jitter: qtime = now + DELAY*1000 (SPEC 3.1 step 9)
    assert 0.9 <= t - t0 <= 1 + SCHED + SLACK, t - t0
    s = show(r, job_id)
    assert s[b"state"] == b"queued" and s[b"additional-deliveries"] == 0


def test_delay_with_retry0_queued_once(server):
    r = server.raw()
    job_id = addjob(r, "dq0", b"x", 0, "DELAY", 1, "RETRY", 0)
    assert r.execute("QLEN", "dq0") == 0
    reply = r.execute("GETJOB", "TIMEOUT", 3000, "FROM", "dq0", timeout=10)
    assert reply == [[b"dq0", job_id, b"x"]]
    assert r.execute("GETJOB", "TIMEOUT", 1500, "FROM", "dq0", timeout=10) == NULL_ARRAY


def test_many_delayed_jobs_all_fire(server):
    r = server.raw()
    queues = [f"mdq{i}" for i in range(12)]
    r.send(b"".join(encode_command("ADDJOB", queues[i % 12], b"%d" % i, 0, "DELAY", 1)
                    for i in range(240)))
    for _ in range(240):
        assert type(r.read_parsed()) is Status
    t0 = time.monotonic()
    assert sum(r.execute("QLEN", q) for q in queues) == 0
    t = first_time(lambda: sum(r.execute("QLEN", q) for q in queues) == 240, 4, 0.05)
    assert t is not None, [r.execute("QLEN", q) for q in queues]
    assert t - t0 <= 1 + SCHED + SLACK + 0.5


def test_ttl_expiry_in_every_state(server):
    r = server.raw()
    t0 = time.monotonic()
    queued = addjob(r, "tq1", b"queued", 0, "TTL", 1)
    active = addjob(r, "tq2", b"active", 0, "TTL", 1, "RETRY", 0)
    assert r.execute("GETJOB", "FROM", "tq2")[0][1] == active
    delayed = addjob(r, "tq3", b"delayed", 0, "TTL", 2, "DELAY", 1, "RETRY", 0)
    nacked = addjob(r, "tq4", b"nacked", 0, "TTL", 2)
    r.execute("GETJOB", "FROM", "tq4")
    r.execute("NACK", nacked)
    longer = addjob(r, "tq5", b"survivor", 0, "TTL", 60)
    ids = [queued, active, delayed, nacked]
    assert all(show(r, i) is not None for i in ids)
    # expiry: etime = now_s + TTL, checked at awakeme = etime*1000 + 1000 (SPEC 7.1)
    t = first_time(lambda: all(r.execute("SHOW", i) is None for i in ids), 2 + 1 + 1 + SLACK + 1, 0.05)
    assert t is not None, [show(r, i) and show(r, i)[b"state"] for i in ids]
    assert t - t0 <= 2 + 1 + 1 + SCHED + SLACK
    assert r.execute("QLEN", "tq1") == 0 and r.execute("QLEN", "tq4") == 0 and r.execute("QLEN", "tq3") == 0
    assert r.call("GETJOB", "NOHANG", "FROM", "tq1", "tq2", "tq3", "tq4") == b"*-1\r\n"
    assert show(r, longer)[b"state"] == b"queued"
    assert int(parse_info(r.execute("INFO", "jobs"))["registered_jobs"]) == 1


def test_ttl_expiry_not_early(server):
    r = server.raw()
    job_id = addjob(r, "tq", b"x", 0, "TTL", 2)
    t0 = time.monotonic()
    # etime = floor(now) + 2 s: the job must exist for at least one full second
    t = first_time(lambda: r.execute("SHOW", job_id) is None, 5, 0.05)
    assert t is not None
    assert t - t0 >= 1.0, t - t0


def test_show_ttl_counts_down(server):
    r = server.raw()
    job_id = addjob(r, "tq", b"x", 0, "TTL", 100)
    first = show(r, job_id)[b"ttl"]
    assert 99 <= first <= 100
    wait_until(lambda: show(r, job_id)[b"ttl"] < first, 2.5)


def test_working_postpones_requeue(server):
    r = server.raw()
    t0 = time.monotonic()
    job_id = addjob(r, "wq", b"x", 0, "RETRY", 2)
    r.execute("GETJOB", "FROM", "wq")
    wait_until(lambda: time.monotonic() - t0 >= 1.0, 2)
    assert r.execute("WORKING", job_id) == 2
    t_working = time.monotonic()
    # without WORKING the job would be back at ~2 s (+-0.25); now it is due at ~3 s
    wait_until(lambda: time.monotonic() - t0 >= 2 + JITTER + SCHED + 0.15, 3)
    assert r.execute("QLEN", "wq") == 0, "WORKING did not postpone the requeue"
    t = first_time(lambda: r.execute("QLEN", "wq") == 1, 3)
    assert t is not None
    assert 2 - JITTER - 0.1 <= t - t_working <= 2 + JITTER + SCHED + SLACK, t - t_working


def test_show_next_requeue_and_awake(server):
    r = server.raw()
    job_id = addjob(r, "sq", b"x", 0, "RETRY", 10)
    s = show(r, job_id)
    assert 10_000 - 250 - 100 <= s[b"next-requeue-within"] <= 10_000 + 250
    # queued with RETRY > 0: BCAST_WILLQUEUE is set so the job wakes 500 ms early (SPEC 7.1)
    assert abs((s[b"next-requeue-within"] - s[b"next-awake-within"]) - 500) <= 20, s
    delayed = addjob(r, "sq", b"x", 0, "DELAY", 20)
    s = show(r, delayed)
    assert 19_000 <= s[b"next-requeue-within"] <= 20_000
    assert 0 <= s[b"next-awake-within"] <= s[b"next-requeue-within"]
