"""Celery on Disque through the kombu transport (disque.integrations.kombu,
docs/frameworks.md): the transport's settings and its message operations against a real
node, then real `celery worker` processes (prefork, -c 2) on one node and on a 3-node
cluster: 1,000 tasks run once each, Celery's retries, countdown, a worker and a node
SIGKILLed, a bad URL, a wrong password and an unreachable cluster.

Workers run tests/support/celery_app.py; each task appends a line to a record file, which
is how the tests see what ran, where and when. Every worker is killed by process group at
the end of its test or module, even when the test fails.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import kombu
import psutil
import pytest
from kombu.exceptions import OperationalError

from disque.client import Disque
from disque.client.servers import ServerSpecError
from disque.integrations import kombu as disque_kombu     # registers disque://
from disque.integrations.kombu_config import (TransportOptionError, eta_delay, job_ttl,
                                              settings_from_connection)
from support.celery_app import create_app
from support.ports import lease_port
from support.processes import WorkerProcesses
from support.waits import wait_until

TESTS_DIR = Path(__file__).resolve().parent


def broker_url(*nodes, password=None):
    auth = ":%s@" % password if password else ""
    return "disque://%s%s" % (auth, ",".join("127.0.0.1:%d" % n.port for n in nodes))


def holds_for(predicate, seconds, message, interval=0.05):
    """Assert that `predicate` stays true for `seconds`, checked every `interval`: what
    must NOT happen cannot be waited for, only watched for a while."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(interval)


def registered_jobs(node):
    return int(node.info_fields("jobs")["registered_jobs"])


def unacknowledged_jobs(nodes):
    """{node index: IDs of its jobs not acknowledged} for the nodes holding any."""
    found = {}
    for index, node in enumerate(nodes):
        client = Disque("127.0.0.1:%d" % node.port)
        try:
            ids = list(client.scan_jobs(states=("wait-repl", "active", "queued")))
        finally:
            client.close()
        if ids:
            found[index] = ids
    return found


class CeleryWorkers(WorkerProcesses):
    """`celery worker` processes of a test or a module, each in a session of its own so its
    pool children die with it (os.killpg)."""

    def __init__(self, directory):
        super().__init__(directory)
        self.results = self.dir / "results"
        self.results.mkdir(exist_ok=True)
        self.apps = []

    def start(self, broker, *args, conf=None):
        index = len(self.procs) + 1
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   CELERY_TEST_BROKER=broker, CELERY_TEST_RESULTS=str(self.results),
                   CELERY_TEST_RECORD=str(self.record), CELERY_TEST_CONF=json.dumps(conf or {}),
                   PYTHONPATH=os.pathsep.join(filter(None, (str(TESTS_DIR),
                                                            os.environ.get("PYTHONPATH")))))
        command = [sys.executable, "-m", "celery", "-A", "support.celery_app", "worker",
                   "-l", "INFO", "-P", "prefork", "-c", "2", "-n", "w%d@%%h" % index, *args]
        return self.launch(command, env, "worker%d.log" % index)

    def app(self, broker, **conf):
        """The producer side: the same app, in this process, sending by task name."""
        app = create_app(broker, str(self.results), **conf)
        self.apps.append(app)
        return app

    def wait_ready(self, *procs, timeout=40):
        for proc in procs:
            wait_until(lambda: " ready." in self.log(proc) or proc.poll() is not None,
                       timeout=timeout, message="celery worker never became ready")
            assert proc.poll() is None, self.log(proc)

    def pids(self, proc):
        try:
            parent = psutil.Process(proc.pid)
            return {proc.pid} | {p.pid for p in parent.children(recursive=True)}
        except psutil.NoSuchProcess:
            return set()

    def stop_all(self):
        self.kill_all()
        for app in self.apps:
            app.close()


@pytest.fixture
def workers(tmp_path):
    w = CeleryWorkers(tmp_path)
    try:
        yield w
    finally:
        w.stop_all()


@pytest.fixture(scope="module")
def node_workers(server3, tmp_path_factory):
    """Two workers (-c 2, Celery's defaults: early acks) on the shared 3-worker node."""
    w = CeleryWorkers(tmp_path_factory.mktemp("celery-node"))
    try:
        procs = [w.start(broker_url(server3)) for _ in range(2)]
        w.wait_ready(*procs)
        yield w
    finally:
        w.stop_all()


