"""`DisqueBroker` (disque.integrations.dramatiq, docs/frameworks.md) under real `dramatiq`
worker processes against real nodes: 1,000 messages run once on one node and on three
nodes with two copies, Retries ending in `<queue>:dead`, delays kept by the server, a
worker SIGKILLed mid-task, a node killed under REPLICATE 2, and the one-line errors of a bad
address and of an unreachable cluster; plus the broker's own operations in-process.

Each actor call of a worker appends `[event, value, time, pid]` to a record file, so the
checks read what ran, where and when."""
import os
import signal
import sys
import textwrap
import time

import dramatiq
import pytest
from dramatiq.errors import ConnectionClosed, QueueJoinTimeout
from dramatiq.message import Message

from disque.client import Disque
from disque.integrations.dramatiq import DisqueBroker
from support.ports import lease_port
from support.processes import WorkerProcesses
from support.waits import wait_until

ACTORS = textwrap.dedent('''
    import json, os, time

    import dramatiq
    from disque.integrations.dramatiq import DisqueBroker

    broker = DisqueBroker(*os.environ["DISQUE_SERVERS"].split(","),
                          retry=int(os.environ["DISQUE_RETRY"]),
                          failover_timeout=float(os.environ["DISQUE_FAILOVER"]))
    dramatiq.set_broker(broker)
    RECORD = os.environ["RECORD"]

    def note(event, value):
        line = json.dumps([event, value, time.time(), os.getpid()]) + "\\n"
        fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())     # one write: lines of concurrent calls never mix
        finally:
            os.close(fd)

    @dramatiq.actor(queue_name="work")
    def record(value):
        note("run", value)

    @dramatiq.actor(queue_name="work")
    def record_slowly(value):
        time.sleep(0.02)
        note("run", value)

    @dramatiq.actor(queue_name="ordered")
    def in_order(key, n):
        note("start", [key, n])
        time.sleep(0.004 * (n % 3))
        note("done", [key, n])
    @dramatiq.actor(queue_name="flaky", max_retries=2, min_backoff=1000, max_backoff=1000)
    def always_fails(value):
        note("fail", value)
        raise RuntimeError("always fails: %s" % value)

    @dramatiq.actor(queue_name="slow")
    def hangs_the_first_time(value):
        note("start", value)
        flag = RECORD + ".hung"
        if not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(600)             # the test SIGKILLs the worker here
        note("done", value)
''')

# the actors as the producer (this test process) sees them: names and queues
ACTOR_QUEUES = {"record": "work", "record_slowly": "work", "in_order": "ordered",
                "always_fails": "flaky",
                "hangs_the_first_time": "slow"}
READY_LINE = "Worker process is ready for action"


def address(node):
    return "127.0.0.1:%d" % node.port


def producer(*nodes, **options):
    """A broker in this process, with the workers' actors declared (bodies never run)."""
    broker = DisqueBroker(*(address(n) for n in nodes), **options)
    actors = {name: dramatiq.actor(lambda *args: None, actor_name=name, queue_name=queue,
                                   broker=broker)
              for name, queue in ACTOR_QUEUES.items()}
    return broker, actors


def stays_true(predicate, duration, message):
    """Check `predicate` over `duration` seconds; fail as soon as it turns false."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.05)


class DramatiqWorkers(WorkerProcesses):
    """`dramatiq actors` processes of one test (a parent and its worker process each, in a
    session of their own), killed by process group at its end."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        (tmp_path / "actors.py").write_text(ACTORS)

    def start(self, *nodes, servers=None, retry=60, failover=10.0, threads=4, wait=True,
              shutdown_timeout_ms=5000):
        env = dict(os.environ, RECORD=str(self.record), PYTHONUNBUFFERED="1",
                   DISQUE_SERVERS=servers or ",".join(address(n) for n in nodes),
                   DISQUE_RETRY=str(retry), DISQUE_FAILOVER=str(failover))
        proc = self.launch(
            [sys.executable, "-m", "dramatiq", "actors", "--processes", "1", "--threads",
             str(threads), "--path", str(self.dir), "--worker-shutdown-timeout",
             str(shutdown_timeout_ms)],
            env, "dramatiq%d.log" % len(self.procs))
        if wait:
            wait_until(lambda: READY_LINE in self.log(proc), timeout=30,
                       message="the dramatiq worker never got ready:\n" + self.log(proc))
        return proc

    def values(self, kind="run"):
        return [row[1] for row in self.events(kind)]

    def stop(self, proc):
        """SIGTERM to the parent only (it passes it on): Dramatiq's graceful stop."""
        proc.send_signal(signal.SIGTERM)
        return proc.wait(30)


