"""A reply bigger than the client's socket takes at once, on a connection its worker serves
(docs/design.md, "Connections served by their worker"): the worker writes the rest itself as
the socket drains, keeps serving its other connections meanwhile, and hands the connection to
the front-end only when more replies pile up behind it or when an output limit is set.

The bodies are 24 MB, more than loopback's socket buffers hold together. (A client with a
tiny SO_RCVBUF would not show more: over loopback's 64 KB segments, TCP then moves about
40 KB/s, for the original as for us.)"""
import os
import socket

import pytest

from support.info import parse_info
from support.resp_client import encode_command
from support.slots import queues_on_distinct_workers
from support.waits import wait_until

pytestmark = pytest.mark.server

BIG, SMALL, _, OTHER = queues_on_distinct_workers("bigreply", per_worker=2, nworkers=2)


@pytest.fixture
def node(start_server):
    return start_server(workers=2, extra_args=("--connection-affinity", "yes"))


def server_info(conn):
    return parse_info(conn.execute("INFO", "server"))


def served_connection(node, queue):
    """A connection its worker serves (a few commands on the queue hand it over)."""
    c = node.raw()
    before = int(server_info(c)["connections_served_by_workers"])
    for _ in range(40):
        c.execute("QLEN", queue)
        if int(node.info_fields("server")["connections_served_by_workers"]) > before:
            return c
    raise AssertionError("the connection was never handed over")


def addjob(conn, queue, body):
    return conn.execute("ADDJOB", queue, body, 0)


def expect_job(conn, queue, jid, body, timeout=30):
    """Read GETJOB's reply [[queue, id, body]] straight off the socket into one buffer (the
    test client's parser copies its whole buffer on every read: quadratic in the body)."""
    q = queue.encode()
    head = b"*1\r\n*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n" % (len(q), q, len(jid), jid, len(body))
    want = len(head) + len(body) + 2
    got = bytearray(want)
    view, have = memoryview(got), len(conn.buf)
    got[:have] = conn.buf[:want]
    conn.buf = conn.buf[have:]
    conn.sock.settimeout(timeout)
    while have < want:
        n = conn.sock.recv_into(view[have:], want - have)
        assert n, "the connection closed in the middle of the reply"
        have += n
    assert bytes(got[:len(head)]) == head
    assert got[len(head):want - 2] == body and got[want - 2:] == b"\r\n"


def reply_started(conn):
    """The first bytes of a reply are on the client's socket (not read)."""
    try:
        return len(conn.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)) == 1
    except BlockingIOError:
        return False


def connected_clients(admin):
    return int(parse_info(admin.execute("INFO", "clients"))["connected_clients"])


def test_the_worker_writes_a_big_reply_and_serves_others_meanwhile(node):
    admin = node.raw()
    body = os.urandom(24 << 20)
    jid = addjob(admin, BIG, body)
    c = served_connection(node, BIG)
    before = int(server_info(admin)["connection_handbacks"])
    c.send(encode_command("GETJOB", "FROM", BIG) + encode_command("PING")
           + encode_command("QLEN", BIG))
    # not read yet: the same worker still answers another connection of its queues
    other = served_connection(node, SMALL)
    assert other.execute("PING") == b"PONG"
    assert addjob(other, SMALL, "small").startswith(b"D-")
    expect_job(c, BIG, jid, body)
    assert c.read_parsed(timeout=10) == b"PONG"
    assert c.read_parsed(timeout=10) == 0
    assert int(server_info(admin)["connection_handbacks"]) == before
    assert c.execute("ACKJOB", jid) == 1          # and it is still served, by its worker
    assert int(server_info(admin)["connection_handbacks"]) == before


def test_replies_piling_up_behind_it_go_to_the_front_end_in_order(node):
    admin = node.raw()
    body = os.urandom(24 << 20)
    jid = addjob(admin, BIG, body)
    small = addjob(admin, SMALL, b"s" * 20_000)
    c = served_connection(node, BIG)
    before = int(server_info(admin)["connection_handbacks"])
    c.send(encode_command("GETJOB", "FROM", BIG))
    wait_until(lambda: reply_started(c), timeout=10)
    # 4 MB of replies behind the big one, then a command of the other worker's queue
    c.send(encode_command("QPEEK", SMALL, 1) * 200 + encode_command("QLEN", OTHER))
    wait_until(lambda: int(server_info(admin)["connection_handbacks"]) > before, timeout=10,
               message="replies piled up behind a big one stayed in the worker")
    expect_job(c, BIG, jid, body)
    for _ in range(200):
        assert c.read_parsed(timeout=10)[0][1] == small
    assert c.read_parsed(timeout=10) == 0


