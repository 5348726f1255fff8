"""A restarted node with AOF on serves no client before its files are loaded (issue 10
item 2, docs/persistence-startup.md): once PING answers +PONG, SHOW, CLUSTER NODES, HELLO
and the job commands work at once, as with the original, which reads its file before it
serves anyone. A large file is the exception both here and upstream: clients are then
served during the load with -LOADING (PING included), see
test_persistence_rewrite.py::test_clients_get_loading_while_a_large_file_loads."""
import os
import socket
import time

import pytest

import aof_helpers
from support.resp_client import RawConn
from support.jobs import addjob, queue_names
from support.resp_client import Err, NULL_ARRAY, Status, encode_command

LOADING = Err(b"LOADING Disque is loading the dataset in memory")


def first_replies(port, jid, deadline_s=60):
    """Connect as soon as the node accepts, send PING, SHOW, CLUSTER NODES and HELLO in
    one write and return the four replies of the first connection that got any."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with RawConn(port, timeout=30) as c:
                c.send(encode_command("PING") + encode_command("SHOW", jid)
                       + encode_command("CLUSTER", "NODES") + encode_command("HELLO"))
                return [c.read_parsed() for _ in range(4)]
        except (ConnectionError, socket.error):
            time.sleep(0.005)
    raise AssertionError("the node never accepted a connection")


@pytest.mark.server
def test_small_aof_clients_never_see_loading(start_server):
    srv = start_server(workers=2, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    jid = addjob(r, "small", b"one job", 0)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, wait=False)
    ping, shown, nodes, hello = first_replies(srv.port, jid)
    assert ping == Status(b"PONG"), ping
    assert shown is not None and shown != LOADING, shown
    assert dict(zip(shown[0::2], shown[1::2]))[b"state"] == b"active"
    assert type(nodes) is not Err and b"myself" in nodes, nodes
    assert type(hello) is list, hello
    srv.wait_ready()
    assert aof_helpers.info(srv)["loading"] == "0"


@pytest.mark.cluster
@pytest.mark.slow
def test_seven_nodes_killed_serve_show_and_cluster_nodes_as_soon_as_ping_answers(start_cluster):
    c = start_cluster(7, workers=1, extra_args=["--appendonly", "yes"])
    with RawConn(c[0].port) as r:
        jid = r.execute("ADDJOB", "boot-q", b"survivor", 5000, "REPLICATE", 3, "RETRY", 1)
        assert type(jid) is Status, jid
        jid = bytes(jid)
    for i in range(len(c)):
        c.kill(i)
    for node in c.nodes:
        node.spawn(port=node.port)
    holders = 0
    for node in c.nodes:
        ping, shown, nodes, hello = first_replies(node.port, jid)
        assert ping == Status(b"PONG"), (node.port, ping)
        assert shown != LOADING and nodes != LOADING and hello != LOADING, node.port
        assert type(nodes) is not Err and b"myself" in nodes, nodes
        assert type(hello) is list, hello
        holders += shown is not None
    # REPLICATE 3 makes at least 3 holders: a copy not confirmed within 50 ms gets one more
    # node (as in the original), so seven nodes that just started may make a fourth
    assert holders >= 3, "the job should be loaded by its holders, got %d" % holders
    for node in c.nodes:
        node.wait_ready()
    # the loaded copies are active: one of them requeues itself after RETRY and is delivered
    conns = [RawConn(node.port) for node in c.nodes]
    try:
        got = None
        deadline = time.monotonic() + 40
        while got is None and time.monotonic() < deadline:
            for r in conns:
                reply = r.execute("GETJOB", "NOHANG", "FROM", "boot-q")
                if reply != NULL_ARRAY:
                    got = (r, reply)
                    break
            else:
                time.sleep(0.05)
        assert got is not None, "the job was never queued again after the restart"
        r, [[queue, got_id, body]] = got
        assert (queue, got_id, body) == (b"boot-q", jid, b"survivor")
        assert r.execute("ACKJOB", jid) == 1
    finally:
        for r in conns:
            r.close()


@pytest.mark.server
def test_each_worker_reads_its_own_file_unless_written_by_another_number_of_workers(
        start_server):
    """A restart with as many workers as files lets each worker read only its own file; a
    file that holds jobs of another worker's slots (written with another --workers) is
    detected and every worker then reads every file: no job is lost either way."""
    srv = start_server(workers=2, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, queue_names("own", 12), 3)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)                          # same number of workers: own files only
    assert aof_helpers.registered_jobs(srv) == len(ids)
    assert "another number of workers" not in srv.log_text()
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, workers=3)               # files 0 and 1 of 2 workers, read by 3
    assert aof_helpers.registered_jobs(srv) == len(ids)
    assert "written by another number of workers: every worker reads every file" in srv.log_text()
    r = srv.raw()
    assert aof_helpers.enqueue_all(r, ids) == len(ids)
    assert set(aof_helpers.fetch_all(r, queue_names("own", 12), len(ids))) == set(ids)


@pytest.mark.server
def test_the_usual_restart_appends_to_the_files_it_loaded(start_server):
    """Each worker read its own file whole: it goes on appending to that file (same inode,
    nothing rewritten, PONG as soon as the load ends), and what it appends survives the
    next restart. With another number of workers the files are written afresh."""
    srv = start_server(workers=2, extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, queue_names("append", 8), 4)
    assert r.execute("DELJOB", next(iter(ids))) == 1        # a DELJOB record stays in the file
    aof_helpers.kill_node(srv)
    before = {k: os.stat(p) for k, p in aof_helpers.aof_files(srv).items()}
    assert len(before) == 2
    rewrites = srv.log_text().count("rewriting started")    # the first start's empty files
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == len(ids) - 1
    after = {k: os.stat(p) for k, p in aof_helpers.aof_files(srv).items()}
    assert {k: (s.st_ino, s.st_size) for k, s in after.items()} == \
        {k: (s.st_ino, s.st_size) for k, s in before.items()}
    assert srv.log_text().count("rewriting started") == rewrites
    r = srv.raw()
    later = aof_helpers.add_jobs(r, queue_names("append-later", 8), 2)
    grown = {k: os.stat(p).st_size for k, p in aof_helpers.aof_files(srv).items()}
    assert all(grown[k] > before[k].st_size for k in grown), grown
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    assert aof_helpers.registered_jobs(srv) == len(ids) - 1 + len(later)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, workers=3)                     # another layout: written afresh
    assert aof_helpers.registered_jobs(srv) == len(ids) - 1 + len(later)
    assert srv.log_text().count("rewriting started") == rewrites + 3
    assert sorted(aof_helpers.aof_files(srv)) == [0, 1, 2]


@pytest.mark.server
def test_shutdown_is_accepted_as_soon_as_the_start_up_rewrite_ends(start_server):
    """A start that writes every file afresh (here: another number of workers) serves
    clients once the new files are complete; SHUTDOWN then stops the node at once, not
    "Writing initial AOF" from a memory poll taken during the rewrite."""
    srv = start_server(workers=1, extra_args=["--appendonly", "yes"])
    r = srv.raw()
    ids = aof_helpers.add_jobs(r, queue_names("boot-rewrite", 20), 1500)
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv, workers=2)
    assert srv.log_text().count("rewriting started") >= 3       # the first start's + 2
    r = srv.raw()
    r.send(encode_command("SHUTDOWN"))
    assert aof_helpers.wait_exit(srv) == 0, srv.log_tail()
    assert "Writing initial AOF" not in srv.log_text()
    aof_helpers.restart(srv, workers=2)
    assert aof_helpers.registered_jobs(srv) == len(ids)
