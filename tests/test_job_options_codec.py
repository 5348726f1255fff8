"""The options block of the serialized job (BACKOFF, MAXDELIVERIES, the dead-letter move;
docs/job-features.md): C codec and Python reference agree, old records read as no options,
damaged blocks are refused."""
import pytest
from hypothesis import given, settings, strategies as st

from disque._fast.job import FLAG_GROUPED, FLAG_HELD, Job, JobOptions, retry_interval
from disque._fast.jobid import IdMaker
from disque.contracts import job_codec as codec

pytestmark = pytest.mark.unit

NODE = b"1390f0c1db03983a890d28e5c35b0544f8e0cc42"
maker = IdMaker(NODE)
NOW_S, NOW_MS = 1795239598, 1795239598000
CODECS = [(codec.serialize, codec.deserialize),
          (codec.serialize_reference, codec.deserialize_reference)]


def make(ext=None, retry=2, nacks=0, adeliv=0):
    j = Job(maker.make(7, 600, retry), b"orders", b"body")
    j.etime, j.retry, j.repl, j.nodes_delivered = NOW_S + 600, retry, 1, (NODE,)
    j.nacks, j.additional_deliveries, j.ext = nacks, adeliv, ext
    return j


opts_st = st.one_of(st.none(), st.builds(
    JobOptions, st.integers(0, 2 ** 32 - 1), st.integers(0, 65535),
    st.one_of(st.none(), st.binary(max_size=20)), st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(min_size=1, max_size=256)), st.integers(0, 2 ** 64 - 1)))


@settings(max_examples=200, deadline=None)
@given(opts_st, st.booleans())
def test_round_trip_and_both_codecs_agree(ext, storage):
    job = make(ext)
    data = codec.serialize(job, storage, NOW_S)
    assert data == codec.serialize_reference(job, storage, NOW_S)
    for _, de in CODECS:
        back, end = de(data, 0, storage, NOW_S, NOW_MS)
        assert end == len(data)
        if ext is None:
            assert back.ext is None
        else:
            for f in ("backoff", "max_deliveries", "deadletter", "origin", "group"):
                assert getattr(back.ext, f) == getattr(ext, f), f
            assert back.ext.group_seq == (ext.group_seq if ext.group is not None else 0)


def test_a_plain_job_has_the_old_bytes_and_an_old_record_reads_as_no_options():
    job = make(None)
    plain = codec.serialize(job, True, NOW_S)
    job.ext = JobOptions(8, 3, b"orders:dead")
    with_opts = codec.serialize(job, True, NOW_S)
    # the options are a block after the node list: the old record is the prefix
    assert with_opts[4:len(plain)] == plain[4:]
    for _, de in CODECS:
        assert de(plain, 0, True, NOW_S, NOW_MS)[0].ext is None


def test_a_groups_flags_stay_in_ram_and_a_cut_group_is_refused():
    """GROUPED and HELD describe one worker's group order: never written, in either form.
    A record cut inside its group field is refused, as any damaged block."""
    job = make(JobOptions(0, 0, None, None, b"user:42", 1795239598000123))
    job.flags |= FLAG_GROUPED | FLAG_HELD
    for storage in (True, False):
        data = codec.serialize(job, storage, NOW_S)
        assert data == codec.serialize_reference(job, storage, NOW_S)
        for _, de in CODECS:
            back, _ = de(data, 0, storage, NOW_S, NOW_MS)
            assert not back.flags & (FLAG_GROUPED | FLAG_HELD)
            assert (back.ext.group, back.ext.group_seq) == (b"user:42", 1795239598000123)
    data = codec.serialize(job, True, NOW_S)
    for cut in (1, 4, 9, 12):
        short = (len(data) - 4 - cut).to_bytes(4, "little") + data[4:-cut]
        for _, de in CODECS:
            with pytest.raises(codec.CodecError):
                de(short, 0, True, NOW_S, NOW_MS)


def test_qtime_of_a_copy_follows_the_backoff():
    job = make(JobOptions(60, 0, None), retry=2, nacks=2, adeliv=1)   # 2 * 2^3 = 16 s
    assert retry_interval(job) == 16
    for _, de in CODECS:
        back, _ = de(codec.serialize(job, False, NOW_S), 0, False, NOW_S, NOW_MS)
        assert back.qtime == NOW_MS + 16000


@pytest.mark.parametrize("cut", [1, 5, 11, 15])
def test_damaged_options_are_refused(cut):
    data = bytearray(codec.serialize(make(JobOptions(8, 3, b"dlq", b"orig")), True, NOW_S))
    short = bytes(data[:-cut])
    short = len(short[4:]).to_bytes(4, "little") + short[4:]
    for _, de in CODECS:
        with pytest.raises(codec.CodecError):
            de(short, 0, True, NOW_S, NOW_MS)
    bad_version = bytearray(data)
    bad_version[len(codec.serialize(make(None), True, NOW_S))] = 9
    for _, de in CODECS:
        with pytest.raises(codec.CodecError):
            de(bytes(bad_version), 0, True, NOW_S, NOW_MS)


def test_backoff_interval_doubles_and_caps():
    job = make(JobOptions(30, 0, None), retry=2)
    got = []
    for k in range(7):
        job.nacks = k
        got.append(retry_interval(job))
    assert got == [2, 4, 8, 16, 30, 30, 30]
    job.ext = None
    assert retry_interval(job) == 2