@pytest.fixture
def workers(tmp_path):
    w = DramatiqWorkers(tmp_path)
    yield w
    w.kill_all()


def assert_clean_log(text):
    bad = [line for line in text.splitlines()
           if "Traceback" in line or "[ERROR]" in line or "[CRITICAL]" in line]
    assert not bad, text


def dead_letters(client, queue):
    """The messages in `<queue>:dead`, taken (and acknowledged) from the node."""
    jobs = client.get_jobs(queue + ":dead", count=100, nohang=True)
    if jobs:
        client.ack_job(*jobs)
    return [Message.decode(job.body) for job in jobs]


# -- in-process: the broker's operations against a real node ---------------------------

def test_consume_ack_dead_letter_requeue_close_join_flush(server3):
    broker, actors = producer(server3, retry=1)
    client = Disque(address(server3))
    record = actors["record"]
    assert broker.get_declared_delay_queues() == set()      # the server holds delays
    for value in range(5):
        record.send(value)
    assert client.qlen("work") == 5
    consumer = broker.consume("work", prefetch=3, timeout=200)
    first = next(consumer)
    # one GETJOB COUNT 3 took three jobs, all held
    assert client.qlen("work") == 2 and len(broker.leases_of("work")) == 3
    second, third = next(consumer), next(consumer)
    assert [m.args[0] for m in (first, second, third)] == [0, 1, 2]
    # the prefetch is full: no fetch, None after the timeout
    assert next(consumer) is None and client.qlen("work") == 2

    consumer.ack(first)
    assert client.show(first.job.id) is None
    consumer.nack(second)
    assert client.show(second.job.id) is None
    [dead] = dead_letters(client, "work")
    assert (dead.args, dead.message_id) == ((1,), second.message_id)
    consumer.requeue([third])                # back at once, not a copy
    assert client.qlen("work") == 3 and client.show(third.job.id).nacks == 0
    rest = [next(consumer) for _ in range(3)]
    assert sorted(m.args[0] for m in rest) == [2, 3, 4]
    for message in rest:
        consumer.ack(message)
    broker.join("work", timeout=5000)

    # close hands back what was fetched and not yielded; a yielded message stays held,
    # and the next consumer of the queue acknowledges it
    record.send(10)
    record.send(11)
    held = next(consumer)
    assert held.args == (10,) and client.qlen("work") == 0
    consumer.close()
    assert client.qlen("work") == 1 and len(broker.leases_of("work")) == 1
    with pytest.raises(QueueJoinTimeout):
        broker.join("work", timeout=300)
    successor = broker.consume("work", prefetch=3, timeout=200)
    successor.ack(held)
    again = next(successor)
    assert again.args == (11,)
    successor.ack(again)
    broker.join("work", timeout=5000)

    # a body that is not a Dramatiq message is dead-lettered as it is, not retried forever
    client.add_job("work", b"not a dramatiq message", retry=60)
    assert next(successor) is None
    assert client.qpeek("work:dead", 1)[0].body == b"not a dramatiq message"

    # a message whose eta is far ahead goes back to the server's timer
    far = Message(queue_name="work", actor_name="record", args=("far",), kwargs={},
                  options={"eta": int(time.time() * 1000) + 3500})
    client.add_job("work", far.encode(), retry=60)
    assert next(successor) is None and len(broker.leases_of("work")) == 0
    [waiting] = list(client.scan_jobs(queue="work", reply="all"))
    assert waiting.delay == 3 and waiting.state == "active"
    client.del_job(waiting.id)

    # ...and one of a group keeps its job and its place (NACK DELAY), ahead of the next
    first = Message(queue_name="work", actor_name="record", args=("g1",), kwargs={},
                    options={"eta": int(time.time() * 1000) + 3500, "disque_group": "g"})
    first_id = client.add_job("work", first.encode(), retry=60, group="g")
    client.add_job("work", Message(queue_name="work", actor_name="record", args=("g2",),
                                   kwargs={}, options={"disque_group": "g"}).encode(),
                   retry=60, group="g")
    assert next(successor) is None and len(broker.leases_of("work")) == 0
    info = client.show(first_id)
    assert info.nacks == 1 and info.state == "active" and 1000 <= info.next_requeue_within * 1000
    assert client.qstat("work").held == 1 and client.qlen("work") == 0
    client.del_job(*[j for j in client.scan_jobs(queue="work")])

    # flush drops queued, delayed and dead-lettered messages
    record.send(20)
    record.send_with_options(args=(21,), delay=60000)
    broker.flush("work")
    assert client.qlen("work") == 0 and client.qlen("work:dead") == 0
    assert list(client.scan_jobs(queue="work")) == []
    assert list(client.scan_jobs(queue="work:dead")) == []
    successor.close()
    broker.close()
    client.close()


