"""Job groups on one node (docs/job-groups.md): one job of a group delivered at a time, in
the order they were added; NACK, RETRY and WORKING keep the head first; acks, deletes,
expiry and dead letters release the next; SHOW, QSTAT and INFO show the groups; the AOF
brings the order back. With 1 and 3 workers (and 3 over ZeroMQ)."""
import pytest

import aof_helpers
from support.group_watch import GroupWatch
from support.info import parse_info
from support.jobs import addjob
from support.resp_client import NULL_ARRAY
from support.waits import wait_until

pytestmark = pytest.mark.server


def show(r, jid):
    reply = r.execute("SHOW", jid)
    if reply is None:
        return None
    assert len(reply) == 44, reply          # 30 + the job options (10) + group (4)
    return dict(zip(reply[0::2], reply[1::2]))


def qstat(r, queue):
    reply = r.execute("QSTAT", queue)
    return None if reply is NULL_ARRAY or reply is None else dict(zip(reply[0::2], reply[1::2]))


def groups_info(r):
    return {k: int(v) for k, v in parse_info(r.execute("INFO", "groups")).items()}


def take(r, queue, count=10):
    """Every job GETJOB NOHANG gives now: [(id, body)]."""
    got = r.execute("GETJOB", "NOHANG", "COUNT", count, "FROM", queue)
    return [] if got is NULL_ARRAY else [(j[1], j[2]) for j in got]


def bodies(r, queue):
    return [body for _, body in take(r, queue)]


# ---- ADDJOB's errors ----------------------------------------------------------------------

@pytest.mark.parametrize("opts, error", [
    (["GROUP", ""], b"-ERR GROUP needs a key of 1 to 256 bytes\r\n"),
    (["GROUP", "k" * 257], b"-ERR GROUP needs a key of 1 to 256 bytes\r\n"),
    (["GROUP", "a", "GROUP", "b"], b"-ERR GROUP given twice\r\n"),
    (["GROUP", "a", "ASYNC"],
     b"-ERR GROUP cannot be used with ASYNC: a job's place in its group is given before "
     b"the reply\r\n"),
    (["GROUP"], b"-ERR syntax error\r\n"),
    (["GROUP", "a", "RETRY", "x"], b"-ERR RETRY time must be a non negative number\r\n"),
])
def test_addjob_group_errors(server, opts, error):
    with server.raw() as r:
        assert r.call("ADDJOB", "gerr", "b", 0, *opts) == error
        assert r.execute("QLEN", "gerr") == 0
        assert groups_info(r)["group_jobs"] == 0


def test_a_key_of_256_bytes_is_accepted(server):
    with server.raw() as r:
        jid = addjob(r, "glong", b"b", 0, "GROUP", "k" * 256)
        assert show(r, jid)[b"group"] == b"k" * 256


# ---- one at a time, in order ----------------------------------------------------------------

def test_one_job_of_a_group_at_a_time_in_the_order_added(server):
    with server.raw() as r:
        a = [addjob(r, "g1", b"a%d" % i, 0, "GROUP", "a") for i in range(3)]
        b = [addjob(r, "g1", b"b%d" % i, 0, "GROUP", "b") for i in range(2)]
        plain = addjob(r, "g1", b"p", 0)
        assert r.execute("QLEN", "g1") == 3                 # two heads and the plain job
        assert sorted(bodies(r, "g1")) == [b"a0", b"b0", b"p"]
        assert take(r, "g1") == []                          # both groups wait on a delivery
        st = qstat(r, "g1")
        assert (st[b"groups"], st[b"groups-blocked"], st[b"held"]) == (2, 2, 3)
        assert r.execute("ACKJOB", a[0]) == 1
        assert take(r, "g1") == [(a[1], b"a1")]
        assert r.execute("ACKJOB", a[1], b[0], plain) == 3
        assert sorted(bodies(r, "g1")) == [b"a2", b"b1"]
        assert r.execute("FASTACK", a[2], b[1]) == 2
        assert qstat(r, "g1").get(b"groups") is None        # no group left: the original's reply
        assert groups_info(r)["groups"] == 0


