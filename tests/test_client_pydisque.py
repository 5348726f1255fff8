"""The old Disque client from PyPI, ``pydisque`` (0.1.5, its last release), against our server.

pydisque builds its connections itself, as ``redis.Redis(host, port)`` in
``Client.connect()``, and takes no connection options.  redis-py >= 8 speaks RESP3 by
default: every new connection starts with ``HELLO 3``.  Upstream Disque answers that
with an arity error (its HELLO takes no argument), so ``pip install pydisque`` (which
pulls the newest redis-py) does not connect to upstream Disque either.  What a pydisque
user does today is make redis-py speak RESP2, as redis-py < 8 did by default (the
README's "pass protocol=2"). Two ways, both plain user moves: install ``redis<8``
next to pydisque (checked by hand with redis-py 7.4.1: pydisque works unchanged), or,
since pydisque offers no way to pass connection options, make ``redis.Redis`` default to
``protocol=2``. The ``pd`` fixture below does the latter for the test's duration (and
nothing when the installed redis-py already defaults to RESP2), so the tests run in the
project's own virtualenv.

``test_pydisque_out_of_the_box`` runs pydisque with redis-py exactly as installed.
It is an expected failure only while the server answers ``HELLO 3`` with an error (no
RESP3 handshake yet); once the handshake exists it is an ordinary test.
"""

import re
import threading
import time

import pytest
import redis
import redis.connection

import pydisque.client
from pydisque.client import Client


from support.slots import queues_on_distinct_workers
from support.jobs import JOB_ID_RE, SHOW_FIELDS
from support.ports import lease_port
from support.resp_client import Err






def redis_default_protocol() -> int:
    """The RESP version redis-py uses when the caller does not say."""
    return redis.connection.Connection(host="127.0.0.1").protocol


