"""SPEC 11 serialized jobs: round trips, both forms, and rejection of damaged input."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from disque._fast.job import ACTIVE, ACKED, FLAG_BCAST_WILLQUEUE, FLAG_DELIVERED, QUEUED, Job
from disque._fast.jobid import IdMaker
from disque.contracts.job_codec import CodecError, deserialize, serialize

NODE = b"1390f0c1db03983a890d28e5c35b0544f8e0cc42"
OTHER = b"45c02adc6d545b0738cf0d3e93dadbfc6f803fb3"
maker = IdMaker(NODE)

job_st = st.builds(
    dict, queue=st.binary(max_size=30), body=st.binary(max_size=200),
    state=st.sampled_from([ACTIVE, QUEUED, ACKED]), flags=st.integers(0, 7),
    repl=st.integers(1, 65535), ttl=st.integers(1, 10 ** 6), ctime=st.integers(0, 2 ** 64 - 1),
    delay=st.integers(0, 2 ** 32 - 1), retry=st.integers(0, 2 ** 32 - 1),
    nacks=st.integers(0, 65535), adeliv=st.integers(0, 65535),
    nodes=st.lists(st.sampled_from([NODE, OTHER]), max_size=2, unique=True))


def make(d, now_s):
    j = Job(maker.make(5, d["ttl"], d["retry"]), d["queue"], d["body"])
    j.state, j.flags, j.repl, j.etime = d["state"], d["flags"], d["repl"], now_s + d["ttl"]
    j.ctime, j.delay, j.retry = d["ctime"], d["delay"], d["retry"]
    j.nacks, j.additional_deliveries, j.nodes_delivered = d["nacks"], d["adeliv"], tuple(d["nodes"])
    j.gc_retry = 3
    return j


@settings(max_examples=200, deadline=None)
@given(job_st, st.booleans())
def test_round_trip(d, storage):
    now_s, now_ms = 1795239598, 1795239598000
    job = make(d, now_s)
    data = b"xx" + serialize(job, storage, now_s)
    back, end = deserialize(data, 2, storage, now_s + 10, now_ms + 10000)
    assert end == len(data)
    for f in ("id", "queue", "body", "repl", "ctime", "delay", "retry", "nacks",
              "additional_deliveries", "nodes_delivered"):
        assert getattr(back, f) == getattr(job, f), f
    assert back.gc_retry == 0
    if storage:
        assert back.state == job.state and back.etime == job.etime
        assert back.flags & FLAG_DELIVERED == job.flags & FLAG_DELIVERED
    else:
        # remaining seconds + 1, made absolute again by the receiver
        assert back.state == ACTIVE and back.etime == now_s + 10 + d["ttl"] + 1
        assert not back.flags & FLAG_DELIVERED
    if job.retry:
        assert back.flags & FLAG_BCAST_WILLQUEUE
        assert back.qtime == now_ms + 10000 + (job.delay + job.retry) * 1000
    else:
        assert back.qtime == 0


def test_layout_matches_spec_offsets():
    job = Job(maker.make(1, 60, 1), b"q", b"body")
    job.state, job.repl, job.etime, job.ctime = QUEUED, 3, 1000, 42
    job.delay, job.retry, job.nacks, job.additional_deliveries = 5, 6, 7, 8
    job.nodes_delivered = (NODE,)
    data = serialize(job, True, 0)
    assert struct.unpack_from("<I", data, 0)[0] == len(data) - 4
    assert data[4:44] == job.id
    assert data[44] & 15 == QUEUED
    assert struct.unpack_from("<HIQIIHH", data, 46) == (3, 1000, 42, 5, 6, 7, 8)
    assert data[72:77] == b"\x01\x00\x00\x00q"
    assert data[-44:] == b"\x01\x00\x00\x00" + NODE


@pytest.mark.parametrize("cut", [0, 10, 71, 75, -41, -1])
def test_truncated_or_inconsistent_jobs_are_rejected(cut):
    job = Job(maker.make(1, 60, 1), b"queue", b"body")
    job.nodes_delivered = (NODE,)
    data = serialize(job, True, 0)
    with pytest.raises(CodecError):
        deserialize(data[:cut] if cut else data[:4] + b"\x00" * 10, 0, True, 0, 0)


def test_length_mismatch_is_rejected():
    job = Job(maker.make(1, 60, 1), b"queue", b"body")
    data = bytearray(serialize(job, True, 0))
    data[0] += 1
    with pytest.raises(CodecError):
        deserialize(bytes(data) + b"\x00", 0, True, 0, 0)


@settings(max_examples=300, deadline=None)
@given(job_st, st.booleans(), st.integers(0, 2 ** 31), st.integers(-250, 249))
def test_c_codec_matches_the_python_reference(d, storage, now_s, jitter):
    """disque._fast.codec (what the server runs) gives the bytes and the jobs of the readable
    Python definition in disque.contracts.job_codec."""
    from disque.contracts.job_codec import deserialize_reference, serialize_reference
    job = make(d, now_s)
    data = serialize(job, storage, now_s)
    assert data == serialize_reference(job, storage, now_s)
    framed = b"xx" + data + b"yy"
    got, end = deserialize(framed, 2, storage, now_s, now_s * 1000, jitter)
    ref, ref_end = deserialize_reference(framed, 2, storage, now_s, now_s * 1000, jitter)
    assert end == ref_end == 2 + len(data)
    for field in ("id", "queue", "body", "state", "flags", "repl", "etime", "ctime", "delay",
                  "retry", "nacks", "additional_deliveries", "nodes_delivered", "qtime",
                  "gc_retry"):
        assert getattr(got, field) == getattr(ref, field), field
    for cut in (1, len(data) // 2, len(data) - 1):      # damaged input: both refuse it
        with pytest.raises(CodecError):
            deserialize(data[:cut], 0, storage, now_s, 0)
        with pytest.raises(CodecError):
            deserialize_reference(data[:cut], 0, storage, now_s, 0)