def run_once_each(workers, app, count, timeout):
    """Send t.record 0..count-1; check every task ran exactly once and returned n * 2."""
    workers.reset_record()
    results = [app.send_task("t.record", args=(n,)) for n in range(count)]
    wait_until(lambda: len(workers.events("run")) >= count, timeout=timeout,
               message="not every task ran")
    runs = collections.Counter(row[1] for row in workers.events("run"))
    assert set(runs) == set(range(count))
    assert [n for n, times in runs.items() if times != 1] == []
    assert [r.get(timeout=10) for r in results] == [n * 2 for n in range(count)]
    return runs


# -- the transport without a worker --------------------------------------------------
def test_settings_come_from_the_url_and_the_transport_options():
    conn = kombu.Connection("disque://:s3cret@10.0.0.1:7711,10.0.0.2:7712")
    settings = settings_from_connection(conn)
    assert settings.servers == (("10.0.0.1", 7711), ("10.0.0.2", 7712))
    assert settings.password == "s3cret"
    assert (settings.visibility_timeout, settings.ttl, settings.replicate) == (300, 86400, None)
    assert conn.as_uri() == "disque://:**@10.0.0.1:7711,10.0.0.2:7712"
    assert "s3cret" in conn.as_uri(include_password=True)
    # Celery hands the URL to kombu unchanged: the whole node list reaches the client
    celery_conn = create_app("disque://a:1,b:2").connection_for_write()
    assert settings_from_connection(celery_conn).servers == (("a", 1), ("b", 2))
    # kombu's own failover forms add their nodes too
    assert settings_from_connection(kombu.Connection("disque://a:1;disque://b:2")).servers == (
        ("a", 1), ("b", 2))
    plain = kombu.Connection(hostname="c", port=7000, transport="disque", password="pw")
    assert (settings_from_connection(plain).servers, settings_from_connection(plain).password) \
        == ((("c", 7000),), "pw")
    assert settings_from_connection(kombu.Connection("disque://")).servers == (
        ("127.0.0.1", 7711),)
    with pytest.raises(ServerSpecError, match=r"bad Disque broker URL disque://:\*\*@h:x: "
                                              r"bad port 'x'"):
        settings_from_connection(kombu.Connection("disque://:pw@h:x"))
    for options, word in (({"visibility_timeout": 2.5}, "visibility_timeout"),
                          ({"visibility_timeout": 10, "ttl": 10}, "below ttl"),
                          ({"replicate": 0}, "replicate"),
                          ({"add_timeout": 5, "socket_timeout": 5}, "socket_timeout")):
        with pytest.raises(TransportOptionError, match=word):
            settings_from_connection(kombu.Connection("disque://h", transport_options=options))


def test_a_celery_eta_becomes_a_delay_and_a_longer_ttl():
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    eta = (now + timedelta(seconds=2.7)).isoformat()
    assert eta_delay({"eta": eta}, now) == 2
    assert eta_delay({"eta": (now + timedelta(seconds=0.9)).isoformat()}, now) is None
    assert eta_delay({"eta": "2030-01-01T00:00:05"}, now) == 5         # naive: UTC
    assert eta_delay({"eta": "not a time"}, now) is None
    assert eta_delay({}, now) is None and eta_delay(None, now) is None
    assert job_ttl(86400, None) == 86400
    assert job_ttl(100, 3 * 86400) == 100 + 6 * 86400


