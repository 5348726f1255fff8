"""disque.client against real nodes: every typed method and option, with the blocking
client and the asyncio one (tests/support/clients.py), on 1 and 3 workers."""
import time

import pytest

from disque.client import Hello, Job, JobInfo, QueueStat, errors
from support.clients import Api


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


@pytest.fixture(params=["server1", "server3"], ids=["w1", "w3"])
def api(request, kind):
    srv = request.getfixturevalue(request.param)
    srv.flush()
    api = Api(kind, "127.0.0.1:%d" % srv.port)
    yield api
    api.close()


def test_add_get_ack(api):
    jid = api.add_job("cq", b"payload")
    assert isinstance(jid, str) and len(jid) == 40 and jid.startswith("D-")
    [job] = api.get_jobs("cq", timeout=1)
    assert isinstance(job, Job)
    assert (job.queue, job.id, job.body) == ("cq", jid, b"payload")
    assert job.nacks is None and job.deliveries is None
    assert job.node == api.node
    assert api.ack_job(job) == 1
    assert api.show(jid) is None
    assert api.ack_job(jid) == 0


def test_bodies_are_bytes_and_names_round_trip(api):
    body = bytes(range(256)) * 4
    api.add_job(b"q\xffbin", body)
    [job] = api.get_jobs(b"q\xffbin", timeout=1)
    assert job.body == body and job.queue == b"q\xffbin"      # not UTF-8: stays bytes
    assert api.qlen(job.queue) == 0
    api.add_job("textq", "é text")
    assert api.get_job("textq", timeout=1).body == "é text".encode()


def test_add_job_options(api):
    jid = api.add_job("opts", b"x", 1.5, replicate=1, retry=7, ttl=120, maxlen=10, backoff=60,
                      max_deliveries=4, deadletter="graveyard")
    info = api.show(jid)
    assert isinstance(info, JobInfo)
    assert (info.queue, info.state, info.repl, info.retry, info.body) == ("opts", "queued", 1, 7, b"x")
    assert 118 <= info.ttl <= 120
    assert (info.backoff, info.max_deliveries, info.deadletter) == (60, 4, "graveyard")
    assert info.retry_interval == 7 and info.dead_lettered_from is None
    assert info.nodes_delivered == (api.node,)
    plain = api.show(api.add_job("opts", b"y", asynchronous=True))
    assert plain.backoff is None and plain.max_deliveries is None
    with pytest.raises(errors.MaxLenError):
        for _ in range(20):
            api.add_job("opts", b"z", maxlen=3)
    assert api.qlen("opts") == 3


def test_groups(api):
    """add_job(group=): one job of a group at a time, in order (docs/job-groups.md); SHOW
    and QSTAT name the group."""
    first = api.add_job("grouped", b"1", group="user:7")
    second = api.add_job("grouped", b"2", group="user:7")
    other = api.add_job("grouped", b"3", group="user:8")
    info = api.show(second)
    assert info.group == "user:7" and info.group_seq > api.show(first).group_seq
    assert api.show(api.add_job("plain", b"p")).group is None
    assert sorted(j.id for j in api.get_jobs("grouped", count=10, nohang=True)) == \
        sorted([first, other])
    stat = api.qstat("grouped")
    assert (stat.len, stat.groups, stat.groups_blocked, stat.held) == (0, 2, 2, 1)
    assert api.qstat("plain").groups == 0
    assert api.ack_job(first) == 1
    assert [j.id for j in api.get_jobs("grouped", count=10, nohang=True)] == [second]
    with pytest.raises(errors.DisqueError, match="GROUP needs a key"):
        api.add_job("grouped", b"x", group="")


def test_delay_holds_the_job_back(api):
    jid = api.add_job("later", b"x", delay=1)
    assert api.qlen("later") == 0 and api.show(jid).delay == 1
    assert api.get_jobs("later", nohang=True) == []
    [job] = api.get_jobs("later", timeout=5)
    assert job.id == jid


def test_option_checks_happen_before_sending(api):
    for kw in (dict(delay=1.5), dict(retry=-1), dict(ttl=0), dict(replicate=0),
               dict(maxlen=0), dict(max_deliveries=0)):
        with pytest.raises(ValueError):
            api.add_job("bad", b"x", **kw)
    with pytest.raises(ValueError):
        api.add_job("bad", b"x", 0)                 # 0 is no timeout at all: say None
    with pytest.raises(TypeError):
        api.add_job("bad", b"x", replicate="2")
    with pytest.raises(ValueError):
        api.get_jobs()
    with pytest.raises(ValueError):
        api.get_jobs("q", from_prefix="q")
    assert api.qlen("bad") == 0


def test_server_side_option_errors_keep_their_text(api):
    with pytest.raises(errors.ResponseError, match="BACKOFF time must not be less than RETRY"):
        api.add_job("bad", b"x", retry=10, backoff=5)
    with pytest.raises(errors.ResponseError, match="DEADLETTER needs MAXDELIVERIES"):
        api.add_job("bad", b"x", deadletter="d")


