"""Job groups in one shard with a clock the test moves (docs/job-groups.md): the group order
(JobGroups), the timers of held jobs, DELAY and TTL inside a group, and a load that reads a
group's jobs out of order."""
import pytest

from disque._fast.groups import JobGroups, group_weight
from disque._fast.job import (FLAG_BCAST_QUEUED, FLAG_GROUPED, FLAG_HELD, QUEUED, Job,
                              JobOptions, mark_active)
from disque.contracts import job_codec as codec
from support.shard_clock import Node

pytestmark = pytest.mark.unit


def member(jid, key=b"k", queue=b"q", seq=0):
    job = Job(jid, queue, b"body")
    job.ext = JobOptions(0, 0, None, None, bytes(bytearray(key)), seq)   # a key object each, as argv's
    return job


# ---- the order ---------------------------------------------------------------------------

def test_a_members_new_place_moves_it_only_when_the_order_changes():
    """PLACED gives a copy the home's number for it: the order is kept when the number
    falls between its neighbours' (the usual case), else the job moves."""
    groups = JobGroups()
    a, b, c = (member(b"a"), member(b"b"), member(b"c"))
    jobs = {j.id: j for j in (a, b, c)}
    for ms, j in ((1, a), (5, b), (9, c)):
        groups.join_new(j, ms)
    g = groups.group_of(a)
    assert groups.move(b, 5001, jobs) is False
    assert g.ids == [b"a", b"b", b"c"] and b.ext.group_seq == 5001
    assert groups.move(a, c.ext.group_seq + 10, jobs) is True
    assert g.ids == [b"b", b"c", b"a"] and g.last_seq == a.ext.group_seq
    assert groups.move(a, 1, jobs) is True
    assert g.ids == [b"a", b"b", b"c"]


def test_new_jobs_take_increasing_places_never_below_the_clock():
    groups = JobGroups()
    a, b, c = (member(b"a"), member(b"b"), member(b"c"))
    assert a.ext.group is not b.ext.group
    key = a.ext.group
    assert groups.join_new(a, 1000) is True                # the first is the head
    assert groups.join_new(b, 1000) is False
    assert (a.ext.group_seq, b.ext.group_seq) == (1000000, 1000001)
    assert groups.join_new(c, 5000) is False
    assert c.ext.group_seq == 5000000                       # the clock lifts it
    assert a.flags & FLAG_GROUPED and groups.is_head(a) and not groups.is_head(b)
    assert (groups.count, groups.members) == (1, 3)
    assert a.ext.group is key and b.ext.group is key and c.ext.group is key   # one key object


def test_a_group_holds_its_jobs_and_only_the_id_of_a_spilled_one():
    """The order holds the jobs in RAM (releasing the next head needs no lookup) and a
    spilled member's ID alone (its job's memory is free); the job read back takes its
    place again (relink), and a head released while spilled comes back as its ID."""
    groups = JobGroups()
    jobs = [member(b"%d" % i) for i in range(4)]
    for j in jobs:
        groups.join_new(j, 1)
    g = groups.group_of(jobs[0])
    assert g.members == jobs and g.ids == [b"0", b"1", b"2", b"3"]
    groups.spilled(jobs[1])
    groups.spilled(jobs[3])
    assert g.members == [jobs[0], b"1", jobs[2], b"3"] and g.head == b"0" and len(g) == 4
    back = member(b"3")                      # read back from the spill log: a new object
    back.flags |= FLAG_GROUPED
    assert groups.relink(back) is True
    assert g.members[3] is back and back.ext.member_of is g
    assert groups.leave(jobs[0]) == b"1"     # the new head is still spilled: its ID
    assert groups.move(jobs[2], jobs[2].ext.group_seq + 100, {}) is True     # after "3"
    assert g.ids == [b"1", b"3", b"2"]
    assert groups.leave(jobs[2]) is None and groups.leave(back) is None
    assert g.ids == [b"1"] and groups.members == 1


