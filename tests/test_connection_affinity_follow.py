"""Connections that use the queues of two workers (docs/design.md "Connections served by
their worker"): not handed back and forth, following their commands to the other worker,
forwarded in order, with affinity on and off (the fixture and helpers:
test_connection_affinity.py).
"""
import os
import signal

from disque.contracts.connection_handover import FOLLOW_AFTER
from support.resp_client import encode_command
from support.waits import wait_until
from test_connection_affinity import Q0, Q1, addjob, node, served, settle  # noqa: F401 (fixture)


def test_a_client_of_two_workers_is_not_handed_back_and_forth(node):
    c = node.raw()
    for i in range(300):
        c.execute("QLEN", Q0 if i % 2 else Q1)
    info = node.info_fields("server")
    assert int(info["connection_handoffs"]) <= 12, info
    assert int(info["connection_follows"]) == 0, info


def test_affinity_off_at_run_time_takes_connections_back(node):
    c = node.raw()
    settle(node, c)
    admin = node.raw()
    admin.execute("CONFIG", "SET", "connection-affinity", "no")
    wait_until(lambda: served(node) == 0)
    assert addjob(c, Q0, "still served").startswith(b"D-")
    assert admin.execute("CONFIG", "GET", "connection-affinity")[1] == b"no"


def test_a_producer_consumer_of_one_queue_stays_with_its_worker(node):
    """ADDJOB, GETJOB, ACKJOB, NACK, WORKING, SHOW, QLEN, QPEEK, PING on one worker's
    queue and jobs: served there, never handed back."""
    c = node.raw()
    settle(node, c)
    for _ in range(5):
        ids = [addjob(c, Q0, "cycle") for _ in range(3)]
        got = c.execute("GETJOB", "COUNT", 3, "FROM", Q0)
        assert sorted(j[1] for j in got) == sorted(ids)
        assert c.execute("WORKING", ids[0]) > 0
        assert c.execute("NACK", ids[0]) == 1
        assert c.execute("SHOW", ids[1])
        assert c.execute("QLEN", Q0) == 1
        assert c.execute("QPEEK", Q0, 1)[0][1] == ids[0]
        assert c.execute("PING") == b"PONG"
        assert c.execute("GETJOB", "NOHANG", "FROM", Q0)[0][1] == ids[0]
        assert c.execute("ACKJOB", *ids) == 3
    info = node.info_fields("server")
    if node.affinity:
        assert int(info["connection_handbacks"]) == 0, info
        assert served(node) == 1


def test_commands_of_the_other_worker_keep_their_order(node):
    """A served connection's commands for the other worker run there, forwarded by the
    worker serving it (no hand-back), and every reply keeps its place; a node command
    behind them waits for their replies."""
    c = node.raw()
    settle(node, c)
    before = node.info_fields("server")
    cmds = []
    for i in range(40):
        cmds.append(("ADDJOB", Q1 if i % 3 else Q0, "m%d" % i, 0))
        cmds.append(("QLEN", Q1))
    cmds += [("ECHO", "after"), ("QLEN", Q0), ("QLEN", Q1)]
    c.send(b"".join(encode_command(*cmd) for cmd in cmds))
    replies = [c.read_parsed() for _ in cmds]
    n1 = 0
    for i in range(40):
        assert replies[2 * i].startswith(b"D-")
        n1 += 1 if i % 3 else 0
        assert replies[2 * i + 1] == n1
    assert replies[-3:] == [b"after", 40 - n1, n1]
    jid = replies[2]                                   # a job of Q1, shown through worker 0
    settle(node, c)
    assert c.execute("SHOW", jid)[1] == jid
    assert c.execute("GETJOB", "NOHANG", "COUNT", 1, "FROM", Q1)[0][0] == Q1.encode()
    after = node.info_fields("server")
    if node.affinity:
        # the ECHO took it back once; the two workers' commands never did
        assert int(after["connection_handbacks"]) - int(before["connection_handbacks"]) == 1


def test_a_connection_follows_its_commands_to_the_other_worker(node):
    """A producer served by worker 0 that moves on to worker 1's queue is given to worker 1
    after FOLLOW_AFTER forwarded commands in a row, rather than forwarded for as long as it
    lives: when worker 0 then dies, which takes its own connections with it, this one
    stays (with affinity off the front-end holds it throughout)."""
    c = node.raw()
    settle(node, c)                                    # served by worker 0
    before = node.info_fields("server")
    ids = [addjob(c, Q1, "moved %d" % i) for i in range(FOLLOW_AFTER + 8)]
    if node.affinity:
        wait_until(lambda: served(node) == 1, message="never handed to worker 1")
        after = node.info_fields("server")
        assert int(after["connection_follows"]) - int(before["connection_follows"]) == 1
        assert int(after["connection_handbacks"]) - int(before["connection_handbacks"]) == 1
    os.kill(node.worker_pids()[0], signal.SIGKILL)
    assert c.execute("QLEN", Q1) == len(ids)
    assert [j[1] for j in c.execute("GETJOB", "COUNT", 2, "FROM", Q1)] == ids[:2]
    assert c.execute("ACKJOB", *ids[:2]) == 2


def test_a_pipelined_burst_that_moves_keeps_its_replies_in_order(node):
    """One write of 3 * FOLLOW_AFTER commands for the other worker's queue: the first
    FOLLOW_AFTER - 1 are forwarded, the connection goes back with the rest while their
    replies are still owed, and every reply arrives in order."""
    c = node.raw()
    settle(node, c)                                    # served by worker 0
    n = 3 * FOLLOW_AFTER
    cmds = [("ADDJOB", Q1, "burst %d" % i, 0) for i in range(n)] + [("QLEN", Q1)]
    c.send(b"".join(encode_command(*cmd) for cmd in cmds))
    replies = [c.read_parsed() for _ in cmds]
    ids = replies[:n]
    assert all(r.startswith(b"D-") for r in ids) and replies[-1] == n
    assert [j[1] for j in c.execute("QPEEK", Q1, n)] == ids     # queued in the order sent
    if node.affinity:
        wait_until(lambda: served(node) == 1, message="never handed to worker 1")
        assert int(node.info_fields("server")["connection_follows"]) == 1


def test_forwarding_survives_the_other_worker_dying(node):
    c = node.raw()
    settle(node, c)                                    # served by worker 0
    assert addjob(c, Q1, "before").startswith(b"D-")
    os.kill(node.worker_pids()[1], signal.SIGKILL)

    def forwarded_again():
        reply = c.call("ADDJOB", Q1, "after", 0)
        assert reply.startswith(b"+D-") or b"worker process died" in reply, reply
        return reply.startswith(b"+D-")
    wait_until(forwarded_again, timeout=15, message="commands of the restarted worker fail")
    assert c.execute("QLEN", Q1) >= 1
    assert addjob(c, Q0, "still here").startswith(b"D-")


def test_resp3_null_from_the_other_worker(node):
    c = node.raw()
    c.call("HELLO", 3)
    settle(node, c)
    assert c.call("GETJOB", "NOHANG", "FROM", Q1) == b"_\r\n"
    assert c.call("QLEN", Q1) == b":0\r\n"
