"""Each exception class of disque.client raised by its real server error, with the blocking
and the asyncio client; and the connection errors: a node that does not answer, a bad
password."""
import os
import resource
import signal
import threading
import time

import pytest

import aof_helpers
from disque.client import Disque, errors
from support.admin import start_with_password
from support.clients import Api
from support.resp_client import Err, RawConn
from support.waits import wait_until


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


@pytest.fixture
def connect(kind):
    made = []

    def factory(srv, spec=None, **options):
        api = Api(kind, spec or "127.0.0.1:%d" % srv.port, **options)
        made.append(api)
        return api
    yield factory
    for api in made:
        api.close()


def test_errors_of_the_job_commands(server1, connect):
    api = connect(server1)
    with pytest.raises(errors.NoReplicationError, match="NOREPL Not enough reachable nodes"):
        api.add_job("e", b"x", replicate=3)
    with pytest.raises(errors.BadIdError):
        api.ack_job("D-not-an-id")
    with pytest.raises(errors.NoJobError):
        api.working("D-00000000-" + "A" * 24 + "-05a1")
    api.add_job("e", b"x", maxlen=1)
    with pytest.raises(errors.MaxLenError):
        api.add_job("e", b"x", maxlen=1)
    api.pause("e", "in")
    with pytest.raises(errors.PausedError):
        api.add_job("e", b"x")
    with pytest.raises(errors.NoProtoError):
        api.execute_command("HELLO", "4")
    with pytest.raises(errors.ResponseError) as info:
        api.execute_command("NOSUCHCOMMAND")
    assert info.value.code == "ERR" and "unknown command" in info.value.message


def test_toolate_after_half_the_ttl(server1, connect):
    api = connect(server1)
    api.add_job("late", b"x", ttl=1, retry=1)
    job = api.get_job("late", timeout=1)
    refused = []

    def postpone():
        try:
            api.working(job)
        except errors.TooLateError as exc:
            refused.append(exc)
        return refused
    wait_until(postpone, timeout=3, message="WORKING still accepted after half the TTL")


def test_out_of_memory(start_server, connect):
    srv = start_server(extra_args=["--maxmemory", "1"])
    api = connect(srv)
    refused = []

    def add():
        try:
            api.add_job("oom", b"x" * 1000)
        except errors.OutOfMemoryError as exc:
            refused.append(exc)
        return refused
    wait_until(add, timeout=5, message="the node never refused a job with -OOM")


def test_leaving_node_refuses_a_blocking_getjob(start_server, connect):
    srv = start_server()
    api = connect(srv)
    api.execute_command("CLUSTER", "LEAVING", "yes")
    with pytest.raises(errors.LeavingError):
        api.execute_command("GETJOB", "FROM", "q")


def test_authentication(start_server, connect):
    srv = start_with_password(start_server, "s3cret")
    with pytest.raises(errors.AuthenticationError):
        connect(srv).ping()
    with pytest.raises(errors.AuthenticationError):
        connect(srv, password="wrong").ping()
    assert connect(srv, password="s3cret").ping() is True
    assert connect(srv, "disque://:s3cret@127.0.0.1:%d" % srv.port).ping() is True


def test_misconf_while_the_aof_cannot_be_written(start_server, connect):
    srv = start_server(extra_args=["--appendonly", "yes"])
    api = connect(srv)
    api.add_job("full", b"x")
    [worker] = srv.worker_pids()
    hard = resource.prlimit(worker, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(worker, resource.RLIMIT_FSIZE, (int(aof_helpers.info(srv)["aof_current_size"]) + 10, hard))
    with pytest.raises(errors.MisconfError):
        for _ in range(10):
            api.add_job("full", b"y" * 200)
    resource.prlimit(worker, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))


def test_a_loading_node_counts_as_unavailable(start_server, connect):
    """A restarting node answers -LOADING while a large AOF loads: the client treats it as a
    node that does not answer (docs/client.md, "Failover"). It moves to another node when
    it knows one; alone, a command waits for the load within failover_timeout, and past
    that deadline raises UnavailableError caused by the LoadingError."""
    srv = start_server(extra_args=["--appendonly", "yes"])
    node_id = srv.execute("CLUSTER", "MYID")
    aof_helpers.kill_node(srv)
    aof_helpers.write_big_aof(aof_helpers.aof_files(srv)[0], 300000, node_id)
    aof_helpers.restart(srv, wait=False)

    def loading():
        try:
            with RawConn(srv.port, timeout=5) as c:
                return c.execute("PING") == Err(b"LOADING Disque is loading the dataset in memory")
        except OSError:
            return False
    wait_until(loading, timeout=60, interval=0.005, message="the node never served -LOADING")
    hurried = connect(srv, failover_timeout=0.05)
    with pytest.raises(errors.UnavailableError) as caught:
        hurried.qlen("q")
    assert isinstance(caught.value.__cause__, errors.LoadingError), caught.value.__cause__
    patient = connect(srv, failover_timeout=60)
    assert patient.qlen("q") == 0           # once loaded: the caller never saw -LOADING
    assert not loading()
    srv.wait_ready()


def test_worker_restarted_error(start_server):
    """A command held by the front-end when its worker dies (connection-affinity no)."""
    srv = start_server(workers=1, extra_args=["--connection-affinity", "no"])
    client = Disque("127.0.0.1:%d" % srv.port)
    caught = []

    def block():
        try:
            client.execute_command("GETJOB", "TIMEOUT", 0, "FROM", "blocked")
        except errors.DisqueError as exc:
            caught.append(exc)
    thread = threading.Thread(target=block, daemon=True)
    thread.start()
    wait_until(lambda: client.info("clients")["blocked_clients"] == 1, timeout=5)
    [worker] = srv.worker_pids()
    os.kill(worker, signal.SIGKILL)
    srv._tracked.pop(worker, None)
    thread.join(10)
    client.close()
    assert caught and type(caught[0]) is errors.WorkerRestartedError, caught
    wait_until(lambda: len(srv.worker_pids()) == 1, timeout=15)
    srv.record_descendants()


def test_no_node_answers_within_the_deadline(connect, start_server):
    srv = start_server()
    srv.stop()
    api = connect(srv, failover_timeout=0.5, connect_timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(errors.UnavailableError, match="no Disque node answered within 0.5 s"):
        api.ping()
    assert 0.4 < time.monotonic() - t0 < 5