def test_a_held_message_is_not_redelivered_past_its_retry(server3):
    """WORKING from the consumer's loop keeps a message held three times its RETRY; a job
    fetched without it comes back after its RETRY (the control)."""
    broker, actors = producer(server3, retry=1)
    client = Disque(address(server3))
    actors["record"].send("held")
    consumer = broker.consume("work", prefetch=1, timeout=100)
    held = next(consumer)
    assert held.args == ("held",)
    stays_true(lambda: next(consumer) is None and client.qlen("work") == 0, 3.0,
               "a held message was queued again")
    assert client.show(held.job.id).additional_deliveries == 0
    consumer.ack(held)

    actors["record"].send("not held")
    [raw] = client.get_jobs("work", timeout=1)
    wait_until(lambda: client.qlen("work") == 1, timeout=4,
               message="a job without WORKING was not queued again after its RETRY")
    client.ack_job(raw)
    consumer.close()
    broker.close()
    client.close()


# -- real dramatiq workers --------------------------------------------------------------

def test_1000_messages_run_once_on_one_node(server3, workers):
    broker, actors = producer(server3)
    for value in range(1000):
        actors["record"].send(value)
    proc = workers.start(server3)
    wait_until(lambda: len(workers.values()) >= 1000, timeout=60,
               message="1000 messages did not run")
    broker.join("work", timeout=10000)
    assert sorted(workers.values()) == list(range(1000))
    assert workers.stop(proc) == 0
    assert_clean_log(workers.log(proc))
    broker.close()


def test_1000_messages_run_once_on_three_nodes_with_two_copies(start_cluster, workers):
    cluster = start_cluster(3)
    broker, actors = producer(cluster.nodes[0])
    for value in range(1000):
        actors["record"].send(value)
    # HELLO lists three nodes: two copies of each message
    first = next(iter(broker.client.scan_jobs(queue="work", reply="all")))
    assert first.repl == 2
    procs = [workers.start(*cluster.nodes) for _ in range(2)]
    wait_until(lambda: len(workers.values()) >= 1000, timeout=60,
               message="1000 messages did not run")
    broker.join("work", timeout=15000)     # every job created on node 0 acknowledged there
    assert sorted(workers.values()) == list(range(1000))
    assert [workers.stop(proc) for proc in procs] == [0, 0]
    for proc in procs:
        assert_clean_log(workers.log(proc))
    broker.close()


