"""The worker's scan log in-process (QSCAN / JSCAN guarantees under random changes) and the
memory accounting of jobs and queues."""

import pytest


OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


# ---------------------------------------------------------------------------
# The worker's scan log, in-process: the guarantee under random changes
# ---------------------------------------------------------------------------


def _shard():
    from disque.workers.shard import Shard
    return Shard(0, 1, b"0123456789abcdef0123456789abcdef01234567")


def _worker_scan(shard, kind, steps, opts, on_step=None):
    """Iterate one worker's share the way the front-end does; `on_step` runs between calls.
    As the front-end does, the scan stops at the elements added after it began (bound)."""
    low, out = 0, []
    bits = 50
    bound = (shard.job_log if kind == "j" else shard.queue_log).next_seq
    while True:
        nxt, used, found, data = shard.scan(kind, low, bits, bound, -1, steps, opts)
        assert used <= steps
        out.append(data)
        if nxt < 0:
            return b"".join(out)
        low = nxt & ((1 << bits) - 1)
        assert low
        if on_step:
            on_step()


@pytest.mark.parametrize("seed", range(8))
def test_scan_log_returns_every_stable_element_under_random_changes(seed):
    import random
    rng = random.Random(seed)
    shard = _shard()
    add = lambda q: shard.cmd_addjob([b"ADDJOB", q, b"b", b"0"])[1:-2]
    stable = {add(b"q%d" % rng.randrange(50)) for _ in range(300)}
    churn = [add(b"c%d" % rng.randrange(50)) for _ in range(300)]

    def mutate():
        for _ in range(rng.randrange(0, 200)):
            if churn and rng.random() < 0.5:
                jid = churn.pop(rng.randrange(len(churn)))
                shard.delete_job(shard.jobs[jid])
            else:
                churn.append(add(b"c%d" % rng.randrange(80)))
        # queues come and go too
        for q in list(shard.queues.values()):
            if q.name.startswith(b"c") and not len(q.jobs) and rng.random() < 0.3:
                shard.remove_queue(q)

    data = _worker_scan(shard, "j", rng.choice((1, 3, 10, 100)), [None, 0, False], mutate)
    seen = set(data.split(b"\r\n"))
    assert {b"+" + j for j in stable} <= seen
    assert shard.job_log.n_dead <= len(shard.job_log.items)
    data = _worker_scan(shard, "q", rng.choice((1, 3, 10)), [-1, -1, -1], mutate)
    names = set(data.split(b"\r\n"))
    assert {b"q%d" % i for i in range(50) if b"q%d" % i in shard.queues} <= names


def test_scan_log_compaction_keeps_cursors_valid():
    shard = _shard()
    ids = [shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])[1:-2] for _ in range(5000)]
    # a cursor in the middle of the log
    nxt, used, found, _ = shard.scan("j", 0, 50, -1, -1, 2500, [None, 0, False])
    assert found == 2500 and nxt > 0
    # delete most jobs on both sides of it: the log compacts (positions move)
    before = len(shard.job_log.items)
    for jid in ids[:2400] + ids[2600:4900]:
        shard.delete_job(shard.jobs[jid])
    assert len(shard.job_log.items) < before
    data = _worker_scan_from(shard, nxt)
    got = [x[1:] for x in data.split(b"\r\n") if x]
    assert got == ids[2500:2600] + ids[4900:]
    assert shard.data_bytes > 0
    shard.flushall()
    assert shard.data_bytes == 0 and len(shard.job_log.items) == 0


def _worker_scan_from(shard, seq):
    out = []
    low = seq
    while True:
        nxt, _, _, data = shard.scan("j", low, 50, -1, -1, 7, [None, 0, False])
        out.append(data)
        if nxt < 0:
            return b"".join(out)
        low = nxt


def test_scan_bound_stops_at_elements_added_later():
    shard = _shard()
    first = [shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])[1:-2] for _ in range(10)]
    bound = shard.job_log.next_seq
    for _ in range(10):
        shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])
    nxt, used, found, data = shard.scan("j", 0, 50, bound, -1, -1, [None, 0, False])
    assert nxt == -1 and found == 10 and used == 10
    assert [x[1:] for x in data.split(b"\r\n") if x] == first


