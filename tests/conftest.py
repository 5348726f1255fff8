"""Fixtures and hooks for the suite; the machinery lives in tests/support/ (docs/tests.md).

Fixtures: ``server1`` / ``server3`` / ``server3zmq`` (module scoped: 1 worker, 3 workers,
3 workers over ZeroMQ), ``server`` (parametrized over the three), ``start_server``
(function scoped factory for custom options), ``start_cluster`` (several nodes).
Module-scoped servers are reset with ``DEBUG FLUSHALL`` before each test that uses them,
checked for liveness after it, and restarted if a test killed or crashed them. Every
process a fixture starts is stopped by PID at teardown, and the test fails if one survives.

Tests import the helpers from ``support.<module>``, never from this file.
"""
from __future__ import annotations

import pytest

from support.bytecode import compile_package
from support.markers import assign_markers, make_scheduler, order
from support.cluster import CLUSTER_NODE_TIMEOUT, DisqueCluster
from support.server import START_TIMEOUT, DisqueServer, stop_servers


def pytest_configure(config):
    compile_package()


def pytest_collection_modifyitems(config, items):
    assign_markers(items)
    order(items)


def pytest_xdist_make_scheduler(config, log):
    """Whole files per xdist worker, the Spark and fault-harness files as one group each
    (support/markers.py)."""
    return make_scheduler(config, log)


_MODULE_SERVER_FIXTURES = ("server1", "server3", "server3zmq", "server")


def _make_module_server(tmp_path_factory, workers, extra_args=()):
    srv = DisqueServer(workers=workers, extra_args=extra_args,
                       workdir=tmp_path_factory.mktemp(f"disque-w{workers}-"))
    srv.start()
    return srv


@pytest.fixture(scope="module")
def server1(tmp_path_factory):
    srv = _make_module_server(tmp_path_factory, 1)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server3(tmp_path_factory):
    srv = _make_module_server(tmp_path_factory, 3)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server3zmq(tmp_path_factory):
    """3 workers reached over ZeroMQ instead of the default socketpair link."""
    srv = _make_module_server(tmp_path_factory, 3, ("--worker-link", "zmq"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=["server1", "server3", "server3zmq"], ids=["w1", "w3", "w3zmq"])
def server(request):
    """A module-scoped server, flushed: 1 worker, 3 workers, or 3 workers over ZeroMQ."""
    return request.getfixturevalue(request.param)


@pytest.fixture(autouse=True)
def _module_server_hygiene(request):
    """Before a test: make sure the shared servers it uses are alive and empty.
    After it: close its clients and fail the test if it killed the server."""
    used = []
    for name in ("server1", "server3", "server3zmq"):
        if name in request.fixturenames:
            used.append(request.getfixturevalue(name))
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        if srv not in used:
            used.append(srv)
    for srv in used:
        if not srv.all_alive():
            srv.restart()
        srv.flush()
    yield
    for srv in used:
        srv.close_clients()
    dead = [srv for srv in used if not srv.all_alive()]
    for srv in dead:
        tail = srv.log_tail()
        srv.restart()
        pytest.fail(f"{srv!r} (or one of its workers) died during the test; log tail:\n{tail}",
                    pytrace=False)


@pytest.fixture
def start_server(tmp_path):
    """Factory: start_server(workers=1, extra_args=(), wait=True, port=None) -> DisqueServer.

    Every server started through it is stopped at teardown, by PID, and the test
    fails if any of its processes survive."""
    started: list[DisqueServer] = []
    counter = [0]

    def factory(workers=1, extra_args=(), wait=True, start_timeout=START_TIMEOUT, port=None):
        counter[0] += 1
        srv = DisqueServer(workers=workers, extra_args=extra_args,
                           workdir=tmp_path / f"srv{counter[0]}", start_timeout=start_timeout)
        started.append(srv)
        if wait and port is None:
            srv.start()
        else:
            srv.spawn(port=port)
            if wait:
                srv.wait_ready()
        return srv

    yield factory
    stop_servers(started)


@pytest.fixture
def start_cluster(start_server):
    """Factory: start_cluster(n, workers=2, extra_args=(), join=True) -> DisqueCluster."""
    def factory(n, workers=2, extra_args=(), join=True, node_timeout=CLUSTER_NODE_TIMEOUT):
        c = DisqueCluster(start_server, n, workers=workers, extra_args=extra_args,
                          node_timeout=node_timeout)
        if join:
            c.join()
        return c
    return factory
