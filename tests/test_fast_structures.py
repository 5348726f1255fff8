"""The Cython structures held against small pure-Python reference models (hypothesis)."""
import sys
import base64
import re

from hypothesis import given, settings, strategies as st

from disque._fast.job import FLAG_GROUPED, Job, compare
from disque._fast.jobid import IdMaker, crc16, id_slot, id_ttl_minutes, queue_slot, valid_id
from disque._fast.skiplist import JobQueue
from disque._fast.timers import TimerHeap

NODE = b"1390f0c1db03983a890d28e5c35b0544f8e0cc42"
ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


def make_job(maker, ctime, slot=0):
    j = Job(maker.make(slot, 3600, 1), b"q", b"body")
    j.ctime = ctime
    return j


# ---- job IDs and slots ----------------------------------------------------------------

def test_crc16_matches_redis_cluster_reference():
    assert crc16(b"123456789") == 0x31C3          # the XMODEM check value Redis documents
    assert queue_slot(b"123456789") == 0x31C3 % 4096


@given(st.binary(min_size=0, max_size=64), st.integers(1, 10 ** 7), st.integers(0, 10 ** 6))
def test_id_format_slot_and_ttl_parity(queue, ttl, retry):
    maker = IdMaker(NODE)
    jid = maker.make(queue_slot(queue), ttl, retry)
    assert len(jid) == 40 and ID_RE.match(jid)
    assert valid_id(jid)
    assert jid[2:10] == NODE[:8]
    assert id_slot(jid) == queue_slot(queue)
    minutes = id_ttl_minutes(jid)
    expected = min(ttl // 60, 65535)
    expected = expected | 1 if retry > 0 else expected & ~1
    assert minutes == expected
    assert (minutes & 1) == (1 if retry > 0 else 0)


def test_id_ttl_examples_from_spec():
    maker = IdMaker(NODE)
    assert maker.make(0, 30, 1).endswith(b"-0001")
    assert maker.make(0, 86400, 300).endswith(b"-05a1")
    assert maker.make(0, 86400, 0).endswith(b"-05a0")


def test_ids_are_unique_and_random_part_is_base64():
    maker = IdMaker(NODE)
    ids = {maker.make(7, 60, 1) for _ in range(200000)}
    assert len(ids) == 200000
    other = IdMaker(NODE)
    assert not ids & {other.make(7, 60, 1) for _ in range(1000)}
    for jid in list(ids)[:100]:
        base64.b64decode(jid[11:35])      # alphabet check


@given(st.binary(min_size=0, max_size=60))
def test_valid_id_is_upstreams_loose_check(data):
    expected = (len(data) == 40 and data[:2] == b"D-" and data[10:11] == b"-" and data[35:36] == b"-")
    assert valid_id(data) == expected


def test_ctime_strictly_increases():
    maker = IdMaker(NODE)
    a = maker.next_ctime(1000)
    b = maker.next_ctime(1000)
    c = maker.next_ctime(999)
    d = maker.next_ctime(2000)
    assert a == 1000 * 1000000 and b == a + 1 and c == b + 1 and d == 2000 * 1000000


# ---- the ordered job queue vs a sorted list --------------------------------------------

queue_ops = st.lists(st.tuples(st.sampled_from(["push", "pop", "remove", "peek", "tail", "cut"]),
                               st.integers(0, 40), st.integers(0, 12)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(queue_ops)
def test_job_queue_matches_sorted_model(ops):
    maker = IdMaker(NODE)
    pool = [make_job(maker, 1000 + (n % 17)) for n in range(41)]   # many equal ctimes: ID tie-break
    q = JobQueue()
    model = []
    key = lambda j: (j.ctime, j.id)
    for op, idx, count in ops:
        job = pool[idx]
        if op == "push":
            added = q.push(job)
            assert added == (job not in model)
            if added:
                model.append(job)
                model.sort(key=key)
        elif op == "pop":
            got = q.pop()
            assert got is (model.pop(0) if model else None)
        elif op == "remove":
            assert q.remove(job) == (job in model)
            if job in model:
                model.remove(job)
        elif op == "peek":
            assert q.peek(count) == model[:count]
        elif op == "cut":
            assert q.cut_tail(count) == min(count, len(model))
            del model[max(0, len(model) - count):]
        else:
            assert q.peek_tail(count) == list(reversed(model))[:count]
        assert len(q) == len(model)
        assert all(bool(j.in_queue) == (j in model) for j in pool)
        assert (q.first() is model[0]) if model else q.first() is None


def test_job_queue_append_path_keeps_every_level_linked():
    """Fresh jobs (newest ctime) take the O(1) append path, which links them after the
    last node of each level. Interleaved with pops, removals from the middle and older
    jobs pushed near the head, every level must stay linked: removal searches through
    the upper levels, and would miss a job linked wrong there."""
    import random
    rng = random.Random(12)
    maker = IdMaker(NODE)
    q = JobQueue()
    model = []
    key = lambda j: (j.ctime, j.id)
    ctime = 10_000
    for step in range(6000):
        r = rng.random()
        if r < 0.55:
            ctime += rng.choice((0, 1, 5))          # equal ctimes: the ID breaks the tie
            job = make_job(maker, ctime)
        elif r < 0.62:
            job = make_job(maker, rng.randint(0, ctime))    # an old job: the search path
        else:
            job = None
        if job is not None:
            assert q.push(job)
            model.append(job)
            model.sort(key=key)
        elif r < 0.75 and model:
            assert q.pop() is model.pop(0)
        elif r < 0.93 and model:
            victim = model.pop(rng.randrange(len(model)))
            assert q.remove(victim)
        elif r < 0.95 and model:
            n = rng.randrange(1, 40)                # a spilled tail, cut at once
            assert q.cut_tail(n) == min(n, len(model))
            del model[max(0, len(model) - n):]
        elif model and r >= 0.995:
            q.clear()
            model = []
        assert len(q) == len(model)
    assert q.peek(len(model)) == model
    assert q.peek_tail(len(model)) == model[::-1]
    for job in list(model):                 # every job found through the upper levels
        assert q.remove(job)
    assert len(q) == 0 and q.first() is None and q.peek_tail(1) == []
    fresh = make_job(maker, ctime + 1)
    assert q.push(fresh) and q.peek(2) == [fresh]


def test_queue_order_is_ctime_then_id():
    maker = IdMaker(NODE)
    a, b = make_job(maker, 5), make_job(maker, 5)
    first, second = sorted([a, b], key=lambda j: j.id)
    assert compare(first, second) < 0
    q = JobQueue()
    q.push(second)
    q.push(first)
    old = make_job(maker, 1)
    q.push(old)
    assert q.peek(3) == [old, first, second]


def test_queue_releases_jobs():
    import sys
    maker = IdMaker(NODE)
    job = make_job(maker, 1)
    base = sys.getrefcount(job)
    q = JobQueue()
    q.push(job)
    assert sys.getrefcount(job) == base + 1
    q.remove(job)
    assert sys.getrefcount(job) == base
    q.push(job)
    del q
    assert sys.getrefcount(job) == base


# ---- the timer heap vs a dict model ---------------------------------------------------

timer_ops = st.lists(st.tuples(st.sampled_from(["schedule", "cancel", "pop"]),
                               st.integers(0, 30), st.integers(1, 500)), max_size=400)


@settings(max_examples=200, deadline=None)
@given(timer_ops)
def test_timer_heap_matches_model(ops):
    maker = IdMaker(NODE)
    pool = [make_job(maker, n) for n in range(31)]
    heap = TimerHeap()
    model = {}       # job index -> when
    for op, idx, when in ops:
        job = pool[idx]
        if op == "schedule":
            heap.schedule(job, when)
            model[idx] = when
        elif op == "cancel":
            heap.cancel(job)
            model.pop(idx, None)
        else:
            due = heap.pop_due(when, 1000)
            expected = sorted((w, i) for i, w in model.items() if w <= when)
            assert [d.awakeme for d in due] == [0] * len(due)
            assert sorted(pool.index(d) for d in due) == sorted(i for _, i in expected)
            assert [model[pool.index(d)] for d in due] == [w for w, _ in expected]
            for _, i in expected:
                del model[i]
        assert len(heap) == len(model)
        assert heap.next_when() == (min(model.values()) if model else 0)
        for i, job in enumerate(pool):
            assert job.awakeme == model.get(i, 0)


def test_timer_heap_holds_only_scheduled_jobs():
    """A reschedule moves the job's entry, a cancel takes it out and lets the job go: a
    deleted or spilled job (and its body) is not kept alive by the heap until its due time."""
    maker = IdMaker(NODE)
    jobs = [make_job(maker, n) for n in range(5000)]
    def refs_of(job):               # read outside an assert: pytest's rewriting holds operands
        return sys.getrefcount(job) - 1
    refs = refs_of(jobs[0])
    heap = TimerHeap()
    for round_ in range(5):
        for j in jobs:
            heap.schedule(j, 1000 - round_)
    assert len(heap) == heap.heap_size == 5000
    held = refs_of(jobs[0])
    assert held == refs + 1
    for j in jobs[1:]:
        heap.cancel(j)
    assert heap.heap_size == 1 and heap.allocated <= 4096
    held = refs_of(jobs[1])
    assert held == refs
    assert heap.next_when() == 996
    heap.schedule(jobs[0], 5)
    assert heap.pop_due(10 ** 9, 10) == [jobs[0]]
    held = refs_of(jobs[0])
    assert held == refs
    assert heap.next_when() == 0 and len(heap) == 0


def test_pop_due_respects_limit_and_order():
    maker = IdMaker(NODE)
    heap = TimerHeap()
    jobs = [make_job(maker, n) for n in range(10)]
    for n, j in enumerate(jobs):
        heap.schedule(j, 100 - n)
    first = heap.pop_due(1000, 3)
    assert first == [jobs[9], jobs[8], jobs[7]]
    assert len(heap) == 7


# ---- GETJOB's reply, written in place (jobreply.encode_job / encode_jobs) -------------

def formatted_job(job, withcounters):
    """The reply element as %-formatting wrote it before encode_job wrote it in place."""
    q, b = job.queue, job.body
    if withcounters:
        return (b"*7\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n$5\r\nnacks\r\n:%d\r\n"
                b"$21\r\nadditional-deliveries\r\n:%d\r\n"
                % (len(q), q, job.id, len(b), b, job.nacks, job.additional_deliveries))
    return b"*3\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n" % (len(q), q, job.id, len(b), b)


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=120), st.binary(max_size=1100),
                          st.integers(0, 65535), st.integers(0, 65535)), min_size=1, max_size=12),
       st.booleans())