def test_publish_get_ack_reject_requeue_purge_and_size_on_a_node(server3):
    client = Disque("127.0.0.1:%d" % server3.port)
    conn = kombu.Connection(broker_url(server3), transport_options={"visibility_timeout": 60})
    try:
        queue = conn.SimpleQueue("units")
        for n in range(3):
            queue.put({"n": n})
        assert queue.qsize() == client.qlen("units") == 3
        first = queue.get(timeout=2)
        job_id = first.delivery_info["disque_job_id"]
        info = client.show(job_id)
        assert (first.payload, info.state, info.retry, info.repl) == ({"n": 0}, "active", 60, 1)
        first.ack()
        assert client.show(job_id) is None                      # ACKJOB
        second = queue.get(timeout=2)
        second.reject()
        assert client.show(second.delivery_info["disque_job_id"]) is None   # dropped
        third = queue.get(timeout=2)
        third_id = third.delivery_info["disque_job_id"]
        third.requeue()
        info = client.show(third_id)
        assert (info.state, info.nacks) == ("queued", 1)        # NACK
        again = queue.get(timeout=2)
        assert again.delivery_info["disque_job_id"] == third_id
        assert again.delivery_info["redelivered"] is True
        again.ack()
        for n in range(5):
            queue.put(n)
        assert queue.clear() == 5                               # GETJOB NOHANG + FASTACK
        assert client.qlen("units") == 0
        wait_until(lambda: registered_jobs(server3) == 0, timeout=5,
                   message="purged or acked jobs are still registered")
        # a Celery eta 5.5 s ahead: DELAY 5, and a TTL of ttl + 2 * delay
        eta = (datetime.now(timezone.utc) + timedelta(seconds=5.5)).isoformat()
        queue.put({"later": True}, headers={"eta": eta})
        delayed = next(iter(client.scan_jobs(queue="units")))
        info = client.show(delayed)
        assert (info.state, info.delay, client.qlen("units")) == ("active", 5, 0)
        assert 86400 + 10 - 2 <= info.ttl <= 86400 + 10
        client.del_job(delayed)
        queue.close()
    finally:
        conn.close()
        client.close()


def test_a_held_message_keeps_its_lease_and_goes_back_with_enqueue_at_close(server3):
    """RETRY 2: a message the channel holds unacked stays active for 3 s, while a job taken
    by a bare GETJOB (no WORKING) is queued again within that time; closing the channel
    hands the held one back with ENQUEUE, without a copy and without a nack."""
    client = Disque("127.0.0.1:%d" % server3.port)
    conn = kombu.Connection(broker_url(server3), transport_options={"visibility_timeout": 2})
    try:
        queue = conn.SimpleQueue("held")
        queue.put("kept")
        queue.put("bare")
        message = queue.get_nowait()                # basic_get: GETJOB NOHANG COUNT 1
        held_id = message.delivery_info["disque_job_id"]
        bare = client.get_jobs("held", timeout=1)[0]
        assert bare.id != held_id
        holds_for(lambda: client.show(held_id).state == "active", 3.0,
                  "a held message was queued again")
        assert client.show(bare.id).state == "queued", "the control job was not requeued"
        client.ack_job(bare)
        queue.close()
        conn.close()
        info = client.show(held_id)
        assert (info.state, info.nacks, client.qlen("held")) == ("queued", 0, 1)
        assert registered_jobs(server3) == 1
    finally:
        conn.release()
        client.close()


def test_a_second_delivery_of_a_held_job_is_dropped(server3):
    """The server may queue a held job again (an old backlog: docs/client.md, "The worker
    runner"); here ENQUEUE does it. The channel that holds it drops the second delivery
    and keeps one lease."""
    client = Disque("127.0.0.1:%d" % server3.port)
    conn = kombu.Connection(broker_url(server3))
    try:
        queue = conn.SimpleQueue("twice")
        queue.put("once")
        first = queue.get_nowait()
        job_id = first.delivery_info["disque_job_id"]
        assert client.enqueue(job_id) == 1 and client.qlen("twice") == 1
        with pytest.raises(queue.Empty):
            queue.get_nowait()
        assert client.qlen("twice") == 0 and client.show(job_id).state == "active"
        first.ack()
        assert client.show(job_id) is None
        queue.close()
    finally:
        conn.close()
        client.close()