def test_a_plain_job_is_never_held_back_by_a_group(server):
    with server.raw() as r:
        addjob(r, "gp", b"h", 0, "GROUP", "x")
        addjob(r, "gp", b"w", 0, "GROUP", "x")
        assert bodies(r, "gp") == [b"h"]
        addjob(r, "gp", b"plain", 0)
        assert bodies(r, "gp") == [b"plain"]


def test_nack_and_working_keep_the_head_first(server):
    with server.raw() as r:
        head = addjob(r, "gn", b"h", 0, "GROUP", "k", "RETRY", 30)
        nxt = addjob(r, "gn", b"n", 0, "GROUP", "k")
        assert take(r, "gn") == [(head, b"h")]
        assert r.execute("NACK", head) == 1
        assert take(r, "gn") == [(head, b"h")]              # the head again, not the next
        assert r.execute("WORKING", head) == 30
        assert take(r, "gn") == []
        assert r.execute("NACK", head, "DELAY", 1) == 1     # back after a second, still first
        got = r.execute("GETJOB", "TIMEOUT", 5000, "FROM", "gn")
        assert got[0][1] == head
        assert r.execute("ACKJOB", head) == 1
        assert take(r, "gn") == [(nxt, b"n")]


def test_a_retry_requeue_keeps_the_head_first(server):
    with server.raw() as r:
        head = addjob(r, "gr", b"h", 0, "GROUP", "k", "RETRY", 1)
        nxt = addjob(r, "gr", b"n", 0, "GROUP", "k", "RETRY", 1)
        assert take(r, "gr") == [(head, b"h")]
        # the head is requeued after its RETRY; the next job's own RETRY passes meanwhile
        # and it stays held
        got = r.execute("GETJOB", "TIMEOUT", 5000, "FROM", "gr")
        assert got[0][1] == head
        assert show(r, head)[b"additional-deliveries"] == 1
        assert show(r, nxt)[b"state"] == b"active" and show(r, nxt)[b"additional-deliveries"] == 0
        assert r.execute("ACKJOB", head) == 1
        assert take(r, "gr") == [(nxt, b"n")]


def test_a_dead_letter_releases_the_next_job(server):
    with server.raw() as r:
        head = addjob(r, "gd", b"h", 0, "GROUP", "k", "RETRY", 30, "MAXDELIVERIES", 1)
        nxt = addjob(r, "gd", b"n", 0, "GROUP", "k")
        assert take(r, "gd") == [(head, b"h")]
        assert r.execute("NACK", head) == 1                 # its last delivery: dead letter
        assert take(r, "gd:dead") == [(head, b"h")]
        assert show(r, head)[b"dead-lettered-from"] == b"gd"
        assert take(r, "gd") == [(nxt, b"n")]


def test_deljob_dequeue_and_expiry_release_the_next_job(server):
    with server.raw() as r:
        first = addjob(r, "gx", b"1", 0, "GROUP", "k", "TTL", 1, "RETRY", 0, "REPLICATE", 1)
        second = addjob(r, "gx", b"2", 0, "GROUP", "k")
        third = addjob(r, "gx", b"3", 0, "GROUP", "k")
        assert take(r, "gx") == [(first, b"1")]
        # the head expires while delivered (an at-most-once job is never requeued)
        wait_until(lambda: show(r, first) is None, timeout=5)
        assert take(r, "gx") == [(second, b"2")]
        assert r.execute("DELJOB", second) == 1
        assert r.execute("QLEN", "gx") == 1
        assert r.execute("DEQUEUE", third) == 1             # out of the queue, still the head
        assert take(r, "gx") == []
        assert r.execute("ENQUEUE", third) == 1
        assert take(r, "gx") == [(third, b"3")]


