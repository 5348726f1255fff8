"""Job groups across the nodes of a cluster (docs/job-groups.md, "Where a group lives"): each
group has a home, found by every node on its own; the home gives each job its place and
queues the group's head, and federation moves the head to the consumers of other nodes.
Jobs added through every node in turn come out in order, one at a time; NACK, RETRY and
dead letters keep the rule; the heir carries on when the home dies."""
import random
import threading

import pytest

from support.group_watch import GroupWatch
from support.info import parse_info
from support.jobs import addjob
from support.resp_client import NULL_ARRAY
from support.waits import wait_until

pytestmark = pytest.mark.server


def take_one(r, queue, timeout_ms=5000):
    """(id, body) of the next job GETJOB gives within the timeout, or None."""
    got = r.execute("GETJOB", "TIMEOUT", timeout_ms, "FROM", queue)
    return None if got is NULL_ARRAY or got is None else (got[0][1], got[0][2])


def nohang(r, queue):
    got = r.execute("GETJOB", "NOHANG", "COUNT", 100, "FROM", queue)
    return [] if got is NULL_ARRAY or got is None else [(j[1], j[2]) for j in got]


def group_jobs(node):
    with node.raw() as r:
        return int(parse_info(r.execute("INFO", "groups"))["group_jobs"])


@pytest.fixture
def cluster3(start_cluster):
    return start_cluster(3, workers=2)


@pytest.mark.parametrize("replicate", [1, 2, 3])
def test_jobs_added_through_every_node_come_out_in_order_one_at_a_time(cluster3, replicate):
    """Six jobs of a group added through nodes 0, 1, 2 in turn, each answered before the
    next is sent, are delivered in that order to a consumer on another node, and never
    two at once: the next comes only when the one delivered is acked."""
    c = cluster3
    ids = []
    for i in range(6):
        with c[i % 3].raw() as r:
            ids.append(addjob(r, "gq", b"%d" % i, 0, "GROUP", "k", "REPLICATE", replicate,
                              "RETRY", 30))
    seen = []
    with c[1].raw() as r:
        for i in range(6):
            got = take_one(r, "gq")
            assert got == (ids[i], b"%d" % i), (i, got, seen)
            seen.append(got)
            # the next is not deliverable while this one is not acked, on any node
            for node in c:
                with node.raw() as other:
                    assert nohang(other, "gq") == []
            assert r.execute("ACKJOB", got[0]) == 1
    for node in c:
        wait_until(lambda node=node: group_jobs(node) == 0, timeout=10,
                   message="every node forgets the group's jobs")


def test_nack_retry_and_a_dead_letter_in_the_middle_of_a_group(cluster3):
    """Through consumers on every node in turn: a NACK and a RETRY requeue give the same
    job again (its group waits behind it), and a job that reaches MAXDELIVERIES moves to
    its dead-letter queue and releases the next."""
    c = cluster3
    ids = []
    for i in range(4):
        with c[i % 3].raw() as r:
            ids.append(addjob(r, "gn", b"%d" % i, 0, "GROUP", "k", "RETRY", 1,
                              "MAXDELIVERIES", 2, "DEADLETTER", "gn-dead"))
    with c[0].raw() as r0, c[1].raw() as r1, c[2].raw() as r2:
        assert take_one(r0, "gn") == (ids[0], b"0")
        assert r0.execute("NACK", ids[0]) == 1
        assert take_one(r1, "gn") == (ids[0], b"0")         # again, not the next one
        assert r1.execute("ACKJOB", ids[0]) == 1
        assert take_one(r2, "gn") == (ids[1], b"1")
        # not acked: its RETRY (1 s) requeues it, still first of its group
        assert take_one(r0, "gn", 5000) == (ids[1], b"1")
        assert r0.execute("ACKJOB", ids[1]) == 1
        # two deliveries and a NACK: the third would pass MAXDELIVERIES 2
        assert take_one(r1, "gn") == (ids[2], b"2")
        assert r1.execute("NACK", ids[2]) == 1
        assert take_one(r2, "gn") == (ids[2], b"2")
        assert r2.execute("NACK", ids[2]) == 1
        assert take_one(r0, "gn") == (ids[3], b"3")         # ids[2] went to gn-dead
        assert r0.execute("ACKJOB", ids[3]) == 1
        wait_until(lambda: r0.execute("QLEN", "gn-dead", "CLUSTER") >= 1, timeout=10,
                   message="the dead letter is queued")
        holder = next(r for r in (r0, r1, r2) if r.execute("QLEN", "gn-dead") >= 1)
        assert nohang(holder, "gn-dead") == [(ids[2], b"2")]


def test_the_heir_carries_on_in_order_when_the_home_dies(cluster3):
    """REPLICATE 3: every node holds the group. The home is killed (kill -9) with the
    group's head delivered and not acked: once the others mark it failed, the heir
    becomes the home, requeues the head after its RETRY and delivers the rest in order."""
    c = cluster3
    ids = []
    for i in range(5):
        with c[i % 3].raw() as r:
            ids.append(addjob(r, "gh", b"%d" % i, 0, "GROUP", "k", "RETRY", 2))
    home = next(i for i in range(3) if c[i].execute("QLEN", "gh") == 1)
    with c[home].raw() as r:
        assert take_one(r, "gh") == (ids[0], b"0")
        assert r.execute("ACKJOB", ids[0]) == 1
        assert take_one(r, "gh") == (ids[1], b"1")          # delivered, never acked
    c.kill(home)
    alive = [i for i in range(3) if i != home]
    wait_until(lambda: all("fail" in (c.flags_of(i, home) or []) for i in alive),
               timeout=20, message="the home marked failed")
    got = []
    with c[alive[0]].raw() as r:
        deadline_ms = 15000
        while len(got) < 4:
            job = take_one(r, "gh", deadline_ms)
            assert job is not None, got
            got.append(job[1])
            assert r.execute("ACKJOB", job[0]) == 1
    assert got == [b"1", b"2", b"3", b"4"]