def test_held_jobs_renew_each_lease_once_from_their_own_thread():
    """HeldJobs without a server: one lease per job ID whatever the deliveries, the first
    WORKING within FIRST_WORKING_AFTER plus a keeper period, none after the release."""
    from disque.client import Job
    from disque.integrations.kombu_held import HeldJobs

    class Client:
        def __init__(self):
            self.working_calls = []

        def working(self, job):
            self.working_calls.append(job.id)
            return 10

    client = Client()
    held = HeldJobs(client)
    job = Job("q", "D-00000000-000000000000000000000000-0001", b"{}")
    try:
        assert held.hold("tag.1", job) is True
        assert held.hold("tag.2", job) is False         # a second delivery: dropped
        wait_until(lambda: client.working_calls, timeout=1.0, message="no WORKING")
        assert client.working_calls == [job.id]         # next one only after RETRY/2 = 5 s
        assert held.release("tag.2") is None and held.release("tag.1") is job
        assert held.hold("tag.3", job) is True and len(held) == 1
    finally:
        assert held.close() == [job]
    assert len(held) == 0


def test_a_job_that_is_not_a_kombu_message_goes_to_the_dead_letter_queue(server3):
    client = Disque("127.0.0.1:%d" % server3.port)
    conn = kombu.Connection(broker_url(server3))
    try:
        stray = client.add_job("mixed", b"not json at all")
        queue = conn.SimpleQueue("mixed")
        queue.put({"fine": True})
        assert queue.get(timeout=2).payload == {"fine": True}
        dead = client.get_jobs("mixed:dead", timeout=0)
        assert [job.body for job in dead] == [b"not json at all"]
        assert client.show(stray) is None               # acknowledged where it was
        queue.close()
    finally:
        conn.close()
        client.close()


def test_a_wrong_password_is_refused_with_one_clear_error(start_server):
    node = start_server(workers=1)
    node.execute("CONFIG", "SET", "requirepass", "s3cret")
    for password, reply in (("wrong", "invalid password"), (None, "NOAUTH")):
        conn = kombu.Connection(broker_url(node, password=password))
        try:
            with pytest.raises(disque_kombu.BrokerAuthenticationError,
                               match=r"Disque refused the password of disque://(:\*\*@)?"
                                     r"127.0.0.1:%d: .*%s" % (node.port, reply)):
                conn.connect()
        finally:
            conn.release()
    conn = kombu.Connection(broker_url(node, password="s3cret"))
    try:
        queue = conn.SimpleQueue("auth")
        queue.put("in")
        assert queue.get(timeout=2).payload == "in"
        queue.close()
    finally:
        conn.close()


# -- real workers on one node ------------------------------------------------------
def test_1000_tasks_each_run_once_on_one_node(server3, node_workers):
    app = node_workers.app(broker_url(server3))
    runs = run_once_each(node_workers, app, 1000, timeout=60)
    assert len(runs) == 1000
    pids = {row[3] for row in node_workers.events("run")}
    assert len(pids) >= 2, "the tasks did not spread over the pool"
    # every job acknowledged: nothing left on the node (fails if ACKJOB is never sent)
    wait_until(lambda: registered_jobs(server3) == 0, timeout=10,
               message="jobs left unacknowledged on the node")


def test_a_failing_task_is_retried_by_celery_then_fails(server3, node_workers):
    app = node_workers.app(broker_url(server3))
    node_workers.reset_record()
    result = app.send_task("t.flaky", args=(7,))
    wait_until(lambda: result.state == "FAILURE", timeout=20,
               message="the task never reached FAILURE")
    assert isinstance(result.result, RuntimeError) and "fails every time" in str(result.result)
    attempts = node_workers.events("attempt")
    assert [row[4]["retries"] for row in attempts] == [0, 1, 2]   # max_retries=2
    times = [row[2] for row in attempts]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(0.95 <= gap <= 3.0 for gap in gaps), gaps           # countdown=1
    wait_until(lambda: registered_jobs(server3) == 0, timeout=10,
               message="retried jobs left on the node")


def test_countdown_is_held_by_the_server_and_honoured(server3, node_workers):
    app = node_workers.app(broker_url(server3))
    client = Disque("127.0.0.1:%d" % server3.port)
    node_workers.reset_record()
    sent = {}
    for n, countdown in ((1, 2), (2, 3.5)):
        sent[n] = (time.time(), countdown)
        app.send_task("t.record", args=(n,), countdown=countdown)
    delays = sorted(client.show(j).delay for j in client.scan_jobs(queue="celery"))
    assert delays == [1, 3]         # floor of the time left when ADDJOB ran
    wait_until(lambda: len(node_workers.events("run")) == 2, timeout=10,
               message="the delayed tasks did not run")
    for _, n, ran_at, _, _ in node_workers.events("run"):
        sent_at, countdown = sent[n]
        assert countdown <= ran_at - sent_at <= countdown + 1.0, (n, ran_at - sent_at)
    client.close()


