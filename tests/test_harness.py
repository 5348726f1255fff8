"""disque.harness, the one node harness of the tests, bench/ and faults/: real nodes started
and stopped by PID, a cluster joined, a failed start reported with its log, port pairs."""
import os
import socket
import sys

import psutil
import pytest

from disque.harness import Cluster, Node, NodeStartError, disque_argv, lease_port
from disque.harness.node import checkout_env
from disque.harness.ports import BUS_OFFSET, PORT_MIN
from support.server import REPO_ROOT


def node(tmp_path, name, *extra, workers=1):
    workdir = tmp_path / name
    workdir.mkdir()
    return Node(lambda port: disque_argv(port, workers, *extra, python=sys.executable),
                cwd=workdir, env=checkout_env(REPO_ROOT), label=name)


def gone(pids):
    return [pid for pid in pids if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.server
def test_a_node_starts_answers_and_stops_with_every_pid(tmp_path):
    n = node(tmp_path, "one", workers=2)
    try:
        n.start(children=2)
        assert n.call("PING") == b"PONG"
        assert len(n.worker_pids()) == 2
        pids = n.tracked_pids()
        assert len(pids) >= 3                   # front-end and its two workers
    finally:
        rc = n.stop()
    assert rc == 0 and not n.left_behind
    assert not gone(pids)


@pytest.mark.cluster
def test_a_cluster_of_three_joins_and_stops_with_every_pid(tmp_path):
    c = Cluster(node(tmp_path, f"n{i}", "--cluster-node-timeout", 2000) for i in range(3))
    try:
        c.start(children=1).join()
        for n in c.nodes:
            info = n.call("CLUSTER", "INFO").decode()
            assert "cluster_reachable_nodes:2" in info
        pids = [pid for n in c.nodes for pid in n.tracked_pids()]
        assert len(pids) >= 6
    finally:
        c.stop()
    assert not gone(pids)
    assert not any(n.left_behind for n in c.nodes)


@pytest.mark.server
def test_a_node_that_fails_to_start_raises_with_its_logs_last_line(tmp_path):
    n = node(tmp_path, "bad", "--no-such-option", "yes")
    with pytest.raises(NodeStartError) as failure:
        n.start(timeout=30)
    last_line = n.log_text().strip().splitlines()[-1]
    assert last_line and last_line in str(failure.value)
    assert not gone(n.tracked_pids())


@pytest.mark.server
def test_a_node_killed_outright_leaves_no_process(tmp_path):
    n = node(tmp_path, "killed", workers=2)
    try:
        n.start(children=2)
        pids = n.tracked_pids()
        n.kill()
        assert not n.is_alive()
        assert not gone(pids)
    finally:
        n.stop()


@pytest.mark.unit
def test_port_picking_skips_a_port_whose_bus_port_is_taken(monkeypatch):
    """In a range of 20 ports whose bus ports are all taken but one, the lease is that one."""
    from disque.harness import ports
    low = PORT_MIN + 7 * 20 * (os.getpid() % 19)        # apart from a parallel run's range
    held, free_port = [], None
    try:
        for port in range(low, low + 20):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                s.close()               # taken by someone else: as good
                continue
            if free_port is None:
                s.close()
                if ports.pair_is_free(port):
                    free_port = port    # the one pair left free
                    continue
                s = socket.socket()
                s.bind(("127.0.0.1", port + BUS_OFFSET))
            held.append(s)
        assert free_port is not None
        monkeypatch.setattr(ports, "PORT_MIN", low)
        monkeypatch.setattr(ports, "PORT_MAX", low + 19)
        with lease_port() as lease:
            assert lease.port == free_port
    finally:
        for s in held:
            s.close()
