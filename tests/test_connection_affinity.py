"""Connections served by the worker that owns their queues (docs/design.md "Connections
served by their worker"): every feature a connection has must still work once a worker
serves it, and the same tests pass with `connection-affinity no` (the old path).

A connection counts as handed over when INFO server says so (connections_served_by_workers);
with affinity off the same steps run through the front-end and the assertions are the same.
"""
import os
import signal
import socket
import time

import pytest

from support.resp_client import NULL_ARRAY, RawConn, encode_command
from support.info import parse_info
from support.slots import queues_on_distinct_workers
from support.waits import wait_until

MODES = ["yes", "no"]
Q0, Q1 = queues_on_distinct_workers("aff", nworkers=2)      # one queue on each worker


@pytest.fixture(params=MODES, ids=["affinity", "no-affinity"])
def node(request, start_server):
    """A 2-worker node with connection-affinity on or off."""
    srv = start_server(workers=2, extra_args=("--connection-affinity", request.param))
    srv.affinity = request.param == "yes"
    return srv


def served(srv, via=None):
    """How many connections the node's workers serve (INFO server), asked on `via` or on
    a new connection."""
    if via is not None:
        return int(parse_info(via.execute("INFO", "server"))["connections_served_by_workers"])
    return int(srv.info_fields("server")["connections_served_by_workers"])


def settle(srv, conn, queue=Q0, via=None):
    """Make `conn` a connection of one worker; with affinity on, wait until that worker
    serves it (a connection that came back for a node command needs a few commands)."""
    before = served(srv, via)
    for _ in range(40):
        conn.execute("QLEN", queue)
        if not srv.affinity or served(srv, via) > before:
            break
    if srv.affinity:
        assert served(srv, via) > before, "the connection was never handed over"
    else:
        assert served(srv, via) == 0


def addjob(conn, queue, body="body", *opts):
    reply = conn.execute("ADDJOB", queue, body, 0, *opts)
    assert isinstance(reply, bytes), reply
    return reply


def test_handed_over_and_back_in_order(node):
    c = node.raw()
    settle(node, c)
    # one pipeline mixing both workers and node commands: replies in request order
    cmds = [("ADDJOB", Q0, "a", 0), ("PING",), ("ADDJOB", Q1, "b", 0), ("QLEN", Q0),
            ("QLEN", Q1), ("ECHO", "e"), ("ADDJOB", Q0, "c", 0), ("QLEN", Q0)]
    c.send(b"".join(encode_command(*cmd) for cmd in cmds))
    replies = [c.read_parsed() for _ in cmds]
    assert replies[1] == b"PONG"
    assert replies[3] == 1 and replies[4] == 1 and replies[5] == b"e" and replies[7] == 2
    info = node.info_fields("server")
    if node.affinity:
        assert int(info["connection_handoffs"]) >= 1 and int(info["connection_handbacks"]) >= 1
    else:
        assert int(info["connection_handoffs"]) == 0


def test_partial_command_survives_the_hand_over(node):
    c = node.raw()
    settle(node, c)
    wire = encode_command("ADDJOB", Q1, "x" * 5000, 0) + encode_command("QLEN", Q1)
    for i in range(0, len(wire), 700):          # another worker's command, in pieces
        c.send(wire[i:i + 700])
        time.sleep(0.002)
    assert c.read_parsed().startswith(b"D-")
    assert c.read_parsed() == 1


def test_a_big_first_addjob_goes_to_its_worker_before_its_body(node):
    """A new connection's ADDJOB whose body is still arriving is handed to the queue's
    worker then, which reads the body from the socket itself: the front-end neither reads
    the body nor forwards it (docs/design.md, "Connections served by their worker")."""
    body = os.urandom(3 << 20)
    wire = encode_command("ADDJOB", Q1, body, 0)
    before = served(node)
    c = node.raw()
    c.send(wire[:100_000])
    if node.affinity:
        wait_until(lambda: served(node) > before, message="not handed over before its body")
    c.send(wire[100_000:])
    jid = c.read_parsed(timeout=10)
    assert jid.startswith(b"D-")
    assert c.execute("QLEN", Q1) == 1
    got = node.raw().execute("GETJOB", "FROM", Q1)
    assert got[0][1] == jid and got[0][2] == body
    assert served(node) > before if node.affinity else served(node) == 0


