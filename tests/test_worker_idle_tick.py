"""The idle tick (docs/design.md, "The idle tick"): a worker with nothing to do ticks every
100 ms instead of every 10 (every second with no job, no connection and no other node), and
is back on the 10 ms tick before anything it does needs it.

INFO goes to the workers as control messages, which do not count as work, so polling it
does not wake them.
"""
import time

import pytest

from support.resp_client import RawConn, encode_command
from support.waits import wait_until

IDLE_TICK_MS = 100
SLEEP_TICK_MS = 1000
TICK_MS = 10
IDLE_WITHIN_S = 5.0         # 1 s without work, plus slack for a slow machine


def worker_ticks(srv):
    """{worker index: its tick in ms}, from INFO's workerN lines."""
    out = {}
    for key, value in srv.info_fields().items():
        if key.startswith("worker") and key[6:].isdigit():
            fields = dict(kv.split("=", 1) for kv in value.split(","))
            out[int(key[6:])] = int(fields["tick_ms"])
    return out


def wait_idle(srv, ticks=(IDLE_TICK_MS, SLEEP_TICK_MS)):
    wait_until(lambda: set(worker_ticks(srv).values()) <= set(ticks), timeout=IDLE_WITHIN_S,
               message="the workers did not go to the idle tick")


def expires_on_time(conn, queue, ttl=1):
    """ADDJOB with TTL `ttl` on `conn`; True if a QLEN sent at TTL + the 10 ms tick finds
    the queue empty (the job expired on time)."""
    assert conn.execute("ADDJOB", queue, "body", 0, "TTL", ttl).startswith(b"D-")
    added = time.monotonic()
    wait_until(lambda: time.monotonic() >= added + ttl + TICK_MS / 1000, timeout=ttl + 5,
               interval=0.002)
    return conn.execute("QLEN", queue) == 0


@pytest.mark.server
def test_an_idle_node_s_workers_tick_slowly_and_wake_at_the_first_command(start_server):
    srv = start_server(workers=2)
    # no job, no connection of their own, no other node: the once-a-second tick
    wait_idle(srv, ticks=(SLEEP_TICK_MS,))
    with RawConn(srv.port) as r:
        assert r.execute("ADDJOB", "wake", "body", 0).startswith(b"D-")
        ticks = worker_ticks(srv)
    assert TICK_MS in ticks.values(), ticks     # the queue's worker is on the 10 ms tick
    wait_idle(srv)                              # and idle again once the work stops
    # the job's TTL timer keeps its worker on the 100 ms tick, the other one sleeps
    assert sorted(worker_ticks(srv).values()) == [IDLE_TICK_MS, SLEEP_TICK_MS]


@pytest.mark.server
@pytest.mark.parametrize("served", [True, False], ids=["served-connection", "front-end"])
def test_a_job_added_to_an_idle_worker_expires_on_time(start_server, served):
    srv = start_server(workers=1, extra_args=() if served else ("--connection-affinity", "no"))
    with RawConn(srv.port) as r:
        # with affinity the connection is handed to the worker after this command, so the
        # ADDJOB below reaches it straight from the socket (the C loop's path)
        assert r.execute("QLEN", "ttl") == 0
        late = []
        for i in range(3):
            wait_idle(srv)
            if not expires_on_time(r, "ttl%d" % i):
                late.append(i)
    assert not late, f"jobs added to an idle worker still queued after their TTL: {late}"


@pytest.mark.server
def test_a_delayed_job_reaches_a_waiting_consumer_on_time_across_the_idle_tick(start_server):
    # DELAY 2: the commands keep the worker on the 10 ms tick for a second, then it goes
    # idle with the job's timer a second away, and must be back on the 10 ms tick before it
    srv = start_server(workers=1)
    late = []
    with RawConn(srv.port) as producer, RawConn(srv.port) as consumer:
        for i in range(4):
            queue = "delayed%d" % i
            consumer.send(encode_command("GETJOB", "FROM", queue))    # blocks: nothing yet
            wait_idle(srv)
            assert producer.execute("ADDJOB", queue, "body", 0, "DELAY", 2).startswith(b"D-")
            added = time.monotonic()
            # one more command 50 ms later: the idle tick then starts half a slow tick out of
            # step with the job's timer, which it would miss by ~50 ms if it ignored it
            wait_until(lambda: time.monotonic() >= added + 0.05, timeout=5, interval=0.002)
            assert producer.execute("QLEN", queue) == 0
            jobs = consumer.read_parsed(timeout=10)
            late_by = time.monotonic() - added - 2
            assert jobs and jobs[0][0] == queue.encode(), jobs
            late.append(round(late_by, 3))
    # a missed timer makes every round ~50 ms late; a loaded machine only delays some of them
    assert min(late) <= 0.035, f"delayed jobs handed to a waiting consumer late (s): {late}"


def loop_turns(srv, index=0):
    """Turns worker `index` took through its Python loop (INFO's workerN loop_turns)."""
    fields = dict(kv.split("=", 1) for kv in srv.info_fields()["worker%d" % index].split(","))
    return int(fields["loop_turns"])