def test_getjob_reply_is_written_as_formatted(specs, withcounters):
    from disque._fast.jobreply import encode_job, encode_jobs
    maker = IdMaker(NODE)
    jobs = []
    for queue, body, nacks, extra in specs:
        j = Job(maker.make(0, 3600, 1), queue, body)
        j.nacks, j.additional_deliveries = nacks, extra
        jobs.append(j)
        assert encode_job(j, withcounters) == formatted_job(j, withcounters)
    assert encode_jobs(jobs, withcounters) == (
        b"*%d\r\n" % len(jobs) + b"".join(formatted_job(j, withcounters) for j in jobs))


def test_latency_buckets_match_bisect_on_the_bounds():
    import bisect
    from disque.statslog import LATENCY_BOUNDS_US
    from disque.workers.shard import Shard
    shard = Shard(0, 1, b"a" * 40, {})
    probes = sorted({0, 1} | {b + d for b in LATENCY_BOUNDS_US for d in (-1, 0, 1)} | {10 ** 9})
    for us in probes:
        before = list(shard.latency_counts)
        shard.account(b"addjob", us * 1000)
        changed = [i for i, (a, b) in enumerate(zip(before, shard.latency_counts)) if a != b]
        assert changed == [bisect.bisect_left(LATENCY_BOUNDS_US, us)], us
        before = list(shard.latency_counts)
        shard.account_share([b"addjob", b"addjob", b"getjob"], us * 1000 * 3)
        changed = [i for i, (a, b) in enumerate(zip(before, shard.latency_counts)) if a != b]
        assert changed == [bisect.bisect_left(LATENCY_BOUNDS_US, us)], us
    n = len(probes)
    assert shard.command_count[b"addjob"] == 3 * n and shard.command_count[b"getjob"] == n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.booleans(),
                          st.integers(0, 65535), st.integers(0, 65535)), min_size=1, max_size=6),
       st.booleans())