def test_a_thousand_groups_through_three_nodes_to_eight_consumers(cluster3):
    """1,000 groups x 20 jobs, each group's jobs added through the 3 nodes in turn (each
    ADDJOB answered before the next of its group is sent), taken by 8 consumers spread over
    the 3 nodes, one NACK in ten: no group is delivered out of order, and no two jobs of a
    group are ever in flight at once."""
    c = cluster3
    ngroups, per_group, producers = 1000, 20, 4
    added = {g: [] for g in range(ngroups)}
    watch = GroupWatch(ngroups)
    done = threading.Event()

    def produce(part):
        conns = [node.raw(timeout=30) for node in c]
        try:
            for i in range(per_group):
                for g in range(part, ngroups, producers):
                    r = conns[(g + i) % 3]
                    added[g].append(addjob(r, "gt", b"%d:%d" % (g, i), 0, "GROUP",
                                           "g%d" % g, "RETRY", 60))
        finally:
            for conn in conns:
                conn.close()

    def consume(seed):
        with c[seed % 3].raw(timeout=30) as r:
            watch.consume(r, random.Random(seed), 0.1, done, "TIMEOUT", 200, "COUNT", 8,
                          "FROM", "gt")

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    threads += [threading.Thread(target=consume, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    try:
        for t in threads[:producers]:
            t.join(300)
        for node in c:
            wait_until(lambda node=node: group_jobs(node) == 0, timeout=240,
                       message="every group drained on every node")
    finally:
        done.set()
        for t in threads:
            t.join(30)
    assert watch.violations == []
    bad = [g for g in range(ngroups) if watch.delivered[g] != added[g]]
    assert bad == [], [(g, [added[g].index(j) if j in added[g] else j for j in watch.delivered[g]]) for g in bad[:3]]


def qstat(r, *args):
    """QSTAT as a dict; {} for a node that has no such queue (the groups' homes are other
    nodes and no job of it was queued there: about one run in 40 with random node IDs)."""
    reply = r.execute("QSTAT", *args)
    if not isinstance(reply, list):
        return {}
    return dict(zip(reply[0::2], reply[1::2]))


def test_qstat_counts_each_group_at_its_home_and_qstat_cluster_sums_them(cluster3):
    """Every node holds every job (REPLICATE 3): QSTAT on a node counts the groups it is the
    home of, so QSTAT ... CLUSTER counts 12 groups, 36 jobs held behind 12 heads."""
    c = cluster3
    for i in range(4):
        for g in range(12):
            with c[(g + i) % 3].raw() as r:
                addjob(r, "gs", b"%d:%d" % (g, i), 0, "GROUP", "g%d" % g)
    # a head added through another node is queued at its home once ENQUEUE reaches it,
    # which leaves after the producer's reply
    with c[0].raw() as r:
        wait_until(lambda: r.execute("QLEN", "gs", "CLUSTER") == 12, timeout=10,
                   message="every group's head queued at its home")
    per_node = []
    for node in c:
        with node.raw() as r:
            stat = qstat(r, "gs")
            per_node.append(stat.get(b"groups", 0))
            if b"groups" in stat:
                assert stat[b"held"] == 3 * stat[b"groups"] and stat[b"len"] == stat[b"groups"]
    assert sum(per_node) == 12
    with c[0].raw() as r:
        total = qstat(r, "gs", "CLUSTER")
        assert (total[b"groups"], total[b"groups-blocked"], total[b"held"], total[b"len"]) == (
            12, 0, 36, 12)
        got = r.execute("GETJOB", "COUNT", 100, "TIMEOUT", 5000, "FROM", "gs")
        assert got                                      # some heads, from here or handed over
        wait_until(lambda: qstat(r, "gs", "CLUSTER")[b"groups-blocked"] == len(got),
                   timeout=10, message="the delivered heads block their groups")


def test_the_homes_restart_with_the_aof_keeps_every_groups_order(start_cluster):
    """AOF on every node: every node stops and starts again, one after another; each group
    comes out in the order it was added, one at a time, whatever its home did meanwhile."""
    c = start_cluster(3, workers=2, extra_args=["--appendonly", "yes"])
    ids = {g: [] for g in range(6)}
    for i in range(4):
        for g in range(6):
            with c[(g + i) % 3].raw() as r:
                ids[g].append(addjob(r, "gr", b"%d:%d" % (g, i), 0, "GROUP", "g%d" % g,
                                     "RETRY", 2))
    for i in range(3):
        c[i].stop()
        c.restart(i)
        c.wait_mesh(timeout=30)
    seen = {g: [] for g in range(6)}
    with c[1].raw(timeout=30) as r:
        while sum(len(v) for v in seen.values()) < 24:
            got = r.execute("GETJOB", "TIMEOUT", 10000, "COUNT", 10, "FROM", "gr")
            assert got is not NULL_ARRAY, seen
            groups = [int(body.split(b":")[0]) for _, _, body in got]
            assert len(set(groups)) == len(groups), got     # one job of a group at a time
            for (_, jid, body), g in zip(got, groups):
                if not seen[g] or seen[g][-1] != jid:
                    seen[g].append(jid)
            r.execute("ACKJOB", *[jid for _, jid, _ in got])
    assert seen == ids