def test_get_jobs_count_timeout_nohang_and_several_queues(api):
    ids = [api.add_job("many", b"%d" % i) for i in range(5)]
    other = api.add_job("other", b"o")
    jobs = api.get_jobs("many", "other", count=10, timeout=1)
    assert sorted(j.id for j in jobs) == sorted(ids + [other])
    t0 = time.monotonic()
    assert api.get_jobs("many", timeout=0.2) == []
    assert time.monotonic() - t0 >= 0.15
    assert api.get_jobs("many", timeout=0) == [] and api.get_jobs("many", nohang=True) == []
    assert api.get_job("many", timeout=0.05) is None
    assert api.ack_job(*jobs) == 6


def test_from_prefix(api):
    a, b = api.add_job("tenant1:a", b"a"), api.add_job("tenant1:b", b"b")
    api.add_job("tenant2:c", b"c")
    jobs = api.get_jobs(from_prefix="tenant1:", count=5, timeout=1)
    assert sorted(j.id for j in jobs) == sorted([a, b])


def test_nack_counters_and_delay(api):
    api.add_job("nq", b"x", retry=30)
    job = api.get_job("nq", timeout=1, withcounters=True)
    assert (job.nacks, job.additional_deliveries, job.deliveries) == (0, 0, 1)
    assert api.wait(job.nack()) == 1
    job = api.get_job("nq", timeout=1, withcounters=True)
    assert (job.nacks, job.deliveries) == (1, 2)
    assert api.wait(job.nack(delay=1)) == 1
    assert api.qlen("nq") == 0 and api.show(job).nacks == 2
    job = api.get_job("nq", timeout=5, withcounters=True)
    assert job.nacks == 2
    assert api.nack_job(job.id, delay=0) == 1
    assert api.qlen("nq") == 1


def test_working_enqueue_dequeue_deljob_fastack(api):
    jid = api.add_job("wq", b"x", retry=9)
    job = api.get_job("wq", timeout=1)
    assert api.wait(job.working()) == 9 and api.working(jid) == 9
    assert api.enqueue(job) == 1 and api.qlen("wq") == 1
    assert api.dequeue(jid) == 1 and api.qlen("wq") == 0
    assert api.show(jid).state == "active"
    assert api.del_job(jid) == 1 and api.show(jid) is None
    job2 = Job("wq", api.add_job("wq", b"y"), b"y", client=api.client)
    assert api.wait(job2.fastack()) == 1 and api.show(job2.id) is None
    assert isinstance(api.wait(Job("wq", api.add_job("wq", b"z"), b"", client=api.client).show()),
                      JobInfo)


def test_queue_commands(api):
    ids = [api.add_job("peek", b"%d" % i) for i in range(4)]
    assert [j.id for j in api.qpeek("peek", 2)] == ids[:2]
    assert [j.id for j in api.qpeek("peek", -1)] == ids[-1:]
    assert api.qpeek("peek", 0) == [] and api.qpeek("nothing", 3) == []
    stat = api.qstat("peek")
    assert isinstance(stat, QueueStat)
    assert (stat.name, stat.len, stat.jobs_in, stat.pause) == ("peek", 4, 4, "none")
    assert api.qstat("never-made") is None
    assert api.pause("peek", "in") == "in"
    with pytest.raises(errors.PausedError):
        api.add_job("peek", b"x")
    assert api.pause("peek", "none") == "none"
    assert api.pause("peek", "state") == "none"
    with pytest.raises(ValueError):
        api.pause("peek", "sideways")


def test_scans(api):
    for q in ("s1", "s2", "s3"):
        api.add_job(q, b"x")
    assert {"s1", "s2", "s3"} <= set(api.collect(api.scan_queues(count=1)))
    cursor, names = api.qscan(busyloop=True, minlen=1)
    assert cursor == 0 and {"s1", "s2", "s3"} <= set(names)
    ids = api.collect(api.scan_jobs(queue="s2"))
    assert len(ids) == 1 and api.show(ids[0]).queue == "s2"
    cursor, infos = api.jscan(busyloop=True, queue="s3", states=["queued"], reply="all")
    assert [i.queue for i in infos] == ["s3"]
    with pytest.raises(ValueError):
        api.jscan(states=["lost"])


def test_node_commands(api):
    hello = api.hello()
    assert isinstance(hello, Hello) and hello.node_id == api.node and hello.version == 1
    assert [n.id for n in hello.nodes] == [api.node]
    assert api.ping() is True
    info = api.info()
    assert info["tcp_port"] == api.address[1]
    assert "registered_jobs" in api.info("jobs")
    assert api.execute_command("QLEN", "x") == 0
    assert set(api.nodes) == {api.node}
