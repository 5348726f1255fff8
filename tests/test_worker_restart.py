"""A dead worker is not a dead node (issue 13): kill -9 of one worker process under load.

The front-end starts a new process for the same slots; the node keeps serving the other
workers' queues meanwhile; with the AOF the new process reloads its file, without it the
jobs with copies on other nodes come back through the cluster's requeue; a client blocked
on the dead worker's queue gets an error (never a hang); INFO counts the restart."""
import os
import signal
import threading
import time

import pytest

from support.info import parse_info
from support.resp_client import RawConn, Status
from support.slots import queues_on_distinct_workers
from support.waits import wait_until
from support.jobs import addjob
from support.resp_client import Err, encode_command

pytestmark = [pytest.mark.server, pytest.mark.slow]


def worker_pid(srv, k):
    text = srv.execute("INFO", "workers").decode()
    for line in text.splitlines():
        if line.startswith("worker%d:" % k):
            return int(line.split("pid=")[1].split(",")[0])
    raise AssertionError("no worker%d in INFO workers" % k)


def kill_worker(srv, k):
    """SIGKILL worker k; the harness stops tracking it (the front-end starts another)."""
    pid = worker_pid(srv, k)
    os.kill(pid, signal.SIGKILL)
    srv._tracked.pop(pid, None)
    return pid


def server_info(srv):
    return parse_info(srv.execute("INFO", "server"))


class Producer(threading.Thread):
    """ADDJOB in a loop on one queue; records the acknowledged IDs and the errors."""

    def __init__(self, port, queue, *opts):
        super().__init__(daemon=True)
        self.port, self.queue, self.opts = port, queue, opts
        self.acked, self.errors = [], []
        self.stop = threading.Event()

    def run(self):
        r = RawConn(self.port, timeout=10)
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                reply = r.execute("ADDJOB", self.queue, b"j%d" % i, 5000, *self.opts)
            except (OSError, ConnectionError, TimeoutError) as e:
                self.errors.append(repr(e))
                r.close()
                r = RawConn(self.port, timeout=10)
                continue
            if type(reply) is Status:
                self.acked.append(bytes(reply))
            else:
                self.errors.append(bytes(reply))
        r.close()


def drain(port, queue, expect, timeout=20):
    got = set()
    deadline = time.monotonic() + timeout
    with RawConn(port) as r:
        while time.monotonic() < deadline and not expect <= got:
            jobs = r.execute("GETJOB", "TIMEOUT", 200, "COUNT", 500, "FROM", queue)
            if not jobs:
                continue
            ids = [j[1] for j in jobs]
            got.update(ids)
            r.execute("ACKJOB", *ids)
    return got


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_worker_kill9_with_aof_loses_nothing_and_the_node_keeps_serving(start_server, fsync):
    srv = start_server(workers=2, extra_args=["--appendonly", "yes", "--appendfsync", fsync])
    q_dead, q_live = queues_on_distinct_workers("wk", nworkers=2)     # worker 0, worker 1
    # RETRY 1: as upstream, jobs loaded from the AOF are queued again after their retry
    prods = [Producer(srv.port, q_dead, "RETRY", 1), Producer(srv.port, q_live, "RETRY", 1)]
    for p in prods:
        p.start()
    wait_until(lambda: all(len(p.acked) > 200 for p in prods), timeout=20,
               message="producers too slow")
    # a consumer blocked on an empty queue of the dying worker
    q_block = queues_on_distinct_workers("blk", nworkers=2)[0]
    blocked = RawConn(srv.port, timeout=10)
    blocked.send(encode_command("GETJOB", "TIMEOUT", 0, "FROM", q_block))
    time.sleep(0.1)
    live_before = len(prods[1].acked)
    pid0 = kill_worker(srv, 0)
    t_kill = time.monotonic()
    # the blocked consumer gets an error, not a hang
    reply = blocked.read_parsed(timeout=5)
    assert type(reply) is Err and b"worker process died" in reply, reply
    blocked.close()
    wait_until(lambda: len(prods[1].acked) > live_before + 50, timeout=5,
               message="the other worker's queue stopped being served")
    wait_until(lambda: int(server_info(srv)["worker_restarts"]) == 1 and
               int(server_info(srv)["worker_restarting"]) == 0, timeout=15,
               message="the worker was not restarted")
    wait_until(lambda: worker_pid(srv, 0) != pid0, timeout=5)
    time.sleep(0.3)
    for p in prods:
        p.stop.set()
    for p in prods:
        p.join(15)
    back = time.monotonic() - t_kill
    info = server_info(srv)
    print(f"\nappendfsync {fsync}: slots unavailable "
          f"{info['worker_last_restart_unavailable_ms']} ms; acked {len(prods[0].acked)} + "
          f"{len(prods[1].acked)}; errors on the dead worker's queue: {len(prods[0].errors)}; "
          f"back within {back:.2f}s")
    assert srv.all_alive()
    assert not prods[1].errors, prods[1].errors[:3]
    # every acknowledged job is there: in memory for worker 1, reloaded from the AOF for 0
    # (everysec may lose the last second of writes on a crash of the whole machine, not on
    # a kill of the process: the kernel still holds what was written).
    for p in prods:
        got = drain(srv.port, p.queue, set(p.acked))
        lost = set(p.acked) - got
        assert not lost, f"{len(lost)} acknowledged jobs lost on {p.queue}"
    for err in prods[0].errors:
        # a connection the front-end held gets the error reply; one the dead worker served
        # itself (connection-affinity) is closed with it
        if isinstance(err, bytes):
            assert err.startswith(b"ERR worker process died"), err
        else:
            assert "Error(" in err, err


