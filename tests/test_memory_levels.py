"""The original's memory levels (SPEC 9, docs/memory.md), with spilling on (the default) and
with `spill no`: above 75% of maxmemory a node of a cluster replicates new jobs to other
nodes and keeps no copy (with spilling, counting its spilled jobs as if they were in RAM);
-OOM only above 95% of used_memory. Spilling serves what the cluster cannot take: a lone
node, every node above its level, REPLICATE larger than the nodes below theirs."""
import pytest

from support.info import parse_info
from support.jobs import show
from support.waits import wait_until
from support.jobs import addjob

MB = 1 << 20
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
SPILL_MODES = ["spill-default", "spill-no"]


def memory_info(r):
    return {k: (int(v) if v.lstrip("-").isdigit() else v)
            for k, v in parse_info(r.execute("INFO", "memory")).items()}


def set_spill(r, mode):
    """spill-default: the default configuration, untouched; spill-no: the original's."""
    if mode == "spill-no":
        assert r.call("CONFIG", "SET", "spill", "no") == b"+OK\r\n"


def held_by(cluster, jid):
    return [i for i in range(len(cluster)) if show(cluster[i].raw(), jid) is not None]


@pytest.mark.slow
@pytest.mark.parametrize("mode", SPILL_MODES)
def test_maxmemory_3mb_turns_to_external_replication_not_oom(start_cluster, mode):
    """The original's own test (tests/cluster 02-jobs-replication.tcl) on our default
    configuration: a node at 3 MB of a cluster with room stops keeping jobs, never -OOM."""
    c = start_cluster(3)
    r = c[0].raw()
    set_spill(r, mode)
    assert r.call("CONFIG", "SET", "maxmemory", "3mb") == b"+OK\r\n"
    body = b"p" * 200
    added = 0
    for added in range(1, 50001):
        repl = 1 + added % 2                        # REPLICATE 1 and 2, alternately
        reply = r.call("ADDJOB", "mq", body, 5000, "REPLICATE", repl)
        assert reply.startswith(b"+D-"), (added, reply)     # never -OOM
        if show(r, reply[1:-2]) is None:
            break
    else:
        pytest.fail("jobs were still kept locally after 50000")
    assert 1000 < added < 50000, added
    info = memory_info(r)
    # above 75% counting spilled jobs as in RAM (the same as used_memory without spilling),
    # under 95% of what is really in RAM
    assert 3 * MB * 0.75 < info["used_memory_with_spilled"], info
    assert info["used_memory"] < 3 * MB * 0.95, info
    assert info["memory_level_with_spilled"] >= 1, info
    if mode == "spill-no":
        assert info["spilled_jobs"] == 0 and info["memory_level"] == 1, info
    # above 75%: each job is held by REPLICATE other nodes and not here
    for repl in (1, 2):
        jid = addjob(r, "mq", body, 5000, "REPLICATE", repl)
        wait_until(lambda: len(held_by(c, jid)) == repl, timeout=5)
        assert 0 not in held_by(c, jid)
    # a sane limit again: local copies at once
    assert r.call("CONFIG", "SET", "maxmemory", "1gb") == b"+OK\r\n"

    def local_copy():
        jid = addjob(r, "mq", body, 5000, "REPLICATE", 1)
        return show(r, jid) is not None
    wait_until(local_copy, timeout=5, message="no local copies after CONFIG SET maxmemory 1gb")
    jid = addjob(r, "mq", body, 5000, "REPLICATE", 2)
    held = held_by(c, jid)
    assert 0 in held and len(held) == 2, held


@pytest.mark.slow
@pytest.mark.parametrize("queues", [1, 300])
@pytest.mark.parametrize("mode", SPILL_MODES)
def test_a_lone_node_answers_oom_only_above_95_percent(start_server, mode, queues):
    """One node at 3 MB: -OOM comes at 95% of used_memory, never from one step of the spill
    index or from the heads of the queues (spill-keep); with spilling the node first holds
    several times what fits in RAM."""
    srv = start_server(workers=2)
    r = srv.raw()
    set_spill(r, mode)
    maxmemory = 3 * MB
    assert r.call("CONFIG", "SET", "maxmemory", str(maxmemory)) == b"+OK\r\n"
    body = b"b" * 200
    names = ["lq%d" % i for i in range(queues)]
    samples = [memory_info(r)["used_memory"]]
    added = 0
    reply = None
    while added < 200_000:
        reply = r.call("ADDJOB", names[added % queues], body, 0)
        if not reply.startswith(b"+D-"):
            break
        added += 1
        if added % 250 == 0:
            samples.append(memory_info(r)["used_memory"])
    assert reply == OOM, (added, reply)
    info = memory_info(r)
    samples.append(info["used_memory"])
    # no single step crosses from under 75% to over 95%: the index grows in small blocks
    steps = [b - a for a, b in zip(samples, samples[1:])]
    assert max(steps) < maxmemory * 0.2, (max(steps), samples)
    assert info["used_memory"] > maxmemory * 0.9, info
    in_ram = maxmemory * 95 // 100 // 600           # jobs of 200 bytes that fit in RAM
    if mode == "spill-no":
        assert in_ram // 2 < added < in_ram * 2, (added, in_ram)
        assert info["spilled_jobs"] == 0, info
    else:
        assert added > in_ram * 2, (added, in_ram, info)
        assert info["spilled_jobs"] > added // 2, info
        assert info["spill_index_bytes"] / info["spilled_jobs"] < 150, info
    # every job is still there, spilled or not, and the node answers the rest
    assert sum(r.execute("QLEN", q) for q in names) == added
    assert r.call("PING") == b"+PONG\r\n"


