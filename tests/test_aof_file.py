"""The AOF file layer: records, truncated tails, corruption with offsets, the checker tool."""
import os
import subprocess
import sys
import time

import pytest

from disque import check_aof
from disque.contracts.aof_format import (DELJOB, LOADJOB, AofCorrupt, AofTruncated, read_records,
                                         record)
from disque.workers.aof import AofWriter, should_auto_rewrite, write_snapshot


def write(path, *records):
    with open(path, "wb") as f:
        f.write(b"".join(records))


def test_writer_appends_and_reader_reads(tmp_path):
    path = str(tmp_path / "w0.aof")
    for policy in ("always", "everysec", "no"):
        if os.path.exists(path):
            os.remove(path)
        w = AofWriter(path, policy)
        w.append(LOADJOB, b"\x00\x01binary\r\n")
        w.append(DELJOB, b"D-" + b"x" * 38)
        assert w.flush()
        w.close()
        got = [(c, a) for c, a, _ in read_records(path)]
        assert got == [(LOADJOB, b"\x00\x01binary\r\n"), (DELJOB, b"D-" + b"x" * 38)]


@pytest.mark.parametrize("cut", [1, 5, 20, 30])
def test_truncated_tail_is_detected_after_the_good_records(tmp_path, cut):
    path = str(tmp_path / "a.aof")
    good = record(LOADJOB, b"job-one") + record(DELJOB, b"id")
    write(path, good, record(LOADJOB, b"job-two-long-body")[:cut])
    seen = []
    with pytest.raises(AofTruncated) as e:
        for cmd, arg, _ in read_records(path):
            seen.append(arg)
    assert seen == [b"job-one", b"id"]
    assert e.value.valid_up_to == len(good)


@pytest.mark.parametrize("bad, offset_in_bad", [
    (b"*3\r\n$7\r\nLOADJOB\r\n", 0),
    (b"garbage\r\n", 0),
    (b"*2\r\n$7\r\nLOADJOX\r\n$1\r\nx\r\n", 0),
    (b"*2\r\n$7\r\nLOADJOB\r\n$1\r\nxx\r\n", 22),
])
def test_corruption_reports_the_byte_offset(tmp_path, bad, offset_in_bad):
    path = str(tmp_path / "a.aof")
    good = record(LOADJOB, b"job-one")
    write(path, good, bad, record(DELJOB, b"id"))
    with pytest.raises(AofCorrupt) as e:
        list(read_records(path))
    assert e.value.offset == len(good) + offset_in_bad
    assert "byte offset %d" % e.value.offset in str(e.value)


def test_write_error_sets_error_and_keeps_data(tmp_path):
    path = str(tmp_path / "a.aof")
    w = AofWriter(path, "no")
    os.close(w.fd)
    w.fd = os.open("/dev/full", os.O_WRONLY)          # every write fails with ENOSPC
    w.append(LOADJOB, b"x")
    assert not w.flush()
    assert "space" in w.error.lower()
    os.close(w.fd)
    w.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    assert w.flush() and w.error is None
    w.close()
    assert [a for _, a, _ in read_records(path)] == [b"x"]


def test_snapshot_is_atomic_and_auto_rewrite_rule(tmp_path):
    path = str(tmp_path / "a.aof")
    write(path, record(LOADJOB, b"old"))
    write_snapshot(path, [record(LOADJOB, b"new")])
    assert [a for _, a, _ in read_records(path)] == [b"new"]
    assert not [p for p in os.listdir(tmp_path) if "temp" in p]
    assert should_auto_rewrite(200, 100, 100, 64) and not should_auto_rewrite(199, 100, 100, 64)
    assert not should_auto_rewrite(10 ** 9, 1, 0, 64) and not should_auto_rewrite(63, 1, 100, 64)


def test_check_aof_tool(tmp_path, capsys):
    ok = str(tmp_path / "ok.aof")
    write(ok, record(LOADJOB, b"a"))
    trunc = str(tmp_path / "t.aof")
    write(trunc, record(LOADJOB, b"a"), b"*2\r\n$7\r\nLOAD")
    corrupt = str(tmp_path / "c.aof")
    write(corrupt, record(LOADJOB, b"a"), b"xx\r\n", record(LOADJOB, b"b"))
    assert check_aof.main([ok]) == 0
    assert check_aof.main([ok, trunc]) == 1
    assert check_aof.main([trunc, "--fix", "--yes"]) == 0
    assert check_aof.main([trunc]) == 0
    assert os.path.getsize(trunc) == len(record(LOADJOB, b"a"))
    assert check_aof.main([corrupt, "--fix", "--yes"]) == 1
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "byte offset %d" % len(record(LOADJOB, b"a")) in out
    # and as a program
    r = subprocess.run([sys.executable, "-m", "disque.check_aof", ok], capture_output=True, text=True)
    assert r.returncode == 0 and "OK, 1 records" in r.stdout


def test_a_record_cut_short_before_whole_records_is_corruption(tmp_path):
    """A torn record in the middle: before, a cut whose declared length ran past the end
    was taken for a torn tail, and the whole records after it were dropped with it."""
    path = str(tmp_path / "a.aof")
    good = record(LOADJOB, b"job-one")
    torn = record(LOADJOB, b"a-long-job-body-" * 8)[:30]
    write(path, good, torn, record(DELJOB, b"D-" + b"x" * 38))
    with pytest.raises(AofCorrupt) as e:
        list(read_records(path))
    assert e.value.offset == len(good)
    assert "a record cut short, followed by whole records %d bytes further" % len(torn) \
        in str(e.value)
    # the same torn record at the end is a torn tail
    write(path, good, torn)
    with pytest.raises(AofTruncated):
        list(read_records(path))


def test_a_failed_background_fsync_is_kept_for_the_worker(tmp_path):
    """everysec: the fsync thread used to drop the error; fsync of a pipe fails (EINVAL)."""
    w = AofWriter(str(tmp_path / "w0.aof"), "everysec")
    r, wfd = os.pipe()
    try:
        os.dup2(wfd, w.fd)              # the writer's descriptor is now a pipe
        w.append(LOADJOB, b"job")
        assert w.flush()
        deadline = time.monotonic() + 10
        while w.fsync_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert w.fsync_error is not None
    finally:
        w.set_policy("no")
        for fd in (r, wfd, w.fd):
            os.close(fd)