@pytest.mark.server
def test_a_consumer_blocked_with_a_timeout_keeps_the_worker_serving_in_its_c_turn(start_server):
    """A GETJOB blocked with a TIMEOUT leaves an entry in the deadlines heap until it is due.
    The worker's C turn hands over to the Python loop only when the first deadline is due
    (or the tick comes): with any entry, it had every wake-up go through the Python loop,
    most of a worker's turns once consumers block with a timeout (docs/design.md, "The
    worker's loop")."""
    srv = start_server(workers=1)
    commands = 2000
    with RawConn(srv.port, timeout=120) as consumer, RawConn(srv.port) as producer:
        consumer.send(encode_command("GETJOB", "TIMEOUT", 60000, "FROM", "waits"))
        wait_until(lambda: (producer.execute("QSTAT", "waits") or [0] * 10)[9] == 1, timeout=5,
                   message="the consumer did not block")
        before = loop_turns(srv)
        for _ in range(commands):               # one wake-up of the worker each
            assert producer.execute("ADDJOB", "other", "body", 0).startswith(b"D-")
        turns = loop_turns(srv) - before
        # the 10 ms tick still takes a turn each; a wake-up per command would be 2,000
        assert turns < commands // 2, turns
        jid = producer.execute("ADDJOB", "waits", "body", 0)
        assert consumer.read_parsed()[0][1] == jid  # the blocked consumer is still served


@pytest.mark.server
def test_the_timeouts_of_consumers_served_long_ago_take_no_turn_of_the_python_loop(start_server):
    """A consumer served before its GETJOB TIMEOUT leaves its entry in the deadlines heap
    until then. When such an entry comes due, the worker's C turn drops it
    (timers.waiter_due) instead of handing the turn to the Python loop to find nothing to
    expire: with consumers that block with a timeout and are served, that was a Python turn
    per served GETJOB (docs/design.md, "The worker's loop")."""
    srv = start_server(workers=1)
    served = 300
    timeout_ms = 4000           # the cycles take 0.6-1.5 s, on a busy machine too
    with RawConn(srv.port, timeout=30) as consumer, RawConn(srv.port) as producer:
        t0 = time.monotonic()
        for _ in range(served):
            consumer.send(encode_command("GETJOB", "TIMEOUT", timeout_ms, "FROM", "waits"))
            producer.execute("PING")    # its reply leaves after the turn that read the GETJOB
            jid = producer.execute("ADDJOB", "waits", "body", 0)
            assert consumer.read_parsed()[0][1] == jid
            assert producer.execute("ACKJOB", jid) == 1
            spaced = time.monotonic() + 0.002   # each entry due in a millisecond of its own
            while time.monotonic() < spaced:
                producer.execute("PING")
        t1 = time.monotonic()
        assert t1 - t0 < timeout_ms / 1000, "too slow to measure: cycles outlived the timeouts"
        # every entry comes due within this window; a command keeps waking the worker
        before = loop_turns(srv)
        end = t1 + timeout_ms / 1000 + 0.25
        commands = 0
        while time.monotonic() < end:
            assert producer.execute("ADDJOB", "other", "body", 0).startswith(b"D-")
            commands += 1
        turns = loop_turns(srv) - before
    ticks = (end - t1) * 1000 / TICK_MS
    # the 10 ms tick takes a turn each, the front-end's memory poll one every 100 ms; a
    # turn per stale entry would add `served` more
    assert turns < 1.25 * ticks + 40, (turns, ticks, commands)


@pytest.mark.server
def test_a_blocked_consumer_served_by_an_addjob_takes_no_turn_of_the_python_loop(start_server):
    """An ADDJOB to a queue a consumer waits on marks the queue ready; the served loop's C
    turn serves the consumer itself (ConsumersCore.serve_ready, a C call) instead of
    handing the turn to the Python loop, which took a Python turn per job handed to a
    waiting consumer (docs/design.md, "The worker's loop")."""
    srv = start_server(workers=1)
    cycles = 500
    with RawConn(srv.port, timeout=30) as consumer, RawConn(srv.port) as producer:
        jid = producer.execute("ADDJOB", "waits", "warm", 0)
        assert consumer.execute("GETJOB", "FROM", "waits")[0][1] == jid
        assert consumer.execute("ACKJOB", jid) == 1     # a GETJOB alone does not hand it over
        wait_until(lambda: int(srv.info_fields("server")["connections_served_by_workers"]) == 2,
                   timeout=5, message="the two connections were not handed to the worker")
        before = loop_turns(srv)
        t0 = time.monotonic()
        for _ in range(cycles):
            consumer.send(encode_command("GETJOB", "TIMEOUT", 60000, "FROM", "waits"))
            producer.execute("PING")    # its reply leaves after the turn that read the GETJOB
            jid = producer.execute("ADDJOB", "waits", "body", 0)
            assert consumer.read_parsed()[0][1] == jid
        turns = loop_turns(srv) - before
    ticks = (time.monotonic() - t0) * 1000 / TICK_MS
    assert turns < 1.5 * ticks + 40 and turns < cycles, (turns, ticks)