def test_clearing_the_groups_cuts_every_job_from_its_group():
    """A member and its group reference each other and the cycle collector sees neither
    (disque/_fast/job.pyx): DEBUG FLUSHALL's clear must cut the links, or every grouped
    job it drops stays in memory."""
    groups = JobGroups()
    jobs = [member(b"%d" % i, key=b"k%d" % (i % 2)) for i in range(6)]
    for j in jobs:
        groups.join_new(j, 1)
    held = [groups.group_of(jobs[0]), groups.group_of(jobs[1])]
    groups.spilled(jobs[5])
    groups.clear()
    assert all(j.ext.member_of is None for j in jobs[:5])
    assert [len(g) for g in held] == [0, 0] and groups.by_queue == {}
    assert (groups.count, groups.members) == (0, 0)


def test_leaving_releases_the_next_head_only_when_the_head_leaves():
    groups = JobGroups()
    jobs = [member(b"%d" % i) for i in range(3)]
    for j in jobs:
        groups.join_new(j, 1)
    assert groups.leave(jobs[1]) is None                    # a held job leaves: nothing moves
    assert groups.leave(jobs[1]) is None                    # twice: no longer a member
    assert groups.leave(jobs[0]) is jobs[2]                 # the head leaves: the next is head
    assert not jobs[0].flags & FLAG_GROUPED
    assert groups.leave(jobs[2]) is None                    # the last: the group is gone
    assert (groups.count, groups.members, groups.by_queue) == (0, 0, {})


def test_a_drained_group_releases_its_heads_in_order_while_jobs_keep_joining():
    """A drain releases a head per ack: the heads that left are cut off the group's list
    in one move now and then, never one move per ack, and every operation on the group
    (the head, a place found by number, a held job leaving, a rejoin) sees the members
    alone, whenever the cut happens."""
    groups = JobGroups()
    jobs = [member(b"%03d" % i) for i in range(200)]
    for j in jobs[:100]:
        groups.join_new(j, 1)
    g = groups.group_of(jobs[0])
    longest, end, cuts = 0, 100, 0
    for i in range(99):
        assert groups.is_head(jobs[i]) and not groups.is_head(jobs[i + 1])
        before = g.first
        assert groups.leave(jobs[i]) is jobs[i + 1]
        cuts += g.first < before
        longest = max(longest, len(g.order))
        assert g.members == jobs[i + 1:end] and g.head == jobs[i + 1].id
        assert 0 <= g.first < len(g.order) and g.order[g.first] is jobs[i + 1]
        if i == 60:                          # new jobs join behind the waiting ones
            for j in jobs[100:150]:
                groups.join_new(j, 1)
            end = 150
    assert 1 <= cuts <= 3 and longest <= 150
    assert g.members == jobs[99:150] and groups.members == 51
    assert groups.leave(jobs[120]) is None           # a held one leaves: nothing released
    moved = jobs[110]
    assert groups.move(moved, jobs[149].ext.group_seq + 1, {}) is True
    assert g.ids[-1] == moved.id and g.head == jobs[99].id
    late = member(b"zz", seq=jobs[100].ext.group_seq + 1)     # an AOF job read back in order
    late.ext.group_seq = jobs[100].ext.group_seq
    jobs[100].ext.group_seq -= 1
    assert groups.rejoin(late, {}) is False and g.ids.index(b"zz") == 2
    for j in list(g.members):
        groups.leave(j)
    assert (groups.count, groups.members, groups.by_queue) == (0, 0, {}) and len(g) == 0
    assert not any(j.ext.member_of is g for j in jobs) and g.order == []


def test_a_rejoin_out_of_order_puts_each_job_at_its_place():
    groups = JobGroups()
    late, early, middle = member(b"l", seq=30), member(b"e", seq=10), member(b"m", seq=20)
    jobs = {j.id: j for j in (late, early, middle)}         # the shard's map holds them
    assert groups.rejoin(late, jobs) is True
    assert groups.rejoin(early, jobs) is True               # it comes first: the new head
    assert groups.rejoin(middle, jobs) is False
    assert groups.by_queue[b"q"][b"k"].ids == [b"e", b"m", b"l"]
    fresh = member(b"f")
    groups.join_new(fresh, 0)
    assert fresh.ext.group_seq == 31                        # after the highest seen


