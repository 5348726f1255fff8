"""Persistence pieces without a server: the fused LOADJOB record equals the SPEC 11 codec,
file naming, and the loader's rules (slot ownership, replay per file, union across files,
expired jobs, enqueue-once with RETRY 0 jobs)."""
import os
import time

from hypothesis import given, settings, strategies as st

from disque._fast.job import ACTIVE, FLAG_DELIVERED, QUEUED, Job
from disque._fast.jobid import IdMaker, id_slot
from disque.contracts import job_codec as codec
from disque.workers import aof_load
from disque.contracts.aof_format import (DELJOB, LOADJOB, AofCorrupt, AofTruncated, aof_files,
                                         aof_path, aof_stem, read_records, record)
from disque.contracts.aof_format import loadjob_record
from disque._fast.jobid import id_worker
from disque.workers.aof_load import Loader
from disque.workers.shard import Shard

NODE = b"1390f0c1db03983a890d28e5c35b0544f8e0cc42"
OTHER = b"45c02adc6d545b0738cf0d3e93dadbfc6f803fb3"
maker = IdMaker(NODE)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.binary(max_size=300), st.sampled_from([ACTIVE, QUEUED]),
       st.integers(0, 7), st.integers(0, 15), st.integers(1, 65535), st.integers(0, 2 ** 32 - 1),
       st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1),
       st.integers(0, 65535), st.integers(0, 65535),
       st.lists(st.sampled_from([NODE, OTHER]), max_size=2, unique=True))
def test_fused_loadjob_record_equals_the_codec(queue, body, state, flags, gc, repl, etime, ctime,
                                                delay, retry, nacks, adeliv, nodes):
    job = Job(maker.make(7, 3600, retry), queue, body)
    job.state, job.flags, job.gc_retry, job.repl, job.etime = state, flags, gc, repl, etime
    job.ctime, job.delay, job.retry, job.nacks = ctime, delay, retry, nacks
    job.additional_deliveries, job.nodes_delivered = adeliv, tuple(nodes)
    assert loadjob_record(job) == record(LOADJOB, codec.serialize(job, True, 12345))


def test_file_names(tmp_path):
    assert aof_stem("disque.aof") == "disque" and aof_stem("jobs") == "jobs"
    assert aof_stem(".aof") == ".aof"
    assert aof_path("/d", "disque.aof", 7711, 3) == "/d/disque.7711.w3.aof"
    for name in ("disque.7711.w0.aof", "disque.7711.w12.aof", "disque.7712.w0.aof",
                 "disque.7711.w0.aof.bak", "other.7711.w1.aof", "disque.7711.old2.w1.aof",
                 "temp-rewriteaof-bg-99.aof", "disque.7711.wx.aof"):
        (tmp_path / name).write_bytes(b"")
    assert aof_files(str(tmp_path), "disque.aof", 7711) == {
        0: str(tmp_path / "disque.7711.w0.aof"), 12: str(tmp_path / "disque.7711.w12.aof")}
    assert aof_files(str(tmp_path), "disque.aof", 7711, old=True) == {
        (2, 1): str(tmp_path / "disque.7711.old2.w1.aof")}
    assert aof_files(str(tmp_path / "missing"), "disque.aof", 7711) == {}


def make_job(slot, state=QUEUED, retry=5, ttl=3600, delay=0, flags=0):
    job = Job(maker.make(slot, ttl, retry), b"q%d" % slot, b"body")
    now = int(time.time())
    job.state, job.retry, job.delay, job.flags, job.repl = state, retry, delay, flags, 1
    job.etime = now + ttl
    job.ctime = now * 1000 * 1000000
    job.nodes_delivered = (NODE,)
    return job


def load(shard, files, enqueue_once=False, load_truncated=True):
    loader = Loader(shard, list(enumerate(files)), enqueue_once, load_truncated)
    while not loader.step(1.0):
        pass
    return loader.result


def test_loader_keeps_its_slots_replays_per_file_and_unions_files(tmp_path):
    a, b = str(tmp_path / "a.aof"), str(tmp_path / "b.aof")
    jobs = [make_job(slot) for slot in range(8)]
    deleted = jobs[2]
    with open(a, "wb") as f:
        for j in jobs[:5]:
            f.write(loadjob_record(j))
        f.write(record(DELJOB, deleted.id))
    with open(b, "wb") as f:                     # a job in two files (a crashed start-up)
        for j in jobs[3:]:
            f.write(loadjob_record(j))
    shards = [Shard(k, 2, NODE, {}) for k in range(2)]
    results = [load(s, [a, b]) for s in shards]
    assert all(r["ok"] for r in results)
    for k, s in enumerate(shards):
        expected = {j.id for j in jobs if j is not deleted and id_slot(j.id) % 2 == k}
        assert set(s.jobs) == expected
        assert all(j.state == ACTIVE for j in s.jobs.values())
        assert sum(len(q.jobs) for q in s.queues.values()) == 0
    assert sum(r["jobs"] for r in results) == len(jobs) - 1


