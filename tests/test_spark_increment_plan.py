"""Which input bytes an incremental run reads (spark/increment.py): no Spark needed."""
from __future__ import annotations

import os

import pytest

from disque_spark import increment

pytestmark = pytest.mark.unit


def test_new_bytes_follow_files_through_rotation_and_stop_at_the_last_newline(tmp_path):
    log = tmp_path / "stats.jsonl"
    log.write_text("a\nb\n")
    segs, manifest = increment.plan([str(log)], None)
    assert [(s.start, s.end, s.whole) for s in segs] == [(0, 4, True)]

    with open(log, "a") as f:
        f.write("c\nhalf")                      # a line still being written
    segs, manifest = increment.plan([str(log)], manifest)
    assert [(s.start, s.end) for s in segs] == [(4, 6)]
    paths = increment.materialize(segs, str(tmp_path / "seg"))
    assert open(paths[0]).read() == "c\n"

    with open(log, "a") as f:
        f.write(" done\n")
    os.replace(log, tmp_path / "stats.jsonl.1")   # rotation by rename keeps the inode
    log.write_text("d\n")
    files = [str(tmp_path / "stats.jsonl.1"), str(log)]
    segs, manifest = increment.plan(files, manifest)
    got = {os.path.basename(s.path): (s.start, s.end) for s in segs}
    assert got == {"stats.jsonl.1": (6, 16), "stats.jsonl": (0, 2)}
    paths = increment.materialize(segs, str(tmp_path / "seg"))
    assert [open(p).read() for p in paths] == ["half done\n", "d\n"]

    segs, manifest = increment.plan(files, manifest)
    assert segs == []                            # nothing new

    log.write_text("")                           # truncated in place: read again from 0
    log.write_text("e\n")
    segs, _ = increment.plan(files, dict(manifest, files={k: dict(v, done=v["done"] + 100)
                                                          for k, v in manifest["files"].items()}))
    assert sorted((os.path.basename(s.path), s.start) for s in segs) == [("stats.jsonl", 0), ("stats.jsonl.1", 0)]


def test_a_file_without_any_newline_waits(tmp_path):
    p = tmp_path / "stats.jsonl"
    p.write_text('{"v":2')
    segs, manifest = increment.plan([str(p)], None)
    assert segs == [] and list(manifest["files"].values())[0]["done"] == 0
