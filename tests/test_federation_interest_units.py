"""Federation interest inside one worker (docs/federation-interest.md), with a clock the test
moves: what a node whose consumers wait tells the others, and what a node told keeps."""
import pytest

from disque._fast.codec import serialize
from disque.contracts import bus_messages as bus_msg
from disque.workers.shard import Shard
from disque.contracts.getjob_options import GetjobRequest

pytestmark = pytest.mark.unit

ME = b"b" * 40
OTHER = b"a" * 40
T0 = 1_000_000_000_000


def clustered_shard():
    s = Shard(0, 1, ME)
    s.replication.set_cluster({"myid": ME, "size": 2, "reachable": [OTHER], "known": [OTHER],
                   "leaving": False})
    move(s, T0)
    return s


def move(s, now_ms):
    s.now_ms = now_ms
    s.now_s = now_ms // 1000


def sent(s, mtype):
    """Payloads of `mtype` messages sent since the last call."""
    out = [payload for _dest, t, _flags, payload in s.bus_out if t == mtype]
    s.bus_out = [e for e in s.bus_out if e[1] != mtype]
    return out


def block(s, client, timeout_ms, queue=b"q"):
    reply, _ids = s.getjob(GetjobRequest(1, timeout=timeout_ms, queues=[queue], reqid=client, client=client))
    assert reply is None                            # blocked


def test_a_blocked_consumer_tells_interest_once_and_its_timeout_cancels_it():
    s = clustered_shard()
    block(s, 1, 500)
    assert sent(s, bus_msg.INTEREST) == [[b"q", 1]]
    assert sent(s, bus_msg.NEEDJOBS) == []                # no pull before the INTEREST any more
    move(s, T0 + 499)
    s.run_timers()
    assert sent(s, bus_msg.INTEREST) == []
    move(s, T0 + 500)
    s.run_timers()                                  # the GETJOB times out
    assert sent(s, bus_msg.INTEREST) == [[b"q", 0]]


def test_disconnect_and_served_consumers_cancel_the_interest():
    s = clustered_shard()
    block(s, 1, 0)
    sent(s, bus_msg.INTEREST)
    s.consumers.unblock_client(1, 1)                          # the front-end: client gone
    assert sent(s, bus_msg.INTEREST) == [[b"q", 0]]
    move(s, T0 + 100)
    block(s, 2, 0)
    assert sent(s, bus_msg.INTEREST) == [[b"q", 1]]
    s.execute(3, [b"addjob", b"q", b"body", b"0", b"REPLICATE", b"1"])
    s.consumers.serve_ready()                                 # served by a local job
    assert sent(s, bus_msg.INTEREST) == [[b"q", 0]]


def test_one_of_two_consumers_leaving_lowers_the_credit_soon():
    s = clustered_shard()
    block(s, 1, 0)
    move(s, T0 + 10)
    block(s, 2, 0)                                  # rate-limited: told when allowed
    assert sent(s, bus_msg.INTEREST) == [[b"q", 1]]
    move(s, T0 + 60)
    s.federation.tell_interest_due()
    assert sent(s, bus_msg.INTEREST) == [[b"q", 2]]
    s.consumers.unblock_client(1, 1)
    assert sent(s, bus_msg.INTEREST) == []                # one still waits: no cancel
    move(s, T0 + 120)
    s.federation.tell_interest_due()
    assert sent(s, bus_msg.INTEREST) == [[b"q", 1]]


def test_a_told_node_pushes_only_while_the_interest_lasts():
    s = clustered_shard()
    s.replication.on_bus([[OTHER, bus_msg.INTEREST, 0, [b"q", 1]]])
    assert OTHER in s.queues[b"q"].remote
    s.replication.on_bus([[OTHER, bus_msg.INTEREST, 0, [b"q", 0]]])
    assert s.queues[b"q"].remote is None
    s.execute(1, [b"addjob", b"q", b"body", b"0", b"REPLICATE", b"1"])
    s.consumers.serve_ready()
    assert sent(s, bus_msg.YOURJOBS) == [] and len(s.queues[b"q"].jobs) == 1
    s.replication.on_bus([[OTHER, bus_msg.INTEREST, 0, [b"q", 1]]])  # a consumer waits there again
    assert len(sent(s, bus_msg.YOURJOBS)) == 1 and len(s.queues[b"q"].jobs) == 0


def test_needjobs_pulls_but_leaves_no_interest():
    s = clustered_shard()
    s.replication.on_bus([[OTHER, bus_msg.NEEDJOBS, 0, [b"q", 5]]])
    assert b"q" not in s.queues                     # nothing kept for a pull
    s.execute(1, [b"addjob", b"q", b"body", b"0", b"REPLICATE", b"1"])
    s.consumers.serve_ready()
    assert sent(s, bus_msg.YOURJOBS) == []
    s.replication.on_bus([[OTHER, bus_msg.NEEDJOBS, 0, [b"q", 5]]])
    assert len(sent(s, bus_msg.YOURJOBS)) == 1
    assert s.queues[b"q"].remote is None


def test_a_node_importing_a_queue_answers_interest_but_not_needjobs():
    """Upstream's rule against ping-pong: while this node imports `q` itself (import rate above
    0: a YOURJOBS within 5 s), a NEEDJOBS, which a node sends each time a fetch empties its
    queue, gets nothing; an INTEREST, consumers waiting there now, gets what is queued here.
    Answering every NEEDJOBS moved most jobs of a busy cluster from node to node: 1.3
    YOURJOBS per job added in the fault harness' workload."""
    sender = Shard(0, 1, OTHER)
    sender.now_ms, sender.now_s = T0, T0 // 1000
    copies = []
    for body in (b"one", b"two", b"three"):
        reply = sender.execute(1, [b"ADDJOB", b"q", body, b"0", b"REPLICATE", b"1"])
        copies.append(serialize(sender.jobs[bytes(reply).strip(b"+\r\n")], False, sender.now_s))
    s = clustered_shard()
    s.replication.on_bus([[OTHER, bus_msg.YOURJOBS, 0, copies]])
    assert len(s.queues[b"q"].jobs) == 3
    s.replication.on_bus([[OTHER, bus_msg.NEEDJOBS, 0, [b"q", 1]]])
    assert sent(s, bus_msg.YOURJOBS) == []              # importing: a pull gets nothing
    s.replication.on_bus([[OTHER, bus_msg.INTEREST, 0, [b"q", 1]]])
    assert len(sent(s, bus_msg.YOURJOBS)) == 1          # consumers wait there: handed over
    move(s, T0 + 5001)                                  # no import for 5 s: the rate is 0
    s.replication.on_bus([[OTHER, bus_msg.NEEDJOBS, 0, [b"q", 1]]])
    assert len(sent(s, bus_msg.YOURJOBS)) == 1 and len(s.queues[b"q"].jobs) == 1


@pytest.mark.parametrize("payload", [[1, 1], [b"q", "x"], [b"q"], [], None, [b"q", 1.5]])
def test_malformed_interest_is_dropped(payload):
    s = clustered_shard()
    s.replication.on_bus([[OTHER, bus_msg.INTEREST, 0, payload], [OTHER, bus_msg.NEEDJOBS, 0, payload]])
    assert not s.queues
