"""Job groups between the shards of three nodes, in-process, with every bus message passed
by hand (docs/job-groups.md, "Adding a job to a group"): a node that is not the group's
home sends the job to its holders (GROUPSEQ), the home's answer carrying its place, tells
them the place once the copies and the place are there (PLACED: the home queues the job on it) and
answers the producer; a home that is not reachable is refused at once; only the home
queues a head."""
import pytest

from disque._fast.job import FLAG_HELD
from disque.contracts import bus_messages as bus_msg
from disque.workers.shard import Shard

pytestmark = pytest.mark.unit

A, B, C = (bytes([c]) * 40 for c in b"abc")
NOW_MS = 1_800_000_000_000


def shard_of(me, reachable=None):
    shard = Shard(0, 1, me, {})
    shard.now_ms, shard.now_s = NOW_MS, NOW_MS // 1000
    members = (A, B, C)
    others = tuple(n for n in members if n != me)
    shard.replication.set_cluster({
        "myid": me, "size": 3, "known": list(members), "leaving": False, "members": list(members),
        "reachable": list(others if reachable is None else reachable)})
    return shard


def key_homed_at(shard, home, heir=None):
    """A group key whose ranking starts with `home` (then `heir`, when given)."""
    for i in range(10000):
        key = b"k%d" % i
        ranking = shard.groups.ranking(b"q", key)
        if ranking[0] == home and (heir is None or ranking[1] == heir):
            return key
    raise AssertionError("no key found")


def qlen(shard):
    q = shard.queues.get(b"q")
    return 0 if q is None else len(q.jobs)


def sent(shard):
    out, shard.bus_out = shard.bus_out, []
    return [(tuple(d) if d is not None else None, t, f, p) for d, t, f, p in out]


def deliver(shard, sender, messages):
    shard.replication.on_bus([[sender, t, f, p] for _d, t, f, p in messages])


def addjob(shard, *args):
    return shard.execute(1, [a if isinstance(a, bytes) else str(a).encode()
                             for a in ("ADDJOB", "q", "body", 0) + args])


def test_a_producer_away_from_the_home_asks_the_place_while_the_other_copies_go():
    a, b, c = shard_of(A), shard_of(B), shard_of(C)
    key = key_homed_at(a, B, C)                 # home B, heir C; A holds no copy
    assert addjob(a, "GROUP", key, "REPLICATE", 2) is None       # the producer waits
    first = sent(a)
    assert [(d, t) for d, t, _f, _p in first] == [((B, C), bus_msg.GROUPSEQ)]
    deliver(b, A, first)                        # the home keeps it and gives it its place
    answer = sent(b)
    assert [(d, t) for d, t, _f, _p in answer] == [((A,), bus_msg.GOTJOB)]
    jid, place = answer[0][3]
    assert place >= NOW_MS * 1000
    assert b.find_job(jid).ext.group_seq == place
    deliver(c, A, first)                        # the heir's copy, placed by its own clock
    assert 0 < c.find_job(jid).ext.group_seq
    deliver(a, C, sent(c))
    assert sent(a) == [] and len(a.out) == 0    # the place has not come
    deliver(a, B, answer)
    done = sent(a)
    # every holder is told the place; the home queues the job on it (no ENQUEUE)
    assert [(d, t, p) for d, t, _f, p in done] == [((B, C), bus_msg.PLACED, [jid, place])]
    assert a.out[-1] == [1, b"+" + jid + b"\r\n"]          # the producer's reply
    assert a.find_job(jid) is None              # not one of the group's holders
    deliver(c, A, done)
    assert c.find_job(jid).ext.group_seq == place         # the heir has the place
    deliver(b, A, done)
    assert qlen(b) == 1           # queued on its home only
    assert qlen(c) == 0