def test_groups_are_per_queue_and_key():
    groups = JobGroups()
    for jid, queue, key in ((b"1", b"q1", b"k"), (b"2", b"q2", b"k"), (b"3", b"q1", b"j")):
        assert groups.join_new(member(jid, key, queue), 0) is True
    assert groups.count == 3


# ---- timers, with the moved clock ---------------------------------------------------------

def test_a_held_job_waits_for_its_head_not_for_its_retry():
    node = Node()
    head = node.addjob("GROUP", "k", "RETRY", 5)
    held = node.addjob("GROUP", "k", "RETRY", 5)
    assert node.getjob()[0][1] == head
    node.advance(6000)          # both RETRYs pass: the head is requeued, the held job is not
    job = node.shard.jobs[held]
    assert job.flags & FLAG_HELD and job.state == 1         # active, held
    assert node.show(held)[b"next-awake-within"] > 80_000_000     # its expiry, not a spin
    assert node.qlen() == 1 and node.getjob()[0][1] == head
    assert node.cmd("ACKJOB", head) == 1
    assert node.qlen() == 1 and node.getjob()[0][1] == held  # released at once


def test_a_next_job_with_a_delay_keeps_its_delay():
    node = Node()
    head = node.addjob("GROUP", "k")
    delayed = node.addjob("GROUP", "k", "DELAY", 10)
    assert node.getjob()[0][1] == head
    node.advance(2000)
    assert node.cmd("ACKJOB", head) == 1
    assert node.qlen() == 0                                 # the head now, but 8 s to wait
    waited = node.first_time_queued(9000)
    assert 7000 <= waited <= 8300
    assert node.getjob()[0][1] == delayed


def test_a_held_job_expires_and_leaves_its_group():
    node = Node()
    head = node.addjob("GROUP", "k", "TTL", 100)
    short = node.addjob("GROUP", "k", "TTL", 5)
    last = node.addjob("GROUP", "k", "TTL", 100)
    node.advance(5300)
    assert node.show(short) is None
    assert node.getjob()[0][1] == head
    assert node.cmd("ACKJOB", head) == 1
    assert node.getjob()[0][1] == last
    assert node.shard.groups.members == 1


def test_a_load_that_reads_a_later_job_first_queues_the_earlier_one_only():
    node = Node()
    shard = node.shard
    first = node.addjob("GROUP", "k", "RETRY", 60)
    second = node.addjob("GROUP", "k", "RETRY", 60)
    records = [codec.serialize(shard.jobs[j], True, shard.now_s) for j in (second, first)]
    shard.flushall()
    for data in records:                                   # the later job's record first
        job, _ = codec.deserialize(data, 0, True, shard.now_s, shard.now_ms)
        was_queued = job.state == QUEUED                    # as disque/_fast/aofload.pyx
        mark_active(job)
        shard.register_job(job)
        if shard.load_grouped(job) or was_queued:
            job.flags &= ~FLAG_BCAST_QUEUED                 # putting it back is no redelivery
            if shard.enqueue(job):
                continue
        shard.schedule(job)
    assert node.qlen() == 1 and node.getjob()[0][1] == first
    later = shard.jobs[second]
    assert later.state == 1 and later.flags & FLAG_HELD and later.additional_deliveries == 0
    assert node.cmd("ACKJOB", first) == 1
    assert node.getjob()[0][1] == second
    assert node.show(second)[b"additional-deliveries"] == 0


# ---- the home of a group in a cluster ------------------------------------------------------

NODES = tuple(bytes([ord("a") + i]) * 40 for i in range(5))


def test_a_lone_node_is_every_groups_home():
    groups = JobGroups()
    job = member(b"j")
    assert groups.is_home(job)                      # no membership pushed yet
    assert groups.set_nodes((NODES[0],), NODES[0]) is True
    assert groups.set_nodes((NODES[0],), NODES[0]) is False     # unchanged
    assert groups.is_home(job) and groups.home_of(b"q", b"k") == NODES[0]
    groups.set_nodes((NODES[1],), NODES[0])         # this node leaves: the other is home
    assert not groups.is_home(job)