def test_loader_enqueue_once_restores_retry0_and_skips_expired(tmp_path):
    path = str(tmp_path / "a.aof")
    queued = make_job(1)
    amo_queued = make_job(1, retry=0)
    amo_delivered = make_job(1, state=ACTIVE, retry=0, flags=FLAG_DELIVERED)
    amo_delayed = make_job(1, state=ACTIVE, retry=0, delay=3600)
    expired = make_job(1, ttl=1)
    expired.etime = int(time.time()) - 1
    with open(path, "wb") as f:
        for j in (queued, amo_queued, amo_delivered, amo_delayed, expired):
            f.write(loadjob_record(j))
    shard = Shard(0, 1, NODE, {})
    result = load(shard, [path], enqueue_once=True)
    assert (result["jobs"], result["queued"], result["expired"]) == (4, 2, 1)
    q = shard.queues[b"q1"]
    assert [j.id for j in q.jobs.peek(10)] == sorted([queued.id, amo_queued.id],
                                                     key=lambda i: (shard.jobs[i].ctime, i))
    assert shard.jobs[amo_delivered.id].qtime == 0            # at most once: never again
    assert shard.jobs[amo_delayed.id].qtime >= (queued.ctime // 1000000) + 3600 * 1000


def test_loader_reports_corruption_and_truncation(tmp_path):
    path = str(tmp_path / "a.aof")
    good = loadjob_record(make_job(0))
    with open(path, "wb") as f:
        f.write(good + good[:30])
    shard = Shard(0, 1, NODE, {})
    r = load(shard, [path], load_truncated=False)
    assert not r["ok"] and "byte offset %d" % len(good) in r["error"]
    r = load(Shard(0, 1, NODE, {}), [path], load_truncated=True)
    assert r["ok"] and r["jobs"] == 1 and "short read" in r["warnings"][0]
    with open(path, "wb") as f:
        f.write(good + record(DELJOB, b"short") + good)
    r = load(Shard(0, 1, NODE, {}), [path])
    assert not r["ok"] and "byte offset %d: DELJOB with a 5-byte job ID" % len(good) in r["error"]
    assert [c for c, _, _ in read_records(path)] == [LOADJOB, DELJOB, LOADJOB]
    os.unlink(path)
    r = load(Shard(0, 1, NODE, {}), [path])
    assert not r["ok"] and "Can't read the append only file" in r["error"]


def reference(path, data, me, nworkers, own_only):
    """What aof.read_records and the loader's rules say: ({id: (payload, path, offset)}
    of this worker's live jobs, how the scan ended: None, "foreign", or the exception)."""
    alive = {}
    start = 0
    min_payload = codec.FIXED.size
    try:
        for cmd, arg, end in read_records(path, data):
            if cmd == LOADJOB and len(arg) < min_payload:
                return alive, (AofCorrupt, start, None)
            if cmd == DELJOB and len(arg) != 40:
                return alive, (AofCorrupt, start, None)
            jid = arg[4:44] if cmd == LOADJOB else arg
            if id_worker(jid, nworkers) == me:
                if cmd == LOADJOB:
                    alive[jid] = (arg, path, start)
                else:
                    alive.pop(jid, None)
            elif own_only:
                return alive, "foreign"
            start = end
    except (AofCorrupt, AofTruncated) as e:
        return alive, (type(e), getattr(e, "offset", None), getattr(e, "valid_up_to", None))
    return alive, None


def scanned(path, data, me, nworkers, own_only):
    """The same through the loader's scan (the C scanner, the reference parser for the rest),
    one slice per batch of records."""
    shard = Shard(me, nworkers, NODE, {})
    loader = Loader(shard, [], False, False, own_only=own_only)
    alive = {}
    with open(path, "rb") as f:
        gen = loader.scan_file(f, path, len(data), shard, alive, 0)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            return alive, "foreign" if stop.value else None
        except (AofCorrupt, AofTruncated) as e:
            return alive, (type(e), getattr(e, "offset", None), getattr(e, "valid_up_to", None))


record_st = st.one_of(
    st.binary(min_size=0, max_size=120).map(lambda p: record(LOADJOB, p)),
    st.binary(min_size=40, max_size=40).map(lambda i: record(DELJOB, i)),
    st.binary(min_size=0, max_size=10).map(lambda p: record(b"loadjob", p)),   # other spelling
    st.binary(min_size=0, max_size=50).map(lambda i: record(DELJOB, i)))


# a few job IDs, on both workers of two, so LOADJOBs and DELJOBs meet
JIDS = [maker.make(slot, 60, 0) for slot in (0, 1, 2, 3)]
job_record_st = st.one_of(
    st.tuples(st.sampled_from([LOADJOB, b"loadjob"]), st.sampled_from(JIDS),
              st.binary(min_size=28, max_size=80)).map(
        lambda t: record(t[0], b"\0\0\0\0" + t[1] + t[2])),
    st.sampled_from(JIDS).map(lambda jid: record(DELJOB, jid)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(record_st, job_record_st, job_record_st), max_size=12),
       st.integers(0, 10 ** 6), st.integers(-1, 255),
       st.sampled_from([7, 64, 1 << 20]), st.sampled_from([(0, 1), (0, 2), (1, 2)]),
       st.booleans())
def test_the_scan_agrees_with_the_reference_parser(tmp_path_factory, records, cut, poke, chunk,
                                                   worker, own_only):
    data = bytearray(b"".join(records))
    if data and poke >= 0:
        data[cut % len(data)] = poke                    # damage one byte
    elif data and poke == -1:
        del data[cut % len(data):]                      # a truncated tail
    data = bytes(data)
    path = str(tmp_path_factory.mktemp("scan") / "x.aof")
    with open(path, "wb") as f:
        f.write(data)
    me, nworkers = worker
    old = aof_load.READ_CHUNK, aof_load.SLICE_RECORDS
    aof_load.READ_CHUNK = chunk                      # records across chunk boundaries
    aof_load.SLICE_RECORDS = 3                       # slices end inside a chunk
    try:
        assert (scanned(path, data, me, nworkers, own_only)
                == reference(path, data, me, nworkers, own_only))
    finally:
        aof_load.READ_CHUNK, aof_load.SLICE_RECORDS = old