def test_a_held_job_is_not_queued_by_enqueue_or_its_delay(server):
    with server.raw() as r:
        head = addjob(r, "gq", b"h", 0, "GROUP", "k")
        later = addjob(r, "gq", b"l", 0, "GROUP", "k", "DELAY", 1)
        assert r.execute("ENQUEUE", later) == 0
        wait_until(lambda: show(r, later)[b"next-awake-within"] > 1000, timeout=5,
                   message="the held job's timer is its expiry once its DELAY passed")
        assert r.execute("QLEN", "gq") == 1
        assert take(r, "gq") == [(head, b"h")]
        assert r.execute("ACKJOB", head) == 1
        assert take(r, "gq") == [(later, b"l")]


def test_show_qstat_and_info_name_the_groups(server):
    with server.raw() as r:
        head = addjob(r, "gs", b"h", 0, "GROUP", "user:42")
        nxt = addjob(r, "gs", b"n", 0, "GROUP", "user:42")
        s1, s2 = show(r, head), show(r, nxt)
        assert s1[b"group"] == s2[b"group"] == b"user:42"
        assert s1[b"group-seq"] < s2[b"group-seq"]
        assert s1[b"backoff"] == 0 and s1[b"deadletter"] is None
        st = qstat(r, "gs")
        assert (st[b"len"], st[b"groups"], st[b"groups-blocked"], st[b"held"]) == (1, 1, 0, 1)
        take(r, "gs")
        info = groups_info(r)
        assert (info["groups"], info["group_jobs"], info["group_held_jobs"]) == (1, 2, 1)
        assert qstat(r, "gs")[b"groups-blocked"] == 1
        # a plain job's SHOW and a plain queue's QSTAT keep the original's replies
        plain = addjob(r, "gs2", b"p", 0)
        assert len(r.execute("SHOW", plain)) == 30
        assert len(r.execute("QSTAT", "gs2")) == 20


def test_jscan_lists_held_jobs(server):
    with server.raw() as r:
        ids = {addjob(r, "gj", b"%d" % i, 0, "GROUP", "k") for i in range(4)}
        found, cursor = set(), 0
        while True:
            cursor, page = r.execute("JSCAN", cursor, "QUEUE", "gj", "COUNT", 100)
            found.update(page)
            if int(cursor) == 0:
                break
        assert found == ids


def test_groups_of_the_same_key_in_two_queues_are_two_groups(server):
    with server.raw() as r:
        a = addjob(r, "gk1", b"a", 0, "GROUP", "same")
        b = addjob(r, "gk2", b"b", 0, "GROUP", "same")
        assert take(r, "gk1") == [(a, b"a")]
        assert take(r, "gk2") == [(b, b"b")]


def test_flushall_forgets_the_groups(server):
    with server.raw() as r:
        addjob(r, "gf", b"a", 0, "GROUP", "k")
        addjob(r, "gf", b"b", 0, "GROUP", "k")
        assert r.execute("DEBUG", "FLUSHALL") == b"OK"
        assert groups_info(r)["group_jobs"] == 0
        jid = addjob(r, "gf", b"c", 0, "GROUP", "k")
        assert take(r, "gf") == [(jid, b"c")]


# ---- the AOF --------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_a_restart_keeps_each_groups_order_and_its_delivered_head(start_server, workers):
    srv = start_server(workers=workers, extra_args=["--appendonly", "yes",
                                                     "--appendfsync", "always"])
    r = srv.raw()
    inflight = [addjob(r, "ga", b"i%d" % i, 0, "GROUP", "in", "RETRY", 1) for i in range(3)]
    waiting = [addjob(r, "ga", b"w%d" % i, 0, "GROUP", "wait", "RETRY", 1) for i in range(3)]
    assert sorted(b for _, b in take(r, "ga")) == [b"i0", b"w0"]
    assert r.execute("ACKJOB", waiting[0]) == 1              # w1 queued, w2 held
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    info = groups_info(r)
    assert (info["groups"], info["group_jobs"], info["group_held_jobs"]) == (2, 5, 3)
    # every job comes back in its group's order, one of a group at a time, after its RETRY
    # (a restart queues nothing at once without aof-enqueue-jobs-once)
    order = {b"i": [], b"w": []}
    while len(order[b"i"]) + len(order[b"w"]) < 5:
        got = r.execute("GETJOB", "TIMEOUT", 5000, "COUNT", 10, "FROM", "ga")
        assert got is not NULL_ARRAY, order
        groups = [job[2][:1] for job in got]
        assert len(groups) == len(set(groups)), got       # never two of a group at once
        for job in got:
            order[job[2][:1]].append(job[1])
            assert r.execute("ACKJOB", job[1]) == 1
    assert order == {b"i": inflight, b"w": waiting[1:]}