def test_tasks_of_one_group_run_one_at_a_time_in_order(server3, workers):
    """`apply_async(..., disque_group=key)` (docs/job-groups.md) with late acks: 6 keys x 10
    tasks on 2 workers of 2 processes; each key's tasks run in the order sent, never two at
    once, while the keys run in parallel."""
    conf = {"task_acks_late": True, "task_default_queue": "ordered"}
    procs = [workers.start(broker_url(server3), conf=conf) for _ in range(2)]
    workers.wait_ready(*procs)
    app = workers.app(broker_url(server3), **conf)
    keys, per_key = ["k%d" % i for i in range(6)], 10
    for key in keys:                    # a key's tasks one after the other in the queue
        for n in range(per_key):
            app.send_task("t.keyed", args=(key, n), disque_group=key)
    wait_until(lambda: len(workers.events("done")) >= len(keys) * per_key, timeout=60,
               message="the grouped tasks did not all run")
    rows = workers.events()             # in the order they were written (one append each)
    for key in keys:
        mine = [(row[0], row[1]) for row in rows if row[4].get("key") == key]
        assert mine == [(e, n) for n in range(per_key) for e in ("start", "done")], (key, mine)
    assert len({row[3] for row in workers.events("start")}) >= 2, "no parallelism at all"
    wait_until(lambda: registered_jobs(server3) == 0, timeout=10,
               message="grouped jobs left on the node")


def test_a_worker_killed_mid_task_lets_another_run_it(server3, workers):
    """acks_late, visibility_timeout 2: the task runs 3 RETRYs on its first worker without
    being delivered again (leases), then that worker is SIGKILLed and the other one runs
    it within about RETRY."""
    conf = {"task_acks_late": True, "task_default_queue": "late",
            "broker_transport_options": {"visibility_timeout": 2}}
    procs = [workers.start(broker_url(server3), conf=conf) for _ in range(2)]
    workers.wait_ready(*procs)
    app = workers.app(broker_url(server3), **conf)
    app.send_task("t.sleepy", args=(1, 60, 0.2))
    first = wait_until(lambda: workers.events("start"), timeout=10,
                       message="the task never started")[0]
    victim = next(p for p in procs if first[3] in workers.pids(p))
    survivor = next(p for p in procs if p is not victim)
    holds_for(lambda: len(workers.events("start")) == 1, 6.0,
              "delivered again while its worker lived")
    workers.kill(victim)
    killed_at = time.time()
    wait_until(lambda: workers.events("done"), timeout=15,
               message="the task of the killed worker never ran again")
    starts = workers.events("start")
    assert len(starts) == 2
    again = starts[1]
    assert again[4]["redelivered"] is True and again[3] in workers.pids(survivor)
    assert again[2] - killed_at <= 2 + 2.0, again[2] - killed_at
    wait_until(lambda: registered_jobs(server3) == 0, timeout=10,
               message="the redelivered job was not acknowledged")


