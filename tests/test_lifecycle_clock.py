"""The job lifecycle of one shard, in-process, with a clock the test moves (SPEC 7).

A `Shard` is the real worker state machine (Cython core plus its Python parts); the worker
process only adds the socket loop around it and calls `tick()` to read the wall clock.
Here the test sets `now_ms`/`now_s` itself and calls `run_timers()` as the worker's timer
would, so RETRY, DELAY, TTL, NACK, WORKING and GC are checked to the millisecond without
waiting real seconds. Jitter (SPEC 7: -250..+249 ms) is the only slack allowed.
"""
import hiredis
import pytest

from disque.contracts.getjob_options import GetjobRequest
from support.shard_clock import NODE, Node

pytestmark = pytest.mark.unit

JITTER_LOW, JITTER_HIGH = -250, 249


@pytest.fixture
def node():
    return Node()


def test_retry_requeues_a_delivered_job_after_retry_seconds(node):
    jid = node.addjob("RETRY", 5)
    assert node.qlen() == 1
    assert node.getjob()[0][1] == jid
    assert node.qlen() == 0
    waited = node.first_time_queued(6000)
    assert 5000 + JITTER_LOW <= waited <= 5000 + JITTER_HIGH + 10
    show = node.show(jid)
    assert show[b"state"] == b"queued"
    assert show[b"additional-deliveries"] == 1      # a requeue counts; the first queueing did not


def test_retry_counts_from_the_delivery_of_a_job_that_waited_longer_than_retry(node):
    """The requeue time rolls forward while a job waits (SPEC 7.3); its delivery restarts it
    (docs/differences.md), so a consumer gets the whole RETRY, not what is left of it."""
    jid = node.addjob("RETRY", 2)
    node.advance(5000)                          # queued all along: the time rolled twice
    assert node.getjob()[0][1] == jid
    waited = node.first_time_queued(3000)
    assert 2000 + JITTER_LOW <= waited <= 2000 + JITTER_HIGH + 10


def test_a_queued_job_that_nobody_takes_is_not_requeued_twice(node):
    jid = node.addjob("RETRY", 2)
    node.advance(7000)
    assert node.qlen() == 1
    assert node.show(jid)[b"additional-deliveries"] == 0


def test_delay_holds_the_first_queueing_back(node):
    jid = node.addjob("DELAY", 3, "RETRY", 10)
    assert node.qlen() == 0
    assert node.show(jid)[b"state"] == b"active"
    waited = node.first_time_queued(4000)
    # the first queueing happens at qtime = now + DELAY, without jitter (SPEC 3.1 step 9)
    assert 3000 <= waited <= 3010


def test_retry_0_job_is_delivered_at_most_once(node):
    jid = node.addjob("RETRY", 0)
    assert node.getjob()[0][1] == jid
    node.advance(30_000)
    assert node.qlen() == 0
    assert node.show(jid)[b"next-requeue-within"] is None


def test_ttl_removes_the_job_from_its_queue_and_the_node(node):
    jid = node.addjob("TTL", 2, "RETRY", 1)
    assert node.qlen() == 1
    start = node.shard.now_ms
    while node.show(jid) is not None:
        assert node.shard.now_ms - start <= 4000, "job outlived its TTL"
        node.advance(10)
    assert node.qlen() == 0
    # expiry is checked within a second of etime (SPEC 7.1), never before it
    assert node.shard.now_ms - start >= 1000


def test_nack_requeues_at_once_and_counts(node):
    jid = node.addjob("RETRY", 60)
    node.getjob()
    assert node.cmd("NACK", jid) == 1
    assert node.qlen() == 1
    show = node.show(jid)
    assert show[b"nacks"] == 1 and show[b"state"] == b"queued"


def test_working_postpones_the_next_requeue_by_retry(node):
    jid = node.addjob("RETRY", 5)
    node.getjob()
    node.advance(4000)
    assert node.cmd("WORKING", jid) == 5
    node.advance(4000)                      # 8 s after delivery: would have been requeued
    assert node.qlen() == 0
    waited = node.first_time_queued(2000)
    assert 1000 + JITTER_LOW <= waited <= 1000 + JITTER_HIGH + 10


def test_working_refused_after_half_the_ttl(node):
    jid = node.addjob("TTL", 10, "RETRY", 1)
    node.getjob()
    node.advance(5100)
    reply = node.cmd("WORKING", jid)
    assert isinstance(reply, hiredis.ReplyError) and str(reply).startswith("TOOLATE")


def test_ackjob_on_a_lone_node_deletes_at_once(node):
    jid = node.addjob("RETRY", 5)
    node.getjob()
    assert node.cmd("ACKJOB", jid) == 1
    assert node.show(jid) is None
    node.advance(10_000)
    assert node.qlen() == 0


def test_paused_in_queue_postpones_the_requeue_by_retry(node):
    jid = node.addjob("RETRY", 3)
    node.getjob()
    assert node.cmd("PAUSE", "q", "in") == b"in"
    node.advance(5000)
    assert node.qlen() == 0
    assert node.show(jid)[b"state"] == b"active"
    node.cmd("PAUSE", "q", "none")
    waited = node.first_time_queued(3500)
    assert waited <= 3000 + JITTER_HIGH + 10


def test_blocked_consumer_times_out_on_the_moved_clock(node):
    shard = node.shard
    reply, _ = shard.getjob(GetjobRequest(1, timeout=1500, queues=[b"w"], reqid=99, client="waiter"))
    assert reply is None                    # blocked
    node.advance(1490)
    assert not [o for o in shard.out if o[0] == 99]
    node.advance(20)
    assert [o for o in shard.out if o[0] == 99][0][1] == b"*-1\r\n"


def test_nack_delay_holds_the_job_back_for_its_delay(node):
    jid = node.addjob("RETRY", 60)
    node.getjob()
    assert node.cmd("NACK", jid, "DELAY", 5) == 1
    assert node.qlen() == 0
    waited = node.first_time_queued(6000)
    assert 5000 - 10 <= waited <= 5000 + JITTER_HIGH + 10
    assert node.show(jid)[b"nacks"] == 1


OTHER = b"b" * 40


def test_an_acked_job_is_collected_once_every_node_confirms(node):
    """GC of an ACK in a cluster (SPEC 7.4): SETACK to every node that may hold a copy,
    again after 2 s, 4 s ... while one is missing, and the job goes at the last GOTACK."""
    from disque.contracts import bus_messages as bus_msg
    shard = node.shard
    shard.replication.set_cluster({"myid": NODE, "size": 2, "reachable": [OTHER],
                                   "known": [OTHER], "leaving": False})
    jid = node.addjob("RETRY", 5, "REPLICATE", 1)
    assert node.cmd("DELJOB", jid) == 1
    shard.bus_out = []
    node.cmd("ACKJOB", jid)                 # unknown here now: a dummy ACK for the others
    assert node.show(jid)[b"state"] == b"acked"

    def setacks():
        sent = [m for m in shard.bus_out if m[1] == bus_msg.SETACK and m[3][0] == jid]
        shard.bus_out = []
        return sent

    first = setacks()
    assert first and first[0][0] == (OTHER,)
    node.advance(2000 + JITTER_LOW - 10)
    assert not setacks()                    # the first retry waits 2 s (jitter aside)
    node.advance(-JITTER_LOW + JITTER_HIGH + 20)
    assert setacks()
    shard.replication.on_bus([[OTHER, bus_msg.GOTACK, 0, [jid, 0]]])
    assert node.show(jid) is None