def test_memory_accounting_follows_jobs_and_queues():
    shard = _shard()
    assert shard.data_bytes == 0
    jid = shard.cmd_addjob([b"ADDJOB", b"queue", b"x" * 1000, b"0"])[1:-2]
    per_job_and_queue = shard.data_bytes
    assert per_job_and_queue > 1000
    shard.delete_job(shard.jobs[jid])
    assert 0 < shard.data_bytes < per_job_and_queue          # the queue remains
    shard.remove_queue(shard.queues[b"queue"])
    assert shard.data_bytes == 0
    # OOM check: level 2 with 100 bytes too many and nothing evictable
    shard.cmd_addjob([b"ADDJOB", b"q", b"y" * 100, b"0"])
    shard.memory.memory_report()
    shard.memory.set_memory(2, 100, False)
    assert shard.execute(1, [b"ADDJOB", b"q", b"z", b"0"]).startswith(b"-OOM ")
    assert shard.execute(1, [b"QLEN", b"q"]) == b":1\r\n"
    # a delivered at-most-once job is evictable: the command then runs
    shard.cmd_addjob([b"ADDJOB", b"q0", b"y" * 100, b"0", b"RETRY", b"0", b"REPLICATE", b"1"])
    shard.fetch(shard.queues[b"q0"])
    shard.memory.memory_report()
    shard.memory.set_memory(2, 100, False)
    assert shard.execute(1, [b"ADDJOB", b"q", b"z", b"0"]).startswith(b"+D-")
    assert shard.execute(1, [b"QLEN", b"q0"]) == b":0\r\n" and len(shard.jobs) == 2
    shard.memory.memory_report()
    shard.memory.set_memory(2, 100, True)                           # noeviction
    assert shard.execute(1, [b"NACK", b"D-00000000-000000000000000000000000-0000"]) \
        .startswith(b"-OOM ")
    shard.memory.set_memory(1, -10 ** 9, True)
    assert shard.execute(1, [b"ADDJOB", b"q", b"z", b"0"]).startswith(b"+D-")   # level 1: fine


def test_jscan_never_returns_dummy_acks():
    shard = _shard()
    shard.cluster_size = 2          # dummy ACKs exist only in a cluster (SPEC 3.3)
    jid = shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"1"])[1:-2]
    unknown = b"D-01234567-AAAAAAAAAAAAAAAAAAAAAAAA-0001"
    assert shard.execute(1, [b"ACKJOB", unknown]) == b":0\r\n"
    assert shard.jobs[unknown].body is None                  # the dummy ACK
    for states in (0, 1 << 3):
        _, _, found, data = shard.scan("j", 0, 50, -1, -1, -1, [None, states, False])
        assert unknown not in data
    _, _, found, data = shard.scan("j", 0, 50, -1, -1, -1, [None, 0, True])
    assert found == 1 and jid in data and unknown not in data


def test_scan_log_gives_its_array_back_after_a_drain():
    """After a backlog is deleted the log keeps neither its entries nor most of its
    sequence array (8 bytes a job ever held at once)."""
    shard = _shard()
    ids = [shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])[1:-2] for _ in range(100_000)]
    big = shard.job_log.allocated
    assert big >= 100_000
    for jid in ids:
        shard.forget_job(shard.jobs[jid])
    assert len(shard.job_log) <= 2048
    assert shard.job_log.allocated <= 4096, (big, shard.job_log.allocated)


def test_job_table_is_rebuilt_at_its_size_after_a_drain():
    """A dict keeps the table of its largest size when its keys go; the slow cron's
    shrink_tables rebuilds it in place (the same dict: other parts hold it)."""
    import sys
    shard = _shard()
    jobs = shard.jobs
    ids = [shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])[1:-2] for _ in range(100_000)]
    for jid in ids[:-10]:
        shard.forget_job(shard.jobs[jid])
    big = sys.getsizeof(jobs)
    assert big > 1 << 20
    shard.memory.shrink_tables()
    assert shard.jobs is jobs and len(jobs) == 10
    assert sys.getsizeof(jobs) < 4096, big
    assert all(jid in jobs for jid in ids[-10:])
