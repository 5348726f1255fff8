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
    # what a peer may send besides: a node twice, things that are no id, a list past 16
    copies = tuple(bytes(bytearray(n)) for n in others[:2])
    odd = (others[0], 7, others[0], b"", b"f" * 40) + copies * 9
    want = tuple(n for n in odd if n in set(others))
    assert s.replication.known_nodes(odd) == want
    assert s.replication.known_nodes(odd[:5]) == (others[0], others[0])


def fresh(ids):
    """New bytes objects with the same values, as a decoded cluster push brings them."""
    return [bytes(bytearray(n)) for n in ids]


def test_a_workers_node_ids_are_one_object_each_across_every_push():
    """Replication.set_cluster (canonical_state): the ids of every field of a push, and of
    the next pushes, are the objects the worker already holds for them, its own id the
    shard's; the job links get the same state; an id that leaves the cluster leaves
    node_ids, and comes back as a new object."""
    s = Shard(0, 1, ME)
    me = s.node_id
    for _ in range(2):
        state = s.replication.set_cluster({
            "myid": fresh([ME])[0], "size": 3, "reachable": fresh([OTHER, THIRD]),
            "roomy": fresh([OTHER]), "known": fresh([OTHER, THIRD]),
            "members": fresh([ME, OTHER, THIRD]), "leaving": False,
            "links": {n: ["127.0.0.1", [1], 0] for n in fresh([OTHER, THIRD])}})
        ids = s.replication.node_ids
        assert sorted(ids) == sorted([ME, OTHER, THIRD])
        assert all(k is v for k, v in ids.items())
        assert ids[ME] is me and state["myid"] is me and s.node_id is me
        held = {id(n) for n in ids.values()}
        for group in (s.replication.reachable, s.replication.roomy, state["known"],
                      state["members"], tuple(state["links"]), s.groups.nodes,
                      tuple(s.replication.known), s.replication.known_ids):
            assert all(id(n) in held for n in group), group
        first = dict(ids)
    assert all(s.replication.node_ids[n] is first[n] for n in first)
    s.replication.set_cluster({"myid": ME, "size": 2, "reachable": [OTHER], "known": [OTHER],
                               "leaving": False})
    assert sorted(s.replication.node_ids) == sorted([ME, OTHER])
    back = fresh([THIRD])[0]
    s.replication.set_cluster({"myid": ME, "size": 3, "reachable": [OTHER, back],
                               "known": [OTHER, back], "leaving": False})
    assert s.replication.node_ids[THIRD] is back


def test_a_job_of_a_group_goes_to_its_rankings_reachable_nodes_whatever_their_objects():
    """group_holders: the first REPLICATE nodes of the group's ranking that are this node or
    reachable, matched by value when the ranking holds other objects than `reachable`."""
    s = clustered_shard()
    s.replication.set_cluster({"myid": ME, "size": 3, "reachable": [OTHER, THIRD],
                               "known": [OTHER, THIRD], "members": fresh([ME, OTHER, THIRD]),
                               "leaving": False})
    s.groups.set_nodes(tuple(fresh([ME, OTHER, THIRD])), ME)   # objects not the worker's
    for i in range(60):
        key = b"g%d" % i
        ranking = s.groups.ranking(b"q", key)
        reply = s.execute(1, [b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"2",
                              b"GROUP", key])
        assert not bytes(reply or b"").startswith(b"-"), reply
        wait = s.replication.repl_by_reqid[1]
        holders = ranking[:2]
        assert wait.extrepl == (ME not in holders)
        assert wait.targets == tuple(n for n in holders if n != ME)
        s.replication.end_wait(wait)
    s.replication.set_cluster({"myid": ME, "size": 3, "reachable": [OTHER], "known": [OTHER, THIRD],
                               "members": [ME, OTHER, THIRD], "leaving": False})
    homes = {s.groups.ranking(b"q", b"g%d" % i)[0]: b"g%d" % i for i in range(60)}
    reply = s.execute(1, [b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"2", b"GROUP",
                          homes[THIRD]])
    assert bytes(reply).startswith(b"-NOREPL The home node"), reply