def test_every_node_ranks_the_same_home_and_heir():
    """Each node computes the ranking on its own, from the same members in any order."""
    rankings = set()
    for me in NODES:
        groups = JobGroups()
        groups.set_nodes(tuple(reversed(NODES)) if me == NODES[2] else NODES, me)
        rankings.add(tuple(groups.ranking(b"q", b"k")))
        assert groups.home_of(b"q", b"k") == groups.ranking(b"q", b"k")[0]
    assert len(rankings) == 1 and sorted(next(iter(rankings))) == sorted(NODES)


def test_the_ranking_orders_the_nodes_by_their_weights_for_each_group():
    """The ranking (sorted in C) is the nodes by descending weight, whatever the cluster's
    size, and its first node is the home, for every group."""
    for size in (2, 3, 5, 17):
        nodes = tuple(("%040x" % (k * 7919 + 1)).encode() for k in range(size))
        groups = JobGroups()
        groups.set_nodes(nodes, nodes[0])
        for k in range(200):
            key = b"k%d" % k
            want = sorted(nodes, key=lambda n: group_weight(b"q", key, n), reverse=True)
            assert groups.ranking(b"q", key) == want
            assert groups.home_of(b"q", key) == want[0]
    groups.set_nodes(nodes[:1], nodes[0])               # shrinking keeps working
    assert groups.ranking(b"q", b"k") == [nodes[0]] and groups.home_of(b"q", b"k") == nodes[0]


def test_the_rendezvous_weights_are_the_same_in_every_version():
    """Nodes of one cluster must agree on every group's home: the weights are a fixed
    function of (queue, key, node), pinned here so that a change is never by accident."""
    assert group_weight(b"q", b"k", NODES[0]) == 0xeff6c01c58c8031d
    assert group_weight(b"q", b"k", NODES[1]) == 0x9d573f32c24b0b14
    mask = (1 << 64) - 1

    def fmix64(k):
        k ^= k >> 33
        k = (k * 0xff51afd7ed558ccd) & mask
        k ^= k >> 33
        k = (k * 0xc4ceb9fe1a85ec53) & mask
        return k ^ (k >> 33)

    def fnv1a(data):
        h = 0xcbf29ce484222325
        for b in data:
            h = ((h ^ b) * 0x100000001b3) & mask
        return h

    for queue, key, node in [(b"q", b"k", NODES[2]), (b"jobs", b"user:42", NODES[4]),
                             (b"", b"\xff" * 300, b"0" * 40)]:
        want = fmix64(fmix64(fnv1a(queue + b"\0" + key)) ^ fmix64(fnv1a(node)))
        assert group_weight(queue, key, node) == want


def test_only_the_groups_of_a_node_that_goes_move_and_they_go_to_their_heir():
    groups = JobGroups()
    groups.set_nodes(NODES, NODES[0])
    keys = [b"k%d" % i for i in range(2000)]
    before = {k: groups.ranking(b"q", k) for k in keys}
    homes = {n: sum(before[k][0] == n for k in keys) for n in NODES}
    assert all(300 < c < 500 for c in homes.values()), homes      # spread evenly
    gone = NODES[3]
    groups.set_nodes(tuple(n for n in NODES if n != gone), NODES[0])
    for k in keys:
        home = groups.home_of(b"q", k)
        if before[k][0] == gone:
            assert home == before[k][1]             # the heir takes it
        else:
            assert home == before[k][0]             # nothing else moves


def test_a_members_home_is_kept_until_the_membership_changes():
    groups = JobGroups()
    groups.set_nodes(NODES, NODES[0])
    job = member(b"j")
    groups.join_new(job, 1)
    g = groups.group_of(job)
    mine = groups.is_home(job)
    assert groups.home_here(g) == mine and g.home == groups.home_of(b"q", b"k")
    other = groups.home_of(b"q", b"k") if not mine else NODES[1]
    groups.set_nodes(NODES, other)                  # seen from the home
    assert groups.home_here(g) == (g.home == other)
    # QSTAT's figures count the groups this node is the home of
    assert groups.of_queue(b"q") == ((1, 0) if groups.home_here(g) else (0, 0))
