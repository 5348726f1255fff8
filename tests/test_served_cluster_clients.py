"""Producers and consumers on a node of a cluster, served by the worker that owns their
queue (docs/design.md "Producers waiting for copies"): an ADDJOB that waits for its copies
blocks its connection in that worker as it does in the front-end, every way a wait can end
is the same with `connection-affinity yes` and `no`, and a GETJOB answered at once stays
with the worker and still asks the other nodes for jobs.

A node's incoming bus traffic is cut with DEBUG BUS DROP-IN to hold an ADDJOB in its wait:
the copy it sends is dropped, so no GOTJOB comes until the bus is restored (the originator
sends the copy again every 50 ms). The node timeout is long so that the cut node stays
reachable meanwhile.
"""
import time

import pytest

from support.info import parse_info
from support.resp_client import NULL_ARRAY, Err, encode_command
from support.slots import queues_on_distinct_workers
from support.waits import wait_until

MODES = ["yes", "no"]
Q0, Q1 = queues_on_distinct_workers("prod", nworkers=2)
NODE_TIMEOUT_MS = 20000


@pytest.fixture(params=MODES, ids=["affinity", "no-affinity"])
def pair(request, start_cluster):
    """Two joined 2-worker nodes with connection-affinity on or off."""
    cluster = start_cluster(2, workers=2, node_timeout=NODE_TIMEOUT_MS,
                            extra_args=("--connection-affinity", request.param))
    cluster.affinity = request.param == "yes"
    return cluster


def served(node):
    return int(node.info_fields("server")["connections_served_by_workers"])


def settle_producer(cluster, conn):
    """Make `conn` a producer of Q0 on node 0; with affinity on, wait until Q0's worker
    serves it."""
    node = cluster.nodes[0]
    before = served(node)
    for _ in range(40):
        assert conn.execute("ADDJOB", Q0, "settle", 0, "REPLICATE", 2).startswith(b"D-")
        if not cluster.affinity or served(node) > before:
            break
    assert served(node) == before + 1 if cluster.affinity else served(node) == 0


def registered_jobs(node):
    return int(node.info_fields("jobs")["registered_jobs"])


def test_a_served_producer_gets_its_copies(pair):
    a, b = pair.nodes
    c = a.raw()
    settle_producer(pair, c)
    jid = c.execute("ADDJOB", Q0, "copied", 0, "REPLICATE", 2)
    assert jid.startswith(b"D-")
    assert b.raw().execute("SHOW", jid) is not None     # the copy is there when it replies
    assert c.execute("ADDJOB", Q0, "async", 0, "REPLICATE", 2, "ASYNC").startswith(b"D-")
    # a queue of the other worker goes back to the front-end, in order
    assert c.execute("ADDJOB", Q1, "other", 0, "REPLICATE", 2).startswith(b"D-")
    err = c.execute("ADDJOB", Q0, "x", 0, "REPLICATE", 3)
    assert isinstance(err, Err) and err.startswith(b"NOREPL"), err


def test_commands_behind_a_waiting_addjob_run_after_it(pair):
    a, b = pair.nodes
    c = a.raw()
    settle_producer(pair, c)
    assert b.execute("DEBUG", "BUS", "DROP-IN") == b"OK"
    sent = time.time()
    c.send(encode_command("ADDJOB", Q0, "held", 300, "REPLICATE", 2)
           + encode_command("ADDJOB", Q0, "behind", 0, "REPLICATE", 1))
    first = c.read_parsed(timeout=5)
    assert isinstance(first, Err) and first.startswith(b"NOREPL Timeout"), first
    behind = c.read_parsed(timeout=5)
    assert behind.startswith(b"D-"), behind
    show = c.execute("SHOW", behind)
    ctime_s = show[show.index(b"ctime") + 1] / 1e9
    # the second ADDJOB ran once the first had timed out, not when it arrived
    assert ctime_s >= sent + 0.25, (ctime_s - sent)
    assert b.execute("DEBUG", "BUS", "RESTORE") == b"OK"
    if pair.affinity:
        assert served(a) == 1, "the waiting producer was handed back"


def test_a_producer_gone_while_waiting_drops_its_copies(pair):
    a, b = pair.nodes
    c = a.raw()
    settle_producer(pair, c)
    before = registered_jobs(a)
    assert b.execute("DEBUG", "BUS", "DROP-IN") == b"OK"
    c.send(encode_command("ADDJOB", Q0, "orphan", 0, "REPLICATE", 2))
    wait_until(lambda: registered_jobs(a) == before + 1, message="the ADDJOB never started")
    c.abort()
    wait_until(lambda: registered_jobs(a) == before,
               message="the job of a vanished producer was kept")
    assert b.execute("DEBUG", "BUS", "RESTORE") == b"OK"


def test_a_worker_stopping_while_a_producer_waits_exits_cleanly(pair):
    """The front-end killed (-9) while a producer waits for its copies: the workers stop
    (PR_SET_PDEATHSIG) and write what is ready, without a traceback. The long fault run
    found one: the place of the waiting reply was joined with the ready ones as bytes."""
    a, b = pair.nodes
    c = a.raw()
    settle_producer(pair, c)
    before = registered_jobs(a)
    assert b.execute("DEBUG", "BUS", "DROP-IN") == b"OK"
    c.send(encode_command("ADDJOB", Q0, "waiting", 0, "REPLICATE", 2) + encode_command("PING"))
    wait_until(lambda: registered_jobs(a) == before + 1, message="the ADDJOB never started")
    a.proc.kill()
    wait_until(lambda: all("Worker %d stopped" % w in a.log_text() for w in (0, 1))
               or "Traceback" in a.log_text(), timeout=15, message="the workers did not stop")
    assert "Traceback" not in a.log_text(), a.log_tail()
    assert b.execute("DEBUG", "BUS", "RESTORE") == b"OK"