def test_big_bodies_read_by_a_serving_worker_in_any_pieces(node):
    """A served connection's big argument is read straight into its object
    (docs/design.md, "A big argument is read into its object"): bodies over the threshold
    and under it, sent in uneven pieces (one cut between a body and its CRLF), with a
    command behind each in the same write, all come back whole and in order."""
    c = node.raw()
    settle(node, c, Q1)
    bodies = [os.urandom(n) for n in (32 * 1024, 5 << 20, 40_000, 32 * 1024 - 1, 1 << 20)]
    wire = b"".join(encode_command("ADDJOB", Q1, b, 0) + encode_command("QLEN", Q1)
                    for b in bodies)
    first_crlf = wire.index(bodies[0]) + len(bodies[0]) + 1      # between CR and LF
    cuts = sorted({first_crlf, 7, 33_000, 700_000, 3_000_001, len(wire) - 3})
    start = 0
    for cut in cuts + [len(wire)]:
        c.send(wire[start:cut])
        start = cut
        time.sleep(0.002)
    ids = []
    for i in range(len(bodies)):
        jid = c.read_parsed(timeout=20)
        assert jid.startswith(b"D-"), jid
        assert c.read_parsed() == i + 1
        ids.append(jid)
    got = c.execute("GETJOB", "COUNT", len(bodies), "FROM", Q1)
    assert [(j[1], j[2]) for j in got] == list(zip(ids, bodies))
    assert served(node) >= 1 if node.affinity else served(node) == 0


def test_blocking_getjob_timeout_disconnect_and_other_worker(node):
    c = node.raw()
    settle(node, c)
    t0 = time.monotonic()
    assert c.execute("GETJOB", "TIMEOUT", 300, "FROM", Q0) is NULL_ARRAY
    assert time.monotonic() - t0 >= 0.25
    # blocked on both workers' queues; a producer on another connection wakes it
    c.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", Q0, Q1))
    p = node.raw()
    jid = addjob(p, Q1, "wake")
    got = c.read_parsed(timeout=5)
    assert got[0][1] == jid
    # a consumer that vanishes while blocked loses nothing
    gone = node.raw()
    settle(node, gone)
    gone.send(encode_command("GETJOB", "FROM", Q0))
    wait_until(lambda: int(node.info_fields("clients")["blocked_clients"]) >= 1)
    gone.close()
    wait_until(lambda: int(node.info_fields("clients")["blocked_clients"]) == 0)
    jid2 = addjob(p, Q0, "kept")
    assert p.execute("GETJOB", "NOHANG", "FROM", Q0)[0][1] == jid2


def handbacks(srv):
    return int(srv.info_fields("server")["connection_handbacks"])


def test_a_blocking_getjob_stays_with_its_worker(node):
    """A served connection's GETJOB with no job parks in its worker: no hand-back, and the
    commands pipelined behind it run once it is answered, in order."""
    c = node.raw()
    settle(node, c)
    before = handbacks(node)
    c.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", Q0) + encode_command("QLEN", Q0))
    wait_until(lambda: int(node.info_fields("clients")["blocked_clients"]) >= 1)
    p = node.raw()
    jid = addjob(p, Q0, "wake")
    assert c.read_parsed(timeout=5)[0][1] == jid
    assert c.read_parsed(timeout=5) == 0
    assert c.execute("GETJOB", "TIMEOUT", 50, "FROM", Q0) is NULL_ARRAY
    assert handbacks(node) == before        # c never went back to the front-end


def test_a_parked_getjob_with_the_largest_timeout_waits_and_is_served(node):
    """TIMEOUT 2^63 - 1 is valid (SPEC 3.2): the deadline past the clock's range is never,
    not an overflow (ConsumersCore.nothing_fetched)."""
    c = node.raw()
    settle(node, c)
    c.send(encode_command("GETJOB", "TIMEOUT", 2 ** 63 - 1, "FROM", Q0))
    wait_until(lambda: int(node.info_fields("clients")["blocked_clients"]) >= 1)
    jid = addjob(node.raw(), Q0, "wake")
    assert c.read_parsed(timeout=5)[0][1] == jid
    assert c.execute("PING") == b"PONG"


