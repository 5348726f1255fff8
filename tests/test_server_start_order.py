"""A start's order (docs/design.md, "A start's order"): the starter that forks the workers
is forked before the front-end imports its own parts, its event loop and ZeroMQ (for its
bus), so it imports the workers' modules while the front-end imports those; the workers
carry none of the front-end's modules, nor the front-end any of theirs.

Which extension modules a process holds is read from the kernel (/proc/<pid>/maps): asyncio's
C part, uvloop's loop and pyzmq's backend are shared objects, mapped by every process that
imported them.
"""
import re
import time

import psutil
import pytest

FRONT_END_ONLY = re.compile(r"_asyncio\.cpython|uvloop/loop\.cpython|zmq/backend/cython/_zmq\.")


def mapped_front_end_modules(pid):
    with open("/proc/%d/maps" % pid) as f:
        return sorted(set(m.group(0) for m in FRONT_END_ONLY.finditer(f.read())))


@pytest.mark.server
def test_workers_are_forked_before_the_front_end_imports_its_loop(start_server):
    srv = start_server(workers=2)
    assert srv.execute("PING") == b"PONG"
    front_end = psutil.Process(srv.proc.pid)
    workers = front_end.children()
    assert len(workers) == 2
    # the bus opens just after the loop starts (Node.open_bus): PING may be answered first
    deadline = time.monotonic() + 10
    while len(mapped_front_end_modules(front_end.pid)) < 3:
        assert time.monotonic() < deadline, "its loop and its bus"
        time.sleep(0.01)
    for w in workers:
        assert mapped_front_end_modules(w.pid) == [], w.name()
    # and the workers serve: a job added, fetched and acknowledged through each of them
    for q in ("q-a", "q-b", "q-c", "q-d"):
        jid = srv.execute("ADDJOB", q, "body", 0)
        got = srv.execute("GETJOB", "NOHANG", "FROM", q)
        assert got[0][1] == jid
        assert srv.execute("ACKJOB", jid) == 1


WORKER_ONLY = re.compile(r"_fast/(servedloop|shardcore|replcore)\.cpython")


@pytest.mark.server
@pytest.mark.parametrize("workers", [1, 3])
def test_a_starter_imports_the_workers_modules_and_the_workers_are_the_front_ends(
        start_server, workers):
    """The starter process imported what the workers run, forked them and exited: the
    front-end maps none of the workers' modules, and the workers, orphaned, are its own
    children (it is their subreaper), each with only its own name."""
    srv = start_server(workers=workers)
    assert srv.execute("PING") == b"PONG"
    front_end = psutil.Process(srv.proc.pid)
    children = front_end.children()
    assert sorted(p.name() for p in children) == ["disque-worker-%d" % k for k in range(workers)]
    with open("/proc/%d/maps" % front_end.pid) as f:
        assert WORKER_ONLY.search(f.read()) is None
    for w in children:
        with open("/proc/%d/maps" % w.pid) as f:
            assert len(set(WORKER_ONLY.findall(f.read()))) == 3, w.name()
    for q in ("q-a", "q-b", "q-c", "q-d"):
        jid = srv.execute("ADDJOB", q, "body", 0)
        assert srv.execute("GETJOB", "NOHANG", "FROM", q)[0][1] == jid