class Resp2Redis(redis.Redis):
    """``redis.Redis`` whose default is RESP2, as it was before redis-py 8."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("protocol", 2)
        super().__init__(*args, **kwargs)


def skip_unless_available(server, *argv):
    reply = server.execute(*argv)
    if type(reply) is Err and b"not available" in reply:
        pytest.skip(f"server: {bytes(reply).decode()} (pydisque's {argv[0]} call)")


@pytest.fixture
def pd(server, monkeypatch):
    """A connected pydisque Client speaking RESP2 (see the module docstring)."""
    if redis_default_protocol() != 2:
        monkeypatch.setattr(pydisque.client.redis, "Redis", Resp2Redis)
    clients = []

    def make(nodes=None):
        c = Client(nodes or [f"127.0.0.1:{server.port}"])
        c.connect()
        clients.append(c)
        return c

    make.server = server
    yield make
    for c in clients:
        for node in c.nodes.values():
            if node is not None:
                node.connection.close()


def node_id_of(server) -> bytes:
    return server.execute("HELLO")[1]


# ---------------------------------------------------------------------------
# the round trip: add / get / ack / show / qlen
# ---------------------------------------------------------------------------


def test_pydisque_roundtrip(pd, server):
    c = pd()
    assert c.connected_node is not None
    assert c.connected_node.node_id == node_id_of(server)
    assert c.connected_node.port == server.port

    for queue in queues_on_distinct_workers("pyd-rt"):
        job_id = c.add_job(queue, "hello world", timeout=100)
        assert isinstance(job_id, bytes) and JOB_ID_RE.match(job_id), job_id
        assert c.qlen(queue) == 1

        shown = c.show(job_id, return_dict=True)
        assert list(shown) == SHOW_FIELDS
        assert shown[b"id"] == job_id
        assert shown[b"queue"] == queue.encode()
        assert shown[b"state"] == b"queued"
        assert shown[b"repl"] == 1
        assert shown[b"body"] == b"hello world"
        assert shown[b"nacks"] == 0 and shown[b"additional-deliveries"] == 0
        flat = c.show(job_id)
        assert isinstance(flat, list) and len(flat) == 30 and flat[0::2] == SHOW_FIELDS

        # pydisque names its tuple (job_id, queue_name, job) but unpacks the server's
        # [queue, id, body] in order, so the tuple really is (queue, id, body)
        jobs = c.get_job([queue], timeout=1000)
        assert jobs == [(queue.encode(), job_id, b"hello world")]
        assert c.qlen(queue) == 0
        assert c.show(job_id, return_dict=True)[b"state"] == b"active"

        assert c.ack_job(job_id) is None        # pydisque drops ACKJOB's reply
        assert c.show(job_id) is None           # REPLICATE 1: gone right after the ACK
        assert c.qlen(queue) == 0
        assert server.execute("ACKJOB", job_id) == 0


def test_pydisque_add_job_options_and_multi_queue_get(pd):
    c = pd()
    queues = queues_on_distinct_workers("pyd-opts")
    ids = {}
    for n, q in enumerate(queues):
        ids[q] = c.add_job(q, f"body-{n}".encode(), timeout=0, replicate=1, retry=7, ttl=3600,
                           maxlen=10, asynchronous=True)
        shown = c.show(ids[q], return_dict=True)
        assert shown[b"retry"] == 7
        assert 3590 <= shown[b"ttl"] <= 3600
        assert ids[q].endswith(b"-003d")           # 60 minutes, odd: at-least-once
    delayed = c.add_job(queues[0], "later", delay=30)
    assert c.show(delayed, return_dict=True)[b"state"] == b"active"
    assert c.qlen(queues[0]) == 1                  # the delayed job is not queued yet

    got = c.get_job(list(queues), count=10, nohang=True)
    assert sorted(got) == sorted((q.encode(), ids[q], f"body-{n}".encode())
                                 for n, q in enumerate(queues))
    assert c.get_job(list(queues), nohang=True) == []      # *-1 -> []
    assert c.get_job(list(queues), timeout=50) == []       # timed out
    c.ack_job(*ids.values(), delayed)
    for jid in [*ids.values(), delayed]:
        assert c.show(jid) is None

    c.add_job(queues[1], "a", maxlen=1)
    with pytest.raises(redis.ResponseError, match="^MAXLEN"):
        c.add_job(queues[1], "b", maxlen=1)
    with pytest.raises(redis.ResponseError, match="^BADID"):
        c.show("not-a-job-id")


def test_pydisque_blocking_get_job(pd):
    consumer, producer = pd(), pd()
    queue = "pyd-block"
    added = []

    def produce():
        time.sleep(0.2)
        added.append(producer.add_job(queue, "wake up"))

    t = threading.Thread(target=produce)
    t.start()
    try:
        t0 = time.monotonic()
        jobs = consumer.get_job([queue, "pyd-block-other"], timeout=10000)
        elapsed = time.monotonic() - t0
    finally:
        t.join(10)
    assert jobs == [(queue.encode(), added[0], b"wake up")]
    assert elapsed < 5.0
    consumer.ack_job(added[0])


@pytest.mark.parametrize("server", ["server1"], indirect=True)
def test_pydisque_connects_to_the_first_live_node(pd, server):
    """Node choice is pydisque's own logic: one server suffices (redis-py retries the
    refused connection a few times with back-off, which takes a few seconds)."""
    dead = lease_port(exclude={server.port})
    try:
        c = pd([f"127.0.0.1:{dead.port}", f"127.0.0.1:{server.port}"])
    finally:
        dead.release()
    assert c.connected_node.port == server.port
    assert c.nodes[f"127.0.0.1:{dead.port}"] is None
    assert c.hello()[1] == node_id_of(server)


# ---------------------------------------------------------------------------
# pydisque's other calls
# ---------------------------------------------------------------------------


def test_pydisque_hello_and_info(pd, server):
    c = pd()
    hello = c.hello()
    assert hello[0] == 1
    assert re.fullmatch(rb"[0-9a-f]{40}", hello[1])
    assert hello[2] == [hello[1], b"127.0.0.1", str(server.port).encode(), b"1"]
    info = c.info()                      # redis-py parses INFO into a dict
    assert isinstance(info, dict)
    assert info["disque_version"] == "1.0-rc1"
    assert info["tcp_port"] == server.port
    assert "registered_jobs" in info


def test_pydisque_nack_working_withcounters(pd):
    c = pd()
    queue = "pyd-nack"
    jid = c.add_job(queue, "payload", retry=60)
    [(q, got_id, body)] = c.get_job([queue])
    assert (q, got_id, body) == (queue.encode(), jid, b"payload")
    assert c.working(jid) == 60               # WORKING answers the job's RETRY
    assert c.nack_job(jid) is None            # requeued at once, nacks + 1
    assert c.qlen(queue) == 1
    jobs = c.get_job([queue], withcounters=True)
    assert jobs == [(queue.encode(), jid, b"payload", 1, 0)]
    c.nack_job(jid)
    jobs = c.get_job([queue], withcounters=True, timeout=1000)
    assert jobs == [(queue.encode(), jid, b"payload", 2, 0)]
    assert c.show(jid, return_dict=True)[b"nacks"] == 2
    c.ack_job(jid)
    assert c.show(jid) is None


def test_pydisque_qpeek_qstat_enqueue_dequeue_deljob_fastack(pd):
    c = pd()
    queue = "pyd-peek"
    ids = [c.add_job(queue, f"j{i}") for i in range(3)]
    assert c.qpeek(queue, 2) == [[queue.encode(), ids[0], b"j0"], [queue.encode(), ids[1], b"j1"]]
    assert c.qpeek(queue, -1) == [[queue.encode(), ids[2], b"j2"]]
    assert c.qpeek(queue, 0) == []
    assert c.qpeek("pyd-peek-missing", 5) == []

    stat = c.qstat(queue, return_dict=True)
    assert list(stat) == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                          b"import-rate", b"jobs-in", b"jobs-out", b"pause"]
    assert stat[b"name"] == queue.encode() and stat[b"len"] == 3
    assert stat[b"jobs-in"] == 3 and stat[b"jobs-out"] == 0 and stat[b"pause"] == b"none"
    assert c.qstat("pyd-peek-missing") is None            # *-1

    assert c.dequeue(ids[0], ids[1]) == 2
    assert c.qlen(queue) == 1
    assert c.show(ids[0], return_dict=True)[b"state"] == b"active"
    assert c.enqueue(ids[0]) == 1
    assert c.enqueue(ids[0]) == 0                          # already queued
    assert c.qlen(queue) == 2
    assert c.del_job(ids[0]) == 1
    assert c.del_job(ids[0]) == 0
    assert c.fast_ack(ids[1], ids[2]) is None              # pydisque drops the count
    assert c.qlen(queue) == 0
    for jid in ids:
        assert c.show(jid) is None


def test_pydisque_pause(pd, server):
    skip_unless_available(server, "PAUSE", "pyd-pause", "state")
    c = pd()
    queue = "pyd-pause"
    assert c.pause(queue, kw_state=True) == b"none"
    assert c.pause(queue, kw_in=True) == b"in"
    with pytest.raises(redis.ResponseError, match="^PAUSED"):
        c.add_job(queue, "refused")
    assert c.pause(queue, kw_out=True, kw_state=True) == b"out"
    jid = c.add_job(queue, "accepted")
    assert c.get_job([queue], nohang=True) == []          # paused in output
    assert c.pause(queue, kw_none=True) == b"none"
    assert c.get_job([queue], nohang=True) == [(queue.encode(), jid, b"accepted")]
    c.ack_job(jid)


def test_pydisque_qscan(pd, server):
    skip_unless_available(server, "QSCAN")
    c = pd()
    queues = queues_on_distinct_workers("pyd-qscan")
    for q in queues:
        c.add_job(q, "x")
    cursor, names = c.qscan(busyloop=True)
    assert cursor == b"0"
    assert set(queues) <= {n.decode() for n in names}
    cursor, names = c.qscan(busyloop=True, minlen=2)
    assert cursor == b"0" and not set(queues) & {n.decode() for n in names}


def test_pydisque_jscan(pd, server):
    skip_unless_available(server, "JSCAN")
    c = pd()
    queues = queues_on_distinct_workers("pyd-jscan")
    ids = {c.add_job(q, "x") for q in queues for _ in range(2)}
    found = set()
    cursor = 0
    for _ in range(1000):
        cursor, batch = c.jscan(cursor=cursor, count=5)
        found.update(batch)
        if cursor == b"0":
            break
    assert ids <= found
    cursor, batch = c.jscan(busyloop=True, queue=queues[0], state=["queued"])
    assert cursor == b"0" and len(batch) == 2 and set(batch) <= ids


# ---------------------------------------------------------------------------
# pydisque exactly as installed (no RESP2 default)
# ---------------------------------------------------------------------------


def test_pydisque_out_of_the_box(server):
    """``pip install pydisque`` and go: redis-py's default protocol, nothing patched."""
    proto = redis_default_protocol()
    if proto == 3:
        reply = server.execute("HELLO", "3")
        if type(reply) is Err:
            pytest.xfail(f"redis-py {redis.__version__} opens every connection with HELLO 3 "
                         f"and the server answers -{bytes(reply).decode()} (no RESP3 "
                         f"handshake yet; upstream Disque has none either)")
    c = Client([f"127.0.0.1:{server.port}"])
    try:
        c.connect()
        assert c.connected_node.node_id == node_id_of(server)
        queue = "pyd-ootb"
        jid = c.add_job(queue, "plain", timeout=100)
        assert JOB_ID_RE.match(jid)
        assert c.qlen(queue) == 1
        shown = c.show(jid, return_dict=True)
        assert shown[b"id"] == jid and shown[b"state"] == b"queued"
        assert c.get_job([queue], timeout=1000) == [(queue.encode(), jid, b"plain")]
        c.ack_job(jid)
        assert c.show(jid) is None
        assert c.qlen(queue) == 0
    finally:
        if c.connected_node is not None:
            c.connected_node.connection.close()