def test_a_parked_getjob_recalled_by_monitor_still_gets_its_job(node):
    c = node.raw()
    settle(node, c)
    c.send(encode_command("GETJOB", "TIMEOUT", 10000, "FROM", Q0) + encode_command("PING"))
    wait_until(lambda: int(node.info_fields("clients")["blocked_clients"]) >= 1)
    m = node.raw()
    m.send(encode_command("MONITOR"))
    assert m.read_parsed() == b"OK"
    wait_until(lambda: served(node) == 0)       # MONITOR takes every connection back
    wait_until(lambda: int(node.info_fields("clients")["blocked_clients"]) >= 1)
    jid = addjob(node.raw(), Q0, "after the recall")
    assert c.read_parsed(timeout=5)[0][1] == jid
    assert c.read_parsed(timeout=5) == b"PONG"


def test_nack_with_delay_is_served_by_its_worker(node):
    """NACK ... DELAY is checked by the dispatch kernel and run where the job is, like any
    NACK: no hand-back; a bad DELAY gets the front-end's error."""
    c = node.raw()
    settle(node, c)
    jid = addjob(c, Q0, "later")
    assert c.execute("GETJOB", "NOHANG", "FROM", Q0)[0][1] == jid
    before = handbacks(node)
    assert c.execute("NACK", jid, "DELAY", 1) == 1
    assert c.execute("QLEN", Q0) == 0                  # it waits its DELAY first
    assert handbacks(node) == before
    wait_until(lambda: c.execute("QLEN", Q0) == 1, timeout=5)
    assert c.execute("NACK", jid, "DELAY", -1).startswith(b"ERR DELAY")


def test_monitor_sees_served_connections(node):
    c = node.raw()
    settle(node, c)
    m = node.raw()
    assert m.execute("MONITOR") == b"OK"
    wait_until(lambda: served(node) == 0, message="MONITOR did not take connections back")
    addjob(c, Q0, "watched")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if b'"watched"' in m.read_reply(timeout=5):
            break
    else:
        pytest.fail("MONITOR did not show the ADDJOB")


def test_client_list_kill_and_name(node):
    c = node.raw()
    assert c.execute("CLIENT", "SETNAME", "worker-conn") == b"OK"
    settle(node, c)
    admin = node.raw()
    listing = admin.execute("CLIENT", "LIST").decode()
    assert "name=worker-conn" in listing
    cid = c.execute("CLIENT", "ID")
    settle(node, c)
    assert admin.execute("CLIENT", "KILL", "ID", cid) == 1
    assert c.read_until_closed(timeout=5)[1]
    wait_until(lambda: "name=worker-conn" not in admin.execute("CLIENT", "LIST").decode())
    assert served(node) == 0


def test_client_pause_holds_served_connections(node):
    c = node.raw()
    settle(node, c)
    admin = node.raw()
    t0 = time.monotonic()
    admin.execute("CLIENT", "PAUSE", 500)
    assert addjob(c, Q0, "after-pause").startswith(b"D-")
    assert time.monotonic() - t0 >= 0.4


def test_client_reply_off_on_a_served_connection(node):
    c = node.raw()
    settle(node, c)
    c.send(encode_command("CLIENT", "REPLY", "OFF") + encode_command("ADDJOB", Q0, "quiet", 0)
           + encode_command("CLIENT", "REPLY", "ON"))
    assert c.read_parsed() == b"OK"             # CLIENT REPLY ON's, the only reply
    assert c.execute("QLEN", Q0) == 1


def test_slowlog_and_commandstats_count_served_commands(node):
    admin = node.raw()
    # every command is logged, the polls below too: room for all of them
    admin.execute("CONFIG", "SET", "slowlog-max-len", 100000)
    admin.execute("CONFIG", "SET", "slowlog-log-slower-than", 0)
    admin.execute("SLOWLOG", "RESET")
    admin.execute("CONFIG", "RESETSTAT")
    c = node.raw()
    settle(node, c)
    for i in range(5):
        addjob(c, Q0, "s%d" % i)
    c.execute("QLEN", Q0)

    def counted():
        stats = node.info_fields("commandstats")
        return "calls=5," in str(stats.get("cmdstat_addjob", ""))
    wait_until(counted, message="commandstats did not count the served ADDJOBs")

    def logged():
        entries = admin.execute("SLOWLOG", "GET", 100000)
        return sum(1 for e in entries if e[3][0].lower() == b"addjob") >= 5
    wait_until(logged, message="SLOWLOG did not get the served ADDJOBs")
    total = int(node.info_fields("stats")["total_commands_processed"])
    assert total >= 6