def test_with_an_output_limit_the_front_end_sees_every_slow_reader(node):
    admin = node.raw()
    assert admin.execute("CONFIG", "SET", "client-output-buffer-limit", "normal 1gb 0 0") == b"OK"
    body = os.urandom(24 << 20)
    jid = addjob(admin, BIG, body)
    c = served_connection(node, BIG)
    before = int(server_info(admin)["connection_handbacks"])
    c.send(encode_command("GETJOB", "FROM", BIG) + encode_command("PING"))
    wait_until(lambda: int(server_info(admin)["connection_handbacks"]) > before, timeout=10,
               message="a slow reader stayed in its worker with an output limit set")
    expect_job(c, BIG, jid, body)
    assert c.read_parsed(timeout=10) == b"PONG"


def test_a_client_that_leaves_in_the_middle_of_a_big_reply(node):
    admin = node.raw()
    addjob(admin, BIG, os.urandom(24 << 20))
    c = served_connection(node, BIG)
    c.send(encode_command("GETJOB", "FROM", BIG))
    wait_until(lambda: reply_started(c), timeout=10)
    c.close()
    wait_until(lambda: connected_clients(admin) == 1, timeout=10)
    other = served_connection(node, BIG)
    assert other.execute("QLEN", BIG) == 0        # the job was delivered (to the one who left)
    assert admin.execute("PING") == b"PONG"


def test_a_slow_reader_parked_in_getjob_still_gets_every_reply(node):
    """Replies that do not fit in the socket, with an output limit set, send the connection
    back to the front-end, which buffers them. A GETJOB parked behind them must not hold that
    hand-back (and the replies with it) until a job comes: it goes back as input and waits
    in the front-end."""
    admin = node.raw()
    assert admin.execute("CONFIG", "SET", "client-output-buffer-limit", "normal 1gb 0 0") == b"OK"
    c = served_connection(node, BIG)
    addjob(admin, BIG, "x" * 400_000)
    before = int(server_info(admin)["connection_handbacks"])
    # 32 MB of replies, more than the loopback socket's buffers hold, not read yet
    c.send(encode_command("QPEEK", BIG, 1) * 80
           + encode_command("GETJOB", "TIMEOUT", 0, "FROM", SMALL) + encode_command("PING"))
    wait_until(lambda: int(server_info(admin)["connection_handbacks"]) > before, timeout=10,
               message="the slow reader was never handed back")
    for _ in range(80):
        assert len(c.read_parsed(timeout=10)) == 1
    jid = addjob(admin, SMALL, "for the parked consumer")
    assert c.read_parsed(timeout=5)[0][1] == jid
    assert c.read_parsed(timeout=5) == b"PONG"


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_big_body_leaves_uncopied_among_its_replies_in_order(node, protocol):
    """A served GETJOB with a body of BIG_PIECE or more sends the body from the job's own
    bytes, between the pieces of its reply (jobreply.encode_jobs_pieces): the client reads
    the same bytes, in order with the replies around them, in RESP2 and RESP3."""
    from disque._fast.jobreply import BIG_PIECE
    admin = node.raw()
    bodies = [b"small-1", os.urandom(BIG_PIECE + 5), b"small-2", os.urandom(3 * BIG_PIECE)]
    ids = [addjob(admin, BIG, body) for body in bodies]
    c = node.raw()
    if protocol == 3:
        c.execute("HELLO", 3)
    before = int(node.info_fields("server")["connections_served_by_workers"])
    for _ in range(40):
        c.execute("QLEN", BIG)
        if int(node.info_fields("server")["connections_served_by_workers"]) > before:
            break
    else:
        raise AssertionError("the connection was never handed over")
    handbacks = int(server_info(admin)["connection_handbacks"])
    c.send(encode_command("GETJOB", "COUNT", 3, "WITHCOUNTERS", "FROM", BIG)
           + encode_command("PING") + encode_command("GETJOB", "FROM", BIG)
           + encode_command("QLEN", BIG))
    got = c.read_parsed(timeout=30)
    assert [(j[1], j[2], j[4], j[6]) for j in got] == [(ids[i], bodies[i], 0, 0) for i in range(3)]
    assert c.read_parsed(timeout=10) in (b"PONG", "PONG")
    last = c.read_parsed(timeout=30)
    assert last[0][1] == ids[3] and last[0][2] == bodies[3]
    assert c.read_parsed(timeout=10) == 0
    assert int(server_info(admin)["connection_handbacks"]) == handbacks   # its worker wrote them
