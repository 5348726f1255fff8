"""Replication's node lists inside one worker: a node is never listed twice in a job's
nodes-delivered, whatever the messages that bring it (SPEC 7.4: the ACK's garbage collection
ends when every node listed has confirmed, so a node listed twice would keep the job forever)."""
import pytest

from disque._fast.codec import serialize
from disque.workers.shard import Shard

pytestmark = pytest.mark.unit

ME, OTHER, THIRD = b"b" * 40, b"a" * 40, b"c" * 40
T0 = 1_000_000_000_000


def clustered_shard():
    s = Shard(0, 1, ME)
    s.replication.set_cluster({"myid": ME, "size": 3, "reachable": [OTHER, THIRD],
                               "known": [OTHER, THIRD], "leaving": False})
    s.now_ms, s.now_s = T0, T0 // 1000
    return s


def local_job(s):
    reply = s.execute(1, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"1"])
    return s.jobs[bytes(reply).strip(b"+\r\n")]


def test_merge_nodes_lists_each_node_once():
    s = clustered_shard()
    job = local_job(s)
    assert job.nodes_delivered == (ME,)
    s.replication.merge_nodes(job, (ME, OTHER, OTHER, THIRD, OTHER))
    assert job.nodes_delivered == (ME, OTHER, THIRD)


def test_yourjobs_from_a_node_already_listed_does_not_list_it_twice():
    s = clustered_shard()
    job = local_job(s)
    job.nodes_delivered = (ME, OTHER)
    copy = serialize(job, False, s.now_s)       # OTHER's copy lists OTHER itself
    job.nodes_delivered = (ME,)
    s.federation.on_yourjobs(OTHER, 0, [copy])  # YOURJOBS adds its sender to that list
    assert job.nodes_delivered == (ME, OTHER)


def test_the_copies_nodes_are_distinct_and_every_node_is_picked():
    """ADDJOB's choice of nodes for its copies (replcore.pick_distinct, random.sample's
    result): distinct nodes of the pool, each of them chosen, in every position."""
    from collections import Counter

    from disque._fast.replcore import pick_distinct
    pool = tuple(b"%040d" % i for i in range(5))
    firsts, chosen = Counter(), Counter()
    for _ in range(2000):
        got = pick_distinct(pool, 2)
        assert len(got) == 2 and len(set(got)) == 2 and set(got) <= set(pool)
        firsts[got[0]] += 1
        chosen.update(got)
    assert set(firsts) == set(pool) and min(firsts.values()) > 250     # 400 expected each
    assert min(chosen.values()) > 600                                   # 800 expected each
    assert pick_distinct(pool, 0) == ()
    assert sorted(pick_distinct(pool, 5)) == sorted(pool)
    with pytest.raises(ValueError):
        pick_distinct(pool, 6)


@pytest.mark.parametrize("cluster", [3, 40])
def test_a_copys_nodes_become_the_known_ids_and_unknown_ones_are_dropped(cluster):
    """known_nodes (a copy kept here): the ids it keeps are the objects of `known` (a copy
    holds no id bytes of its own), in the copy's order, without the nodes this node does
    not know; by bytes up to 16 nodes, by hash past them."""
    s = Shard(0, 1, ME)
    others = [b"%040d" % i for i in range(cluster - 1)]
    s.replication.set_cluster({"myid": ME, "size": cluster, "reachable": others,
                               "known": others, "leaving": False})
    fresh = tuple(bytes(bytearray(n)) for n in (others[1], ME, b"f" * 40, others[0]))
    got = s.replication.known_nodes(fresh)
    assert got == (others[1], ME, others[0])
    known = {id(n) for n in s.replication.known}
    assert cluster > 16 or all(id(n) in known for n in got)
    assert s.replication.known_nodes(()) == ()
