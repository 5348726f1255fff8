"""A worker's spill log on a real file system (disque/workers/spill_log.py): batches start on
an ALIGN boundary and go through O_DIRECT where the file system takes it, records read back
byte for byte however they are grouped, the compaction's walk passes over the padding, and a
file system that refuses O_DIRECT is written through the page cache."""
import errno
import fcntl
import os
import random

import pytest

from disque._fast import codec
from disque._fast.job import Job
from disque._fast.jobid import IdMaker
from disque.workers.spill_log import ALIGN, O_DIRECT, SIZE_AT, SpillLog, walk_records

MAKER = IdMaker(b"%040x" % 7)


def job(rng, n):
    j = Job(MAKER.make(0, 3600, 1), b"q%d" % (n % 3), os.urandom(rng.randrange(0, 3000)))
    j.qtime, j.flags = n * 1000, n & 7
    return j


def write_batches(log, rng, batches):
    written = []        # (segment, offset, record)
    for b in range(batches):
        jobs = [job(rng, b * 1000 + i) for i in range(rng.randrange(1, 40))]
        data, sizes = codec.spill_records(jobs)
        at = 0
        for size, (seg, off) in zip(sizes, log.append(data, sizes)):
            written.append((seg, off, data[at:at + size]))
            at += size
    return written


def test_a_spill_record_is_its_header_then_the_job_in_storage_form():
    rng = random.Random(2)
    jobs = [job(rng, n) for n in range(5)]
    data, sizes = codec.spill_records(jobs)
    at = 0
    for j, size in zip(jobs, sizes):
        rec = data[at:at + size]
        assert codec.spill_header(rec) == (j.qtime, j.flags, j.state)
        back, end = codec.deserialize(rec, SIZE_AT, True, 0, 0)
        assert end == size and (back.id, back.queue, back.body) == (j.id, j.queue, j.body)
        at += size
    assert at == len(data)


def test_batches_are_aligned_and_read_back_in_any_grouping(tmp_path):
    rng = random.Random(3)
    log = SpillLog(str(tmp_path), "t")
    written = write_batches(log, rng, 60)
    seg = log.active
    assert seg.size % ALIGN == 0 and os.path.getsize(seg.path) == seg.size
    if log.direct:          # the suite's file system takes O_DIRECT: the segments use it
        assert fcntl.fcntl(seg.fd, fcntl.F_GETFL) & O_DIRECT
    for _ in range(200):
        picked = rng.sample(written, rng.randrange(1, 30))
        if rng.random() < 0.8:      # mostly in log order: neighbours are read together
            picked.sort(key=lambda w: (w[0], w[1]))
        got = log.read([(s, o, len(r)) for s, o, r in picked])
        assert [bytes(g) for g in got] == [r for _, _, r in picked]
    log.remove_all()
    log.close()


def test_the_compaction_walk_sees_every_record_and_passes_the_padding(tmp_path):
    rng = random.Random(5)
    log = SpillLog(str(tmp_path), "t")
    written = write_batches(log, rng, 40)
    seg = log.active
    for chunk in (ALIGN, 3 * ALIGN + 17, 1 << 20):      # chunks cut records and padding
        seen, pos = [], 0
        while pos < seg.size:
            buf = log.pread(seg, pos, chunk)
            records, at = walk_records(buf, pos, pos + len(buf) >= seg.size)
            assert at > 0, "the walk stopped at %d of %d" % (pos, seg.size)
            seen += [(pos + a, buf[a:a + size]) for a, size, _ in records]
            pos += at
        assert seen == [(o, r) for _, o, r in written]
    log.close()