def test_messages_of_one_group_run_one_at_a_time_in_order(server3, workers):
    """The message option `disque_group` (docs/job-groups.md): 8 keys x 15 messages on 4
    threads of each of 2 workers; each key's messages run in the order sent, never two at
    once, while the keys run in parallel."""
    broker, actors = producer(server3)
    keys, per_key = ["k%d" % i for i in range(8)], 15
    procs = [workers.start(server3), workers.start(server3)]
    for key in keys:                    # a key's messages one after the other in the queue
        for n in range(per_key):
            actors["in_order"].send_with_options(args=(key, n), disque_group=key)
    wait_until(lambda: len(workers.values("done")) >= len(keys) * per_key, timeout=60,
               message="the grouped messages did not all run")
    rows = workers.events()             # in the order they were written (one append each)
    for key in keys:
        mine = [(row[0], row[1][1]) for row in rows if row[1][0] == key]
        assert mine == [(e, n) for n in range(per_key) for e in ("start", "done")], (key, mine)
    assert len(rows) == 2 * len(keys) * per_key
    assert len({row[3] for row in workers.events("start")}) == 2     # both workers ran some
    for proc in procs:
        assert workers.stop(proc) == 0
        assert_clean_log(workers.log(proc))
    broker.close()


def test_retries_end_in_the_dead_letter_queue(server3, workers):
    broker, actors = producer(server3)
    client = Disque(address(server3))
    actors["always_fails"].send("x")
    proc = workers.start(server3)
    wait_until(lambda: client.qlen("flaky:dead") == 1, timeout=20,
               message="the message never reached flaky:dead")
    runs = [row[2] for row in workers.events("fail")]
    assert len(runs) == 3                    # the first run and max_retries=2
    gaps = [b - a for a, b in zip(runs, runs[1:])]
    # Retries' backoff: 500-1000 ms (min_backoff = max_backoff = 1000, with jitter)
    assert all(0.45 <= gap <= 2.0 for gap in gaps), gaps
    [dead] = dead_letters(client, "flaky")
    assert dead.args == ("x",) and dead.options["retries"] == 3
    assert "always fails: x" in dead.options["traceback"]
    wait_until(lambda: list(client.scan_jobs(queue="flaky")) == [], timeout=5,
               message="the failed message stayed in its queue")
    assert workers.stop(proc) == 0
    broker.close()
    client.close()


def test_delays_are_kept_by_the_server(server3, workers):
    broker, actors = producer(server3)
    proc = workers.start(server3)
    sent = {}
    for delay in (300, 1500, 2000):
        sent[delay] = time.time()
        actors["record"].send_with_options(args=(delay,), delay=delay)
    wait_until(lambda: len(workers.values()) == 3, timeout=10,
               message="the delayed messages did not run")
    for _, delay, ran, _ in workers.events("run"):
        late = ran - sent[delay] - delay / 1000.0
        print("delay %d ms: ran %.3f s late" % (delay, late))
        assert 0 <= late <= 1.0, (delay, late)
    assert workers.stop(proc) == 0
    broker.close()


def test_a_worker_killed_mid_task_its_message_runs_again_after_retry(server3, workers):
    broker, actors = producer(server3, retry=2)     # RETRY is set by the producer's ADDJOB
    actors["hangs_the_first_time"].send("k")
    first = workers.start(server3, retry=2, threads=1)
    wait_until(lambda: workers.events("start"), timeout=10, message="the task never started")
    started = workers.events("start")[0][2]
    second = workers.start(server3, retry=2, threads=1)
    # held for twice its RETRY by a live worker: not delivered to the other one
    stays_true(lambda: len(workers.events("start")) == 1,
               max(0.0, started + 4.0 - time.time()), "delivered again while held")
    killed = time.time()
    workers.kill(first)
    wait_until(lambda: workers.events("done"), timeout=10,
               message="the message did not run again after the worker died")
    starts = workers.events("start")
    assert len(starts) == 2 and killed < starts[1][2] <= killed + 2 + 1.5
    assert starts[1][3] != starts[0][3] and len(workers.events("done")) == 1
    broker.join("slow", timeout=5000)
    assert workers.stop(second) == 0
    broker.close()