def fill_until_every_node_is_high(c, rounds=40_000):
    """ADDJOB REPLICATE 2 through node 0 until every node is above 75% counting its spilled
    jobs (memory_level_with_spilled): [ids]."""
    r = c[0].raw()
    body = b"f" * 200
    ids = []
    for i in range(rounds):
        reply = r.call("ADDJOB", "fq", body, 5000, "REPLICATE", 2, "RETRY", 3600)
        assert reply.startswith(b"+D-"), (i, reply)
        ids.append(reply[1:-2])
        if i % 200 == 199 and all(memory_info(n.raw())["memory_level_with_spilled"] >= 1
                                  for n in c.nodes):
            return ids
    pytest.fail("the nodes never all went above 75%")


@pytest.mark.slow
def test_when_every_node_is_above_its_level_spilling_serves(start_cluster):
    """Every node of the cluster above 75% counting spilled jobs: ADDJOB REPLICATE 2 keeps
    its local copy and one elsewhere, and the bodies spill, instead of -NOREPL."""
    c = start_cluster(3, extra_args=["--maxmemory", "3mb"])
    ids = fill_until_every_node_is_high(c)
    r = c[0].raw()

    def add():
        reply = r.call("ADDJOB", "fq", b"f" * 200, 5000, "REPLICATE", 2, "RETRY", 3600)
        assert reply.startswith(b"+D-"), reply
        ids.append(reply[1:-2])
        return ids[-1]
    # node 0 learns the others' levels from their bus headers (pings): within a few passes
    wait_until(lambda: 0 in held_by(c, add()), timeout=10,
               message="node 0 never kept a job with every node above its level")
    for _ in range(300):
        add()
    held = held_by(c, ids[-1])
    assert 0 in held and len(held) == 2, held
    total_spilled = sum(memory_info(n.raw())["spilled_jobs"] for n in c.nodes)
    assert total_spilled > 0
    for n in c.nodes:
        info = memory_info(n.raw())
        assert info["used_memory"] < 3 * MB * 0.95, info
    # REPLICATE 3 on 3 nodes that are all high: kept here and on both others
    jid = addjob(r, "fq", b"f" * 200, 5000, "REPLICATE", 3, "RETRY", 3600)
    assert sorted(held_by(c, jid)) == [0, 1, 2]
    # everything comes back (federation may move jobs to a node already drained)
    want = set(ids) | {jid}
    got = set()
    conns = [node.raw() for node in c.nodes]

    def drained():
        for conn in conns:
            while True:
                jobs = conn.execute("GETJOB", "NOHANG", "COUNT", 500, "FROM", "fq")
                if not jobs:
                    break
                conn.execute("ACKJOB", *[j[1] for j in jobs])
                got.update(j[1] for j in jobs)
        return want <= got
    wait_until(drained, timeout=30, message="jobs missing after the drain")


@pytest.mark.slow
def test_without_spilling_every_node_above_its_level_refuses_as_the_original(start_cluster):
    """`spill no`: the original's levels exactly: ADDJOB on a full node of a full cluster
    gets -NOREPL (no node takes the copies) or -OOM, never a job kept locally."""
    c = start_cluster(3, extra_args=["--maxmemory", "3mb", "--spill", "no"])
    r = c[0].raw()
    body = b"f" * 200
    for i in range(40_000):
        reply = r.call("ADDJOB", "fq", body, 500, "REPLICATE", 2, "RETRY", 3600)
        if not reply.startswith(b"+D-"):
            break
    else:
        pytest.fail("the full cluster never refused a job")
    assert reply.startswith(b"-NOREPL") or reply == OOM, reply
    for n in c.nodes:
        assert memory_info(n.raw())["spilled_jobs"] == 0