def test_a_torn_tail_stops_the_walk():
    rec, _ = codec.spill_records([job(random.Random(1), 1)])
    records, at = walk_records(rec[:len(rec) // 2], 0, True)
    assert (records, at) == ([], 0)


def test_a_file_system_without_o_direct_is_written_through_the_page_cache(tmp_path):
    rng = random.Random(9)
    log = SpillLog(str(tmp_path), "t")
    first = write_batches(log, rng, 5)
    log.buffered()      # what an EINVAL from open, pwrite or pread leads to
    assert not log.direct
    assert not fcntl.fcntl(log.active.fd, fcntl.F_GETFL) & O_DIRECT
    second = write_batches(log, rng, 5)
    for s, o, r in first + second:
        assert bytes(log.read([(s, o, len(r))])[0]) == r
    log.close()


def test_a_background_writer_writes_at_its_offset_and_reports_a_device_error(tmp_path):
    from disque._fast.bgwrite import BackgroundWriter
    w = BackgroundWriter()
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    buf = bytearray(b"x" * 5000 + b"y" * 5000)
    w.submit(fd, buf, 8000, 100)
    assert w.wait() == (8000, 0)
    assert not w.busy() and w.wait() == (0, 0)          # nothing in flight any more
    assert path.read_bytes() == b"\0" * 100 + bytes(buf[:8000])
    full = os.open("/dev/full", os.O_WRONLY)
    w.submit(full, buf, 4096, 0)
    assert w.wait() == (0, errno.ENOSPC)
    with pytest.raises(ValueError):
        w.submit(fd, buf, len(buf) + 1, 0)              # past the buffer's end
    w.close()
    w.close()
    os.close(fd)
    os.close(full)


def test_a_background_append_that_fails_is_cut_back_and_its_batch_handed_over(tmp_path):
    """The device refuses the write (here /dev/full in the segment's place): the log
    forgets the batch as if never appended, hands its bytes, sizes and places to `lost`
    (the spiller brings those jobs back into RAM) and the records before it still read."""
    spill_log = SpillLog(str(tmp_path), "t")
    lost = []
    spill_log.lost = lambda *args: lost.append(args)
    rng = random.Random(3)
    data, sizes = codec.spill_records([job(rng, n) for n in range(5)])
    locs = spill_log.append(data, sizes, background=True)
    spill_log.settle()
    assert lost == []
    seg = spill_log.active
    size, written = seg.size, spill_log.bytes_written
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, seg.fd)                               # the disk is full from now on
    os.close(full)
    data2, sizes2 = codec.spill_records([job(rng, n) for n in range(5, 8)])
    failed = spill_log.append(data2, sizes2, background=True)
    spill_log.settle()
    [(error, lost_data, lost_sizes, places)] = lost
    assert error.errno == errno.ENOSPC and bytes(lost_data) == data2
    assert lost_sizes == sizes2 and places == failed
    assert (seg.size, spill_log.bytes_written, seg.live) == (size, written, 5)
    back = spill_log.read([(n, o, z) for (n, o), z in zip(locs, sizes)])
    at = 0
    for rec, z in zip(back, sizes):
        assert bytes(rec) == data[at:at + z]
        at += z
    spill_log.close()


def test_jobs_appended_as_records_made_in_the_write_buffer_read_back_as_spill_records(tmp_path):
    """append_jobs (the spiller's path) makes each record right in the write buffer: the
    bytes on disk are spill_records' and the padding is zeros, in the foreground and in
    the background; a batch whose background write fails hands `lost` the same bytes,
    sizes and places as `append` would."""
    spill_log = SpillLog(str(tmp_path), "t")
    lost = []
    spill_log.lost = lambda *args: lost.append(args)
    rng = random.Random(6)
    placed = []
    for background in (False, True, True, False):
        jobs = [job(rng, n) for n in range(rng.randrange(1, 300))]
        data, sizes = codec.spill_records(jobs)
        got_sizes, seg_n, off = spill_log.append_jobs(jobs, background=background)
        assert got_sizes == sizes and off % ALIGN == 0
        placed.append((data, sizes, seg_n, off))
    spill_log.settle()
    for data, sizes, seg_n, off in placed:
        [whole] = spill_log.read([(seg_n, off, len(data))])
        assert bytes(whole) == data
        padded = -(-len(data) // ALIGN) * ALIGN
        rfd = os.open(spill_log.segs[seg_n].path, os.O_RDONLY)
        try:
            assert os.pread(rfd, padded - len(data), off + len(data)) == bytes(padded - len(data))
        finally:
            os.close(rfd)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, spill_log.active.fd)
    os.close(full)
    jobs = [job(rng, n) for n in range(7)]
    data, sizes = codec.spill_records(jobs)
    _, seg_n, off = spill_log.append_jobs(jobs, background=True)
    spill_log.settle()
    [(error, lost_data, lost_sizes, places)] = lost
    assert error.errno == errno.ENOSPC and bytes(lost_data) == data and lost_sizes == sizes
    assert places == [(seg_n, off + sum(sizes[:i])) for i in range(len(sizes))]
    spill_log.close()


def totals_match(spill_log):
    segs = spill_log.segs.values()
    return (spill_log.size_total, spill_log.live_total) == (
        sum(s.size for s in segs), sum(s.live_bytes for s in segs))


def test_the_log_keeps_its_totals_as_records_come_and_go(tmp_path, monkeypatch):
    """compact_candidate reads two totals instead of summing every segment at each pass:
    they follow the segments through appends, rolls, records forgotten (a segment
    deleted, the active one emptied), a background write that failed and FLUSHALL."""
    import disque.workers.spill_log as spill_log_mod
    monkeypatch.setattr(spill_log_mod, "SEGMENT_BYTES", 64 * 1024)
    spill_log = SpillLog(str(tmp_path), "t")
    spill_log.lost = lambda *args: None
    rng = random.Random(5)
    written = write_batches(spill_log, rng, 60)
    assert len(spill_log.segs) > 3 and totals_match(spill_log)
    for seg_n, off, rec in written[::2] + written[1::2][:len(written) // 3]:
        spill_log.forget(seg_n, len(rec))
        assert totals_match(spill_log)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, spill_log.active.fd)
    os.close(full)
    data, sizes = codec.spill_records([job(rng, n) for n in range(4)])
    spill_log.append(data, sizes, background=True)
    spill_log.settle()
    assert totals_match(spill_log)
    spill_log.remove_all()
    assert (spill_log.size_total, spill_log.live_total) == (0, 0)
    spill_log.close()


def test_the_write_buffer_goes_back_when_dropped_and_comes_again_for_the_next_batch(tmp_path):
    """The buffer grows to the biggest batch (megabytes after a burst) and an idle worker
    gives it back (Spill.idle from the slow cron); never while a write from it is in
    flight, and the next append maps a new one."""
    spill_log = SpillLog(str(tmp_path), "t")
    rng = random.Random(4)
    data, sizes = codec.spill_records([job(rng, n) for n in range(600)])
    locs = spill_log.append(data, sizes, background=True)
    assert len(spill_log.wbuf) >= len(data)
    assert spill_log.in_flight is not None
    spill_log.drop_buffer()
    assert spill_log.wbuf is not None               # its write may still read from it
    spill_log.settle()
    spill_log.drop_buffer()
    assert spill_log.wbuf is None
    spill_log.drop_buffer()                         # twice is harmless
    data2, sizes2 = codec.spill_records([job(rng, n) for n in range(600, 603)])
    locs2 = spill_log.append(data2, sizes2)
    back = spill_log.read([(n, o, z) for (n, o), z in zip(locs + locs2, sizes + sizes2)])
    assert b"".join(bytes(r) for r in back) == data + data2
    spill_log.remove_all()
    spill_log.close()