def test_a_reply_with_a_big_body_is_the_same_bytes_in_pieces_that_hold_the_body_uncopied(
        specs, withcounters):
    from disque._fast.jobreply import BIG_PIECE, encode_jobs, encode_jobs_pieces
    maker = IdMaker(NODE)
    jobs = []
    for queue, big, nacks, extra in specs:
        j = Job(maker.make(0, 3600, 1), queue, (b"B" * BIG_PIECE + queue) if big else queue * 3)
        j.nacks, j.additional_deliveries = nacks, extra
        jobs.append(j)
    reply = encode_jobs_pieces(jobs, withcounters)
    bigs = [j.body for j in jobs if len(j.body) >= BIG_PIECE]
    if len(bigs) != 1:
        assert type(reply) is bytes and reply == encode_jobs(jobs, withcounters)
        return
    assert type(reply) is tuple and b"".join(reply) == encode_jobs(jobs, withcounters)
    assert [p for p in reply if len(p) >= BIG_PIECE] == bigs
    assert all(any(p is body for p in reply) for body in bigs)      # the job's own bytes


# ---- the spilled batch --------------------------------------------------------------------

def test_tail_to_spill_takes_the_newest_that_may_spill_newest_first_across_its_prefetch_runs():
    """`tail_to_spill` reaches the jobs 16 at a time (prefetched before any is looked at):
    the same choice, in the same order, as one look at each job from the tail."""
    from disque._fast.spillpick import tail_to_spill
    maker = IdMaker(NODE)
    q = JobQueue()
    jobs = [make_job(maker, 1000 + n) for n in range(53)]
    for n, job in enumerate(jobs):
        job.etime = 5000 if n % 7 else 100         # every 7th expires before the horizon
        if n % 11 == 3:
            job.body = None
        if n % 13 == 5:
            job.flags |= FLAG_GROUPED               # spills only as a copy
        q.push(job)
    spillable = [j for j in reversed(jobs)
                 if j.etime > 1000 and j.body is not None and not j.flags & FLAG_GROUPED]
    for count in (0, 1, 15, 16, 17, 40, 53, 80):
        assert tail_to_spill(q, count, 1000) == [j for j in spillable
                                                 if jobs.index(j) >= len(jobs) - count]
    assert len(q) == 53                             # choosing takes nothing out