def test_config_set_is_in_effect_for_served_connections_once_it_replies(node):
    """CONFIG SET replies only after the workers applied a value they serve connections with:
    a served command sent right after the OK already sees it (here: is logged or not; 10 s
    as the threshold logs nothing)."""
    admin = node.raw()
    admin.execute("CONFIG", "SET", "slowlog-max-len", 100000)
    admin.execute("SLOWLOG", "RESET")
    c = node.raw()
    settle(node, c)
    for i in range(20):
        assert admin.execute("CONFIG", "SET", "slowlog-log-slower-than", 0) == b"OK"
        addjob(c, Q0, "on%d" % i)
        assert admin.execute("CONFIG", "SET", "slowlog-log-slower-than", 10_000_000) == b"OK"
        addjob(c, Q0, "off%d" % i)

    def bodies():
        entries = admin.execute("SLOWLOG", "GET", 100000)
        return {e[3][2] for e in entries if e[3][0].lower() == b"addjob"}
    wait_until(lambda: len(bodies()) >= 20, message="SLOWLOG did not get the ADDJOBs sent after OK")
    assert bodies() == {b"on%d" % i for i in range(20)}


def test_maxclients_counts_served_connections(node):
    admin = node.raw()
    admin.execute("CONFIG", "SET", "maxclients", 3)
    a, b = node.raw(), node.raw()
    settle(node, a, via=admin)
    settle(node, b, queue=Q1, via=admin)
    third = RawConn(node.port)
    try:
        data, closed = third.read_until_closed(timeout=5)
        assert b"max number of clients reached" in data
    finally:
        third.close()


def test_idle_timeout_closes_served_connections(node):
    admin = node.raw()
    admin.execute("CONFIG", "SET", "timeout", 1)
    c = node.raw()
    settle(node, c)
    data, closed = c.read_until_closed(timeout=6)
    assert closed, "the idle connection was not closed"


def test_output_buffer_limit_applies_to_served_connections(node):
    admin = node.raw()
    admin.execute("CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0")
    c = node.raw()
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    cid = c.execute("CLIENT", "ID")
    settle(node, c)
    addjob(c, Q0, "x" * 100000)
    c.send(encode_command("QPEEK", Q0, 1) * 400)       # 40 MB of replies, never read
    wait_until(lambda: "id=%d " % cid not in admin.execute("CLIENT", "LIST").decode(),
               timeout=10, message="the slow reader was not closed")
    assert admin.execute("PING") == b"PONG"
    assert admin.execute("QLEN", Q0) == 1


def test_requirepass_change_needs_auth_on_served_connections(node):
    c = node.raw()
    settle(node, c)
    admin = node.raw()
    admin.execute("CONFIG", "SET", "requirepass", "s3cret")
    reply = c.call("ADDJOB", Q0, "x", 0)
    assert reply.startswith(b"-NOAUTH"), reply
    assert c.execute("AUTH", "s3cret") == b"OK"
    assert c.call("ADDJOB", Q0, "x", 0).startswith(b"+D-")
    admin.execute("AUTH", "s3cret")
    admin.execute("CONFIG", "SET", "requirepass", "")


def test_resp3_nulls_from_a_served_connection(node):
    c = node.raw()
    c.call("HELLO", 3)
    settle(node, c)
    assert c.call("GETJOB", "NOHANG", "FROM", Q0) == b"_\r\n"
    jid = addjob(c, Q0, "r3")
    assert c.call("QLEN", Q0) == b":1\r\n"
    assert jid in c.call("GETJOB", "NOHANG", "FROM", Q0)


@pytest.mark.parametrize("mode", MODES)
def test_aof_written_before_a_served_reply(start_server, mode):
    node = start_server(workers=2, extra_args=("--connection-affinity", mode,
                                                "--appendonly", "yes"))
    node.affinity = mode == "yes"
    c = node.raw()
    settle(node, c)
    jid = addjob(c, Q0, "durable")
    aof = b""
    for root, _dirs, files in os.walk(node.workdir):
        for f in files:
            if "aof" in f:
                with open(os.path.join(root, f), "rb") as fh:
                    aof += fh.read()
    assert jid in aof, "the reply left before its AOF record was written"


def test_replicated_addjob_from_a_served_connection(start_cluster):
    cluster = start_cluster(2, workers=2)
    a = cluster.nodes[0]
    c = a.raw()
    c.execute("QLEN", Q0)
    jid = c.execute("ADDJOB", Q0, "copied", 0, "REPLICATE", 2)
    assert isinstance(jid, bytes) and jid.startswith(b"D-"), jid
    other = cluster.nodes[1].raw()
    wait_until(lambda: other.execute("SHOW", jid) is not None)