def test_in_flight_replies_keep_their_order(start_server):
    """Pipelined commands to both workers when one dies: every reply arrives, in order."""
    srv = start_server(workers=2)
    q_dead, q_live = queues_on_distinct_workers("ord", nworkers=2)
    with RawConn(srv.port, timeout=10) as r:
        blocked_cmd = encode_command("GETJOB", "TIMEOUT", 0, "FROM", q_dead)
        r.send(blocked_cmd)             # blocks: the client's next commands wait behind it
        r.send(encode_command("ADDJOB", q_live, b"x", 0) + encode_command("PING"))
        time.sleep(0.2)
        kill_worker(srv, 0)
        first = r.read_parsed(timeout=5)
        assert type(first) is Err, first
        second = r.read_parsed(timeout=5)
        assert type(second) is Status and len(second) == 40, second
        assert r.read_parsed(timeout=5) == Status(b"PONG")
    wait_until(lambda: int(server_info(srv)["worker_restarting"]) == 0, timeout=10)
    assert srv.execute("ADDJOB", q_dead, b"y", 0) is not None


@pytest.mark.cluster
def test_worker_kill9_without_aof_jobs_come_back_from_their_copies(start_cluster):
    c = start_cluster(2, workers=2)
    q_dead = queues_on_distinct_workers("nc", nworkers=2)[0]
    with RawConn(c[0].port) as r:
        ids = {addjob(r, q_dead, b"n%d" % i, 5000, "REPLICATE", 2, "RETRY", 1)
               for i in range(50)}
    kill_worker(c[0], 0)
    wait_until(lambda: int(server_info(c[0])["worker_restarts"]) == 1 and
               int(server_info(c[0])["worker_restarting"]) == 0, timeout=15)
    # node 1's copies are requeued after RETRY: consume on either node
    got = drain(c[1].port, q_dead, ids, timeout=20)
    got |= drain(c[0].port, q_dead, ids - got, timeout=5)
    assert ids <= got, f"{len(ids - got)} jobs lost"
    assert c[0].all_alive() and c[1].all_alive()


def test_a_worker_stopped_alone_by_sigterm_is_replaced(start_server):
    """A worker exits 0 only when a signal told it to stop; with no stop of the node after
    it (ORDERLY_EXIT_GRACE_S), it is a dead worker like any other."""
    srv = start_server(workers=2)
    q0 = queues_on_distinct_workers("term", nworkers=2)[0]
    blocked = RawConn(srv.port, timeout=10)
    blocked.send(encode_command("GETJOB", "TIMEOUT", 0, "FROM", q0))
    wait_until(lambda: int(srv.info_fields("clients")["blocked_clients"]) >= 1, 5)
    pid0 = worker_pid(srv, 0)
    os.kill(pid0, signal.SIGTERM)
    srv._tracked.pop(pid0, None)
    reply = blocked.read_parsed(timeout=5)
    assert type(reply) is Err and b"worker process died" in reply, reply
    blocked.close()
    wait_until(lambda: int(server_info(srv)["worker_restarts"]) == 1 and
               int(server_info(srv)["worker_restarting"]) == 0, timeout=15,
               message="the worker was not replaced")
    assert worker_pid(srv, 0) != pid0
    with RawConn(srv.port) as r:
        jid = addjob(r, q0, b"after")
        assert r.execute("QLEN", q0) == 1, jid
    assert "Worker 0 (pid %d) died (code 0)" % pid0 in srv.log_text()


def test_sigterm_to_the_whole_process_group_stops_the_node_without_replacing_workers(
        start_server):
    """systemd (KillMode=control-group) and pkill signal every process at once: the
    workers stop first, and the front-end must stop too, not start new ones."""
    srv = start_server(workers=2)
    pids = [worker_pid(srv, k) for k in range(2)]
    for pid in pids + [srv.pid]:        # the workers first, as pkill's order has it
        os.kill(pid, signal.SIGTERM)
    rc = srv.wait_exit(10)
    assert rc == 0, f"exit code {rc}; log:\n{srv.log_tail()}"
    log_text = srv.log_text()
    assert "starting a new one" not in log_text, log_text
    assert log_text.count("Worker 0 ready") == log_text.count("Worker 1 ready") == 1, log_text
    assert not srv.surviving_descendants(timeout=5)