def test_a_stopped_worker_hands_back_its_prefetched_messages(server3, workers):
    """SIGTERM: the running messages finish and are acknowledged, the prefetched ones go
    back to the queue at once (RETRY is 60 s: one left to it would fail the test), and
    another worker runs them: every message once."""
    broker, actors = producer(server3)
    client = Disque(address(server3))
    for value in range(100):
        actors["record_slowly"].send(value)
    first = workers.start(server3, threads=2)
    wait_until(lambda: len(workers.values()) >= 10, timeout=20,
               message="the first worker did not start on the messages")
    assert workers.stop(first) == 0
    done = len(workers.values())
    assert done < 100 and client.qlen("work") == 100 - done
    second = workers.start(server3, threads=2)
    wait_until(lambda: len(workers.values()) >= 100, timeout=20,
               message="the handed-back messages did not run")
    broker.join("work", timeout=5000)
    assert sorted(workers.values()) == list(range(100))
    assert workers.stop(second) == 0
    for proc in (first, second):
        assert_clean_log(workers.log(proc))
    broker.close()
    client.close()


def test_a_node_killed_under_replicate_2_loses_no_message(start_cluster, workers):
    cluster = start_cluster(3)
    broker, actors = producer(cluster.nodes[0], retry=2)
    for value in range(300):
        actors["record_slowly"].send(value)
    # the worker starts on node 0, where the messages are queued, and learns the others
    # from HELLO: the node it uses and the jobs queued there die together
    workers.start(cluster.nodes[0], retry=2, failover=10.0)
    wait_until(lambda: len(workers.values()) >= 50, timeout=20,
               message="the worker did not start on the messages")
    cluster.kill(0)
    done_at_kill = len(set(workers.values()))
    assert done_at_kill < 300, "all done before the kill: nothing was tested"
    wait_until(lambda: set(workers.values()) == set(range(300)), timeout=60,
               message="messages lost after the node died")
    duplicates = len(workers.values()) - 300
    print("node killed after %d of 300 messages; %d ran twice (at-least-once)"
          % (done_at_kill, duplicates))
    broker.close()


def test_a_worker_whose_cluster_is_down_stops_on_sigterm_before_its_failover_timeout(
        start_cluster, workers):
    """Every node stopped under a consuming worker, then SIGTERM: a fetch fails over for
    at most the consumer's timeout (1 s), so the worker stops within `stop`'s 30 s, long
    before the 60 s of failover_timeout (its shutdown timeout, 120 s, never cuts it short).
    Before, each consumer thread kept failing over for all of it."""
    cluster = start_cluster(3)
    proc = workers.start(*cluster.nodes, failover=60.0, shutdown_timeout_ms=120000)
    for node in cluster.nodes:
        node.stop()
    assert workers.stop(proc) == 0, workers.log(proc)
    log = workers.log(proc)
    assert "Worker has been shut down." in log, log


def test_a_bad_server_address_is_one_error_line(workers):
    proc = workers.start(servers="127.0.0.1:notaport", wait=False)
    assert proc.wait(30) != 0
    log = workers.log(proc)
    error = "ServerSpecError: bad port 'notaport' in server address '127.0.0.1:notaport'"
    # Python prints the import's traceback above it: Dramatiq's CLI does not catch it
    lines = [line for line in log.splitlines() if "notaport" in line]
    assert len(lines) == 1 and lines[0].endswith(error), log


def test_an_unreachable_cluster_is_one_error_line(workers):
    lease = lease_port()                     # reserved, and nothing listens there
    try:
        proc = workers.start(servers="127.0.0.1:%d" % lease.port, failover=0.5)
        expected = ("Consumer encountered a connection error: Disque unavailable: no Disque "
                    "node answered within 0.5 s (tried 127.0.0.1:%d)" % lease.port)
        wait_until(lambda: expected in workers.log(proc), timeout=15,
                   message="no connection error line:\n" + workers.log(proc))
        log = workers.log(proc)
        assert "Traceback" not in log
        problems = [line for line in log.splitlines() if "[CRITICAL]" in line]
        assert problems and all(expected in line for line in problems), log
        # the producer side: the same sentence, as Dramatiq's ConnectionClosed
        broker = DisqueBroker("127.0.0.1:%d" % lease.port, failover_timeout=0.5)
        with pytest.raises(ConnectionClosed, match="no Disque node answered within 0.5 s"):
            broker.enqueue(Message(queue_name="work", actor_name="record", args=(1,),
                                   kwargs={}, options={}))
        assert workers.stop(proc) == 0
    finally:
        lease.release()