def test_a_restart_with_enqueue_once_queues_each_head_at_once(start_server):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes", "--appendfsync", "always",
                                              "--aof-enqueue-jobs-once", "yes"])
    r = srv.raw()
    ids = [addjob(r, "ge", b"%d" % i, 0, "GROUP", "k", "RETRY", 60) for i in range(3)]
    assert r.execute("ACKJOB", ids[0]) == 1
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    for jid in ids[1:]:
        assert take(r, "ge") == [(jid, b"%d" % ids.index(jid))]
        assert take(r, "ge") == []
        assert r.execute("ACKJOB", jid) == 1


# ---- many groups, many consumers ------------------------------------------------------------

def test_many_groups_and_consumers_see_no_order_or_exclusivity_violation(start_server):
    """200 groups x 10 jobs over 4 queues (on both workers), added by 2 producers while 8
    consumers take them (GETJOB across the queues, COUNT 4), NACK one delivery in seven and
    ack the rest: every group is delivered in the order it was added, never two of its jobs
    at once."""
    import random
    import threading

    srv = start_server(workers=2)
    queues = ["gm%d" % i for i in range(4)]
    ngroups, per_group = 200, 10
    added = {g: [] for g in range(ngroups)}
    watch = GroupWatch(ngroups)
    done = threading.Event()

    def produce(part):
        with srv.raw() as r:
            for i in range(per_group):
                for g in range(part, ngroups, 2):
                    jid = addjob(r, queues[g % 4], b"%d:%d" % (g, i), 0, "GROUP", "g%d" % g,
                                 "RETRY", 30)
                    added[g].append(jid)

    def consume(seed):
        with srv.raw() as r:
            watch.consume(r, random.Random(seed), 1 / 7, done, "TIMEOUT", 100, "COUNT", 4,
                          "FROM", *queues)

    producers = [threading.Thread(target=produce, args=(p,)) for p in range(2)]
    consumers = [threading.Thread(target=consume, args=(c,)) for c in range(8)]
    for t in producers + consumers:
        t.start()
    try:
        for t in producers:
            t.join(60)
        with srv.raw() as r:
            wait_until(lambda: groups_info(r)["group_jobs"] == 0, timeout=60,
                       message="every group drained")
    finally:
        done.set()
        for t in consumers:
            t.join(10)
    assert watch.violations == []
    assert watch.delivered == added


def test_a_dead_letter_stays_out_of_its_group_after_a_restart(start_server):
    srv = start_server(workers=1, extra_args=["--appendonly", "yes", "--appendfsync", "always",
                                              "--aof-enqueue-jobs-once", "yes"])
    r = srv.raw()
    dead = [addjob(r, "gdl", b"d%d" % i, 0, "GROUP", "k", "RETRY", 30, "MAXDELIVERIES", 1)
            for i in range(2)]
    for jid in dead:
        assert take(r, "gdl") == [(jid, b"d%d" % dead.index(jid))]
        assert r.execute("NACK", jid) == 1          # to gdl:dead, the next is released
    assert r.execute("QLEN", "gdl:dead") == 2 and groups_info(r)["group_jobs"] == 0
    aof_helpers.kill_node(srv)
    aof_helpers.restart(srv)
    r = srv.raw()
    assert groups_info(r)["group_jobs"] == 0
    assert sorted(take(r, "gdl:dead")) == sorted([(dead[0], b"d0"), (dead[1], b"d1")])