def test_a_producer_holding_a_copy_places_it_when_the_home_answers():
    a, b, c = shard_of(A), shard_of(B), shard_of(C)
    key = key_homed_at(a, B, C)
    addjob(a, "GROUP", key, "REPLICATE", 3)
    first = sent(a)
    jid = next(iter(a.jobs))
    assert a.groups.members == 0                # no place yet
    deliver(b, A, first)
    deliver(c, A, first)
    deliver(a, C, sent(c))
    deliver(a, B, sent(b))
    assert a.out[-1] == [1, b"+" + jid + b"\r\n"]
    assert a.find_job(jid).ext.group_seq == b.find_job(jid).ext.group_seq
    assert a.groups.members == 1
    assert (qlen(a), qlen(b), qlen(c)) == (0, 0, 0)       # the home queues it on PLACED
    placed = sent(a)
    assert [(d, t) for d, t, _f, _p in placed] == [((B, C), bus_msg.PLACED)]
    deliver(b, A, placed)
    deliver(c, A, placed)
    assert (qlen(a), qlen(b), qlen(c)) == (0, 1, 0)


def test_a_copy_placed_by_its_holders_clock_moves_to_the_homes_place():
    """Two jobs of a group reach the heir in the wrong order (their copies left before
    their places were known): each PLACED moves its job, and the head is never held."""
    b, c = shard_of(B), shard_of(C)
    key = key_homed_at(b, B, C)
    ids = []
    for producer in (A, A):
        p = shard_of(producer)
        addjob(p, "GROUP", key, "REPLICATE", 3, "RETRY", 1)
        ids.append((p, next(iter(p.jobs)), sent(p)))
    (p1, j1, m1), (p2, j2, m2) = ids
    deliver(c, A, m2)                           # the second job's copy comes first
    deliver(c, A, m1)
    assert c.groups.head_id(c.find_job(j1)) == j2
    c.now_ms += 1500                            # their timers: the second is the head here,
    c.run_timers()                              # the first waits, held behind it
    assert c.find_job(j1).flags & FLAG_HELD
    deliver(b, A, m1)
    deliver(b, A, m2)
    place1 = b.find_job(j1).ext.group_seq
    place2 = b.find_job(j2).ext.group_seq
    assert place1 < place2
    c.replication.on_bus([[A, bus_msg.PLACED, 0, [j2, place2]],
                          [A, bus_msg.PLACED, 0, [j1, place1]]])
    group = c.find_job(j1).ext.member_of
    assert group.ids == [j1, j2]
    assert c.find_job(j1).ext.group_seq == place1
    assert c.groups.is_head(c.find_job(j1))
    assert not c.find_job(j1).flags & FLAG_HELD           # the head waits for no one


def test_a_holder_that_did_not_answer_gets_the_copy_again_with_its_place():
    a, b, c = shard_of(A), shard_of(B), shard_of(C)
    key = key_homed_at(a, B, C)
    addjob(a, "GROUP", key, "REPLICATE", 3)
    first = sent(a)
    deliver(b, A, first)                        # the copy to C is lost
    deliver(a, B, sent(b))
    assert a.out == []
    a.now_ms += 60
    a.replication.repl_cron()
    again = sent(a)
    # the place is known by now: the copy carries it
    assert [(d, t) for d, t, _f, _p in again] == [((C,), bus_msg.REPLJOB)]
    deliver(c, A, again)
    jid = next(iter(b.jobs))
    assert c.find_job(jid).ext.group_seq == b.find_job(jid).ext.group_seq
    deliver(a, C, sent(c))
    assert a.out[-1][1].startswith(b"+")


def test_a_copy_from_a_producer_that_saw_another_membership_goes_on_to_the_home():
    """The producer does not see the group's home yet (a node coming back): the holder
    that does sends the job on to it at once, not one RETRY later (its requeue timer), so
    that the home holds the group's jobs as they come."""
    a, c = shard_of(A), shard_of(C)
    key = key_homed_at(c, B, C)                 # home B, heir C for those who see B
    a.replication.set_cluster({"myid": A, "size": 3, "known": [A, B, C], "leaving": False,
                               "members": [A, C], "reachable": [C]})
    addjob(a, "GROUP", key, "REPLICATE", 2)
    first = sent(a)
    assert [(d, t) for d, t, _f, _p in first] == [((C,), bus_msg.GROUPSEQ)]  # A: C is the home
    deliver(c, A, first)
    out = sent(c)
    jid = next(iter(c.jobs))
    onward = [(d, t, f) for d, t, f, _p in out if t == bus_msg.REPLJOB]
    assert onward == [((B,), bus_msg.REPLJOB, bus_msg.NOREPLY)]
    assert B in c.find_job(jid).nodes_delivered