def test_oom_on_a_served_connection(node):
    c = node.raw()
    settle(node, c)
    admin = node.raw()
    admin.execute("CONFIG", "SET", "maxmemory", 1)

    def refused():
        reply = c.call("ADDJOB", Q0, "x", 0)
        if reply.startswith(b"+"):
            c.execute("DELJOB", reply[1:-2].decode())
            return False
        return reply.startswith(b"-OOM")
    wait_until(refused, message="ADDJOB was not refused over maxmemory")
    admin.execute("CONFIG", "SET", "maxmemory", 0)


@pytest.mark.parametrize("mode", MODES)
def test_shutdown_loses_no_acknowledged_job(start_server, mode):
    node = start_server(workers=2, extra_args=("--connection-affinity", mode, "--appendonly",
                                                "yes", "--appendfsync", "always"))
    node.affinity = mode == "yes"
    c = node.raw()
    settle(node, c)
    ids = [addjob(c, Q0, "j%d" % i) for i in range(50)]
    c.send(encode_command("SHUTDOWN"))
    c.read_until_closed(timeout=10)
    assert node.wait_exit() == 0
    node.spawn(port=node.port)          # the AOF files are named after the port
    node.wait_ready()
    r = node.raw()
    for jid in ids:
        assert r.execute("SHOW", jid) is not None


def test_worker_crash_closes_its_connections(node):
    c = node.raw()
    settle(node, c)
    worker = node.worker_pids()[0]
    os.kill(worker, signal.SIGKILL)
    if node.affinity:
        assert c.read_until_closed(timeout=10)[1], "the served connection stayed open"
    def serving():
        with RawConn(node.port) as admin:
            return admin.execute("QLEN", Q0) == 0
    wait_until(serving, timeout=10, message="the node did not serve again")
    wait_until(lambda: served(node) == 0)


@pytest.mark.parametrize("mode", MODES)
def test_leaving_node_answers_served_connections(start_cluster, mode):
    cluster = start_cluster(2, workers=2, extra_args=("--connection-affinity", mode))
    node = cluster.nodes[0]
    node.affinity = mode == "yes"
    c = node.raw()
    settle(node, c)
    jid = c.execute("ADDJOB", Q0, "x", 0, "REPLICATE", 2)     # its worker serves it
    assert jid.startswith(b"D-")
    with RawConn(node.port) as admin:
        assert admin.execute("CLUSTER", "LEAVING", "yes") == b"OK"
    leaving = b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n"
    assert c.call("GETJOB", "TIMEOUT", 100, "FROM", Q1) == leaving
    assert c.execute("GETJOB", "NOHANG", "FROM", Q1) is NULL_ARRAY
    assert c.execute("SHOW", jid)[1] == jid


MALFORMED = [
    (b'PING "abc\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*2000000\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\nPING\r\n", b"-ERR Protocol error: expected '$', got 'P'\r\n"),
    (b"*1\r\n$536870913\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$" + b"1" * 66000, b"-ERR Protocol error: too big bulk count string\r\n"),
    (b"*" + b"1" * 66000, b"-ERR Protocol error: too big mbulk count string\r\n"),
    (b"A" * 66000, b"-ERR Protocol error: too big inline request\r\n"),
]


@pytest.mark.parametrize("data,error", MALFORMED, ids=[
    "quotes", "mbulk-text", "mbulk-huge", "no-dollar", "bulk-huge", "bulk-negative",
    "bulk-count-long", "mbulk-count-long", "inline-long"])
def test_malformed_input_on_a_served_connection(node, data, error):
    """The worker parses a served connection's input itself: malformed RESP gets the
    front-end's exact error after the replies of the commands before it, the connection
    closes, and neither the worker nor a job it holds is harmed."""
    workers = node.worker_pids()
    c = node.raw()
    settle(node, c)
    jid = addjob(c, Q0, "kept")
    try:
        c.send(encode_command("QLEN", Q0) + encode_command("PING", "x") + data)
    except OSError:
        pass                            # the server may close before it read all of it
    got, closed = c.read_until_closed(5)
    assert got == b":1\r\n$1\r\nx\r\n" + error, got[:200]
    assert closed
    assert node.all_alive() and node.worker_pids() == workers, node.log_tail()
    with RawConn(node.port) as other:
        assert other.execute("SHOW", jid)[1] == jid
        assert other.execute("QLEN", Q0) == 1