# -- a 3-node cluster ------------------------------------------------------------------
def test_a_cluster_runs_1000_tasks_once_each_and_loses_none_when_a_node_dies(
        start_cluster, workers):
    """Producer on node 0 only, REPLICATE 2 (the default on a cluster); workers given the
    three nodes. Then 300 tasks with RETRY 2 and node 0 SIGKILLed while they run: every
    task completes at least once."""
    cluster = start_cluster(3)
    nodes = cluster.nodes
    procs = [workers.start(broker_url(nodes[1], nodes[2], nodes[0])),
             workers.start(broker_url(nodes[2], nodes[0], nodes[1]))]
    workers.wait_ready(*procs)
    app = workers.app(broker_url(nodes[0]))
    run_once_each(workers, app, 1000, timeout=90)
    # every job acknowledged on every node (fails if ACKJOB is never sent), then every copy
    # collected: a node listed twice in a copy used to keep its GC from ever ending
    wait_until(lambda: not unacknowledged_jobs(nodes), timeout=20,
               message="jobs left unacknowledged on the cluster")
    wait_until(lambda: all(registered_jobs(node) == 0 for node in nodes), timeout=30,
               message="acknowledged jobs never garbage-collected on the cluster")

    workers.reset_record()
    short = workers.app(broker_url(nodes[0]),
                        broker_transport_options={"visibility_timeout": 2})
    client = Disque("127.0.0.1:%d" % nodes[0].port)
    try:
        # held on their node until every one has been looked at (a loaded machine's workers
        # could otherwise finish the backlog first)
        client.pause("celery", "out", "bcast")
        for n in range(300):
            short.send_task("t.sleepy", args=(n, 0.02, 0.02))
        ids = set(client.scan_jobs(queue="celery"))
        assert len(ids) == 300 and {client.show(j).repl for j in ids} == {2}
        client.pause("celery", "none", "bcast")
    finally:
        client.close()
    wait_until(lambda: len(workers.events("done")) >= 30, timeout=30,
               message="the workers did not start on the backlog")
    cluster.kill(0)
    wait_until(lambda: {row[1] for row in workers.events("done")} >= set(range(300)),
               timeout=60, message="tasks were lost with the node")
    assert all(p.poll() is None for p in procs), "a worker died with the node"


def test_a_worker_whose_cluster_is_down_stops_on_sigterm_before_its_failover_timeout(
        start_cluster, workers):
    """Every node stopped under a consuming worker, then SIGTERM (a deploy, a scale-down):
    its fetch and its reconnects try each node once (Disque.consumer_failover), so Celery's
    warm shutdown ends it long before the 60 s of failover_timeout that a publish gets.
    Before, the fetch kept failing over for all of it, and the worker with it."""
    cluster = start_cluster(3)
    nodes = cluster.nodes
    conf = {"broker_transport_options": {"failover_timeout": 60}}
    proc = workers.start(broker_url(*nodes), conf=conf)
    workers.wait_ready(proc)
    for node in nodes:
        node.stop()
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: proc.poll() is not None, timeout=30,
               message="the worker did not stop on SIGTERM with its cluster down")
    assert proc.returncode == 0, workers.log(proc)
    assert "Warm shutdown" in workers.log(proc)


# -- failures a user sees ----------------------------------------------------------------
def test_a_bad_url_and_an_unreachable_cluster_give_one_clear_line(workers):
    lease = lease_port()            # a port nothing listens on
    try:
        bad = workers.start("disque://127.0.0.1:notaport")
        unreachable = workers.start("disque://:s3cret@127.0.0.1:%d" % lease.port,
                                    conf={"broker_transport_options": {"failover_timeout": 0.5}})
        assert bad.wait(40) != 0
        lines = [line for line in workers.log(bad).splitlines()
                 if "ERROR/" in line or "CRITICAL/" in line]
        assert len(lines) == 1 and "Unrecoverable error: ServerSpecError(" in lines[0], lines
        assert ("bad Disque broker URL disque://127.0.0.1:notaport: bad port 'notaport'"
                in lines[0])
        # a connection tries the nodes for at most MAX_BLOCK (Disque.consumer_failover)
        line = "consumer: Cannot connect to disque://:**@127.0.0.1:%d: no Disque node " \
               "answered within 0.25 s" % lease.port
        wait_until(lambda: line in workers.log(unreachable), timeout=40,
                   message="no 'Cannot connect' line")
        assert "s3cret" not in workers.log(unreachable)
        assert unreachable.poll() is None, "the worker gave up instead of retrying"
        with pytest.raises(ServerSpecError, match="bad port 'notaport'"):
            workers.app("disque://127.0.0.1:notaport").send_task("t.noop")
        producer = workers.app("disque://127.0.0.1:%d" % lease.port,
                               broker_transport_options={"failover_timeout": 0.5})
        with pytest.raises(OperationalError, match="no Disque node answered"):
            producer.send_task("t.noop", retry_policy={"max_retries": 1})
    finally:
        lease.release()