def test_a_place_asked_for_twice_is_the_same_place():
    a, b = shard_of(A), shard_of(B)
    key = key_homed_at(a, B, A)                 # the producer is the heir: no other copy
    addjob(a, "GROUP", key, "REPLICATE", 2)
    ask = sent(a)
    deliver(b, A, ask)
    deliver(b, A, ask)                          # the first GOTJOB was lost: asked again
    places = [p[1] for _d, t, _f, p in sent(b) if t == bus_msg.GOTJOB]
    assert len(places) == 2 and places[0] == places[1]
    assert b.groups.members == 1


def test_an_at_most_once_job_of_a_group_is_queued_by_its_home():
    """RETRY 0 (REPLICATE 1): the home is its one holder, and queues it although a plain
    at-most-once copy is never queued on ENQUEUE (SPEC 3.1)."""
    a, b = shard_of(A), shard_of(B)
    key = key_homed_at(a, B)
    addjob(a, "GROUP", key, "REPLICATE", 1, "RETRY", 0)
    deliver(b, A, sent(a))
    deliver(a, B, sent(b))
    assert a.out[-1][1].startswith(b"+")
    deliver(b, A, sent(a))                      # PLACED
    assert qlen(b) == 1 and a.jobs == {}


def test_an_unreachable_home_is_refused_at_once_and_keeps_nothing():
    a = shard_of(A, reachable=(C,))             # B suspected (PFAIL): still a member
    key = key_homed_at(a, B)
    assert addjob(a, "GROUP", key, "REPLICATE", 2) == (
        b"-NOREPL The home node of this job's group is not reachable now: try again once "
        b"the cluster settles (docs/job-groups.md)\r\n")
    assert sent(a) == [] and a.jobs == {} and a.groups.members == 0


def test_on_its_home_a_job_takes_its_place_at_once_and_its_copies_carry_it():
    a, c = shard_of(A), shard_of(C)
    key = key_homed_at(a, A, C)
    assert addjob(a, "GROUP", key, "REPLICATE", 2) is None
    copies = sent(a)
    assert [(d, t) for d, t, _f, _p in copies] == [((C,), bus_msg.REPLJOB)]
    deliver(c, A, copies)
    jid = next(iter(c.jobs))
    assert c.find_job(jid).ext.group_seq == a.find_job(jid).ext.group_seq > 0
    deliver(a, C, sent(c))
    assert qlen(a) == 1
    assert [t for _d, t, _f, _p in sent(a)] == []             # no ENQUEUE: it is the home


def test_a_copy_away_from_the_home_is_never_queued_by_its_timer():
    """The heir's copy of the head keeps its requeue timer and moves it on, one RETRY at a
    time, sending the home the job each time, while the home is a member; once the home leaves the membership the heir is the
    home and its timer queues the head."""
    a, c = shard_of(A), shard_of(C)
    key = key_homed_at(a, A, C)
    addjob(a, "GROUP", key, "REPLICATE", 2, "RETRY", 1)
    deliver(c, A, sent(a))
    for step in range(30):
        c.now_ms += 100
        c.now_s = c.now_ms // 1000
        c.run_timers()
    assert qlen(c) == 0
    # each time its timer fired, the home was sent the job again (a lost copy is mended)
    reminders = [(d, t) for d, t, _f, _p in sent(c) if t == bus_msg.REPLJOB]
    assert reminders and set(reminders) == {((A,), bus_msg.REPLJOB)}
    c.replication.set_cluster({"myid": C, "size": 3, "known": [A, B, C], "leaving": False,
                               "members": [B, C], "reachable": [B]})
    for step in range(30):
        c.now_ms += 100
        c.now_s = c.now_ms // 1000
        c.run_timers()
    assert qlen(c) == 1