def test_a_waiting_producer_is_not_idle(pair):
    a, b = pair.nodes
    c, idle = a.raw(), a.raw()
    settle_producer(pair, c)
    settle_producer(pair, idle)
    assert a.execute("CONFIG", "SET", "timeout", "1") == b"OK"
    assert b.execute("DEBUG", "BUS", "DROP-IN") == b"OK"
    c.send(encode_command("ADDJOB", Q0, "patient", 0, "REPLICATE", 2))
    # the idle connection is closed within about 2 s by whoever serves it; the producer,
    # idle as long, waits on
    assert idle.read_until_closed(timeout=5) == (b"", True)
    assert not c.has_data(0), "the waiting producer got a reply or was closed"
    assert b.execute("DEBUG", "BUS", "RESTORE") == b"OK"
    jid = c.read_parsed(timeout=5)
    assert jid.startswith(b"D-"), jid


def test_a_recall_while_waiting_keeps_the_order(pair):
    a, b = pair.nodes
    c = a.raw()
    settle_producer(pair, c)
    queued = c.execute("QLEN", Q0)
    assert b.execute("DEBUG", "BUS", "DROP-IN") == b"OK"
    c.send(encode_command("ADDJOB", Q0, "recalled", 0, "REPLICATE", 2)
           + encode_command("QLEN", Q0))
    wait_until(lambda: registered_jobs(a) == queued + 1, message="the ADDJOB never started")
    # every connection goes back to the front-end (affinity off): this one after its reply
    assert a.execute("CONFIG", "SET", "connection-affinity", "no") == b"OK"
    assert b.execute("DEBUG", "BUS", "RESTORE") == b"OK"
    jid = c.read_parsed(timeout=5)
    assert jid.startswith(b"D-"), jid
    assert c.read_parsed(timeout=5) == queued + 1       # QLEN ran after the ADDJOB
    assert c.execute("PING") == b"PONG"
    wait_until(lambda: served(a) == 0)


def test_a_served_consumer_fetches_and_asks_the_other_nodes(pair):
    a, b = pair.nodes
    c = a.raw()
    settle_producer(pair, c)
    jid = c.execute("ADDJOB", Q0, "mine", 0, "REPLICATE", 2)
    got = c.execute("GETJOB", "NOHANG", "COUNT", 100, "FROM", Q0)
    ids = [job[1] for job in got]
    assert jid in ids, got
    assert c.execute("ACKJOB", *ids) == len(ids)
    assert c.execute("GETJOB", "NOHANG", "FROM", Q0) is NULL_ARRAY
    # a job only node b holds: the NOHANG GETJOBs that find nothing here ask for it
    theirs = b.execute("ADDJOB", Q0, "theirs", 0, "REPLICATE", 1)

    def fetched():
        reply = c.execute("GETJOB", "NOHANG", "FROM", Q0)
        return reply if reply is not NULL_ARRAY else None
    got = wait_until(fetched, timeout=10, message="the job never came over from node b")
    assert got[0][1] == theirs
    if pair.affinity:
        assert served(a) == 1, "a GETJOB answered at once sent the connection back"


def test_many_pipelines_of_replicated_addjob_never_stall(start_cluster):
    """24 connections on 3 nodes, each pipelining batches of 200 ADDJOB ... REPLICATE 2 to
    the worker that serves it. A batch's ADDJOB waits for its copy with the rest of the batch
    held behind it; the GOTJOB that ends the wait and more of the batch can be read in the
    same pass. The held commands must run first and must not be replaced by the newer ones
    when those wait in turn: they were, and every producer stalled after a few thousand jobs
    (docs/design.md, "Producers waiting for copies")."""
    import threading

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    c = start_cluster(3, workers=2)
    per_conn, batch, conns = 1000, 200, 24
    errors, done = [], [0] * conns

    def produce(k):
        # no retry: a batch sent twice would hide a stall behind duplicates
        r = redis.Redis(port=c.nodes[k % 3].port, socket_timeout=30, retry=Retry(NoBackoff(), 0))
        try:
            for _ in range(per_conn // batch):
                pipe = r.pipeline(transaction=False)
                for _ in range(batch):
                    pipe.execute_command("ADDJOB", "many%d" % (k % 5), b"x" * 200, 0, "REPLICATE", 2)
                pipe.execute()
                done[k] += batch
        except Exception as e:      # noqa: BLE001 - the test reports it
            errors.append((k, repr(e)))
        finally:
            r.close()

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors[:3]
    assert sum(done) == conns * per_conn
    r = c.nodes[0].client()
    assert sum(r.execute_command("QLEN", "many%d" % q, "CLUSTER") for q in range(5)) == conns * per_conn
    served = sum(int(parse_info(n.execute("INFO", "server"))["connection_handoffs"]) for n in c.nodes)
    assert served >= conns          # the producers were served by their workers
