"""Removing two nodes gracefully while they hold a backlog (docs/faults-membership.md,
"Removing a node"): CLUSTER LEAVING yes on both, consumers on the other nodes only, wait for
registered_jobs:0, stop them, CLUSTER FORGET them. Every job is delivered, including the
ones whose only two copies were on the two leaving nodes, and the others' garbage
collection does not wait for the forgotten nodes."""
import time

import spill_helpers
from support.info import parse_info
from support.jobs import show
from support.resp_client import NULL_ARRAY, RawConn
from support.waits import wait_until
from support.jobs import addjob
from support.resp_client import Status

STALL_S = 20.0      # seconds without a delivery before the drain counts as stuck


def registered_jobs(node):
    return int(parse_info(node.execute("INFO", "jobs"))["registered_jobs"])


def test_two_leaving_nodes_hand_over_their_backlog_then_are_forgotten(start_cluster):
    c = start_cluster(4)
    ids = set()
    both_leaving = 0                    # jobs whose copies are exactly nodes 0 and 1
    leavers = {c.ids[0].encode(), c.ids[1].encode()}
    for i in (0, 1, 2):
        with RawConn(c[i].port) as r:
            for k in range(30):
                jid = addjob(r, "bk", b"n%d-%d" % (i, k), 5000, "REPLICATE", 2 if i < 2 else 3,
                                "RETRY", 60)
                ids.add(jid)
                both_leaving += set(show(r, jid)[b"nodes-delivered"]) == leavers
    assert both_leaving > 0, "no job had its two copies on the leaving nodes; add more jobs"
    for i in (0, 1):
        assert c[i].execute("CLUSTER", "LEAVING", "yes") == Status(b"OK")
    for i in (2, 3):
        wait_until(lambda i=i: c.cluster_info(i)["cluster_reachable_nodes"] == "1", timeout=5)
    got = {}
    conns = [RawConn(c[i].port, timeout=20) for i in (2, 3)]
    last = time.monotonic()
    try:
        while len(got) < len(ids):
            for r in conns:
                reply = r.execute("GETJOB", "TIMEOUT", 1000, "COUNT", 10, "FROM", "bk")
                if reply is NULL_ARRAY:
                    continue
                last = time.monotonic()
                for _q, jid, _body in reply:
                    got[jid] = got.get(jid, 0) + 1
                assert r.execute("ACKJOB", *[j[1] for j in reply]) == len(reply)
            assert time.monotonic() - last < STALL_S, f"drain stalled at {len(got)}/{len(ids)}"
    finally:
        for r in conns:
            r.close()
    assert set(got) == ids and set(got.values()) == {1}
    for i in (0, 1):
        wait_until(lambda i=i: registered_jobs(c[i]) == 0, timeout=15,
                   message="a leaving node still holds jobs")
    for i in (0, 1):
        c[i].stop()
    for i in (2, 3):
        for gone in c.ids[:2]:
            assert c[i].execute("CLUSTER", "FORGET", gone) == Status(b"OK")
    for i in (2, 3):
        wait_until(lambda i=i: registered_jobs(c[i]) == 0, timeout=15,
                   message="acks wait for a forgotten node")
        assert c.cluster_info(i)["cluster_known_nodes"] == "2"


def test_a_leaving_node_counts_its_spilled_copies_until_they_are_acknowledged(start_cluster):
    """registered_jobs:0 tells the operator a leaving node can go (SPEC 8.7). Copies spilled
    to disk under maxmemory (docs/memory.md, "Spilling") are jobs it holds too: counted as
    such, the node is not reported empty while they may be the last copies of their jobs.
    (They used to be left out, so a node with only spilled copies read registered_jobs:0.)"""
    c = start_cluster(3, workers=1, extra_args=["--maxmemory", "8mb", "--spill-keep", "64"])
    n = 6_000           # 6 MB of bodies, a copy on each node: past the 60% spill threshold
    ids, _ = spill_helpers.fill_concurrently([c[0]], n, ["sp"], "REPLICATE", 3, "RETRY", 600)
    spilled = int(parse_info(c[1].execute("INFO", "memory"))["spilled_jobs"])
    assert spilled > 0
    assert c[1].execute("CLUSTER", "LEAVING", "yes") == Status(b"OK")
    assert registered_jobs(c[1]) == n       # in RAM or on disk, one copy of each job
    _, seen = spill_helpers.drain([spill_helpers.client(c[0])], n, ["sp"])
    assert seen == set(ids)
    # acknowledged: the copies are loaded back by their SETACK and collected
    wait_until(lambda: registered_jobs(c[1]) == 0, timeout=60,
               message="the leaving node still holds copies")
    assert int(parse_info(c[1].execute("INFO", "memory"))["spilled_jobs"]) == 0
