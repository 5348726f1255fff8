"""Incremental batch runs: which input bytes are new since the last run, and the state kept
between runs (OUT/_state/).

A local input file is known by its identity (device, inode), which a rotation by rename
(`stats.jsonl` -> `stats.jsonl.1`) keeps, and the manifest records how many of its bytes
were processed. On the next run a known file contributes only the bytes after that offset,
an unknown file (a new one, or one that replaced an old name) all of its bytes, and a file
now shorter than its offset (truncated in place) all of them again. Every run stops each
file at its last newline: a line still being written is left for the next run.

Whole files are handed to Spark by path; the new part of a grown file is copied into a
segment file under OUT/_state/segments/ first (Spark cannot start a text file at an
offset). Non-local inputs (hdfs://, s3a://...) have no inode: they are always rebuilt in
full (say so, never guess).

The rest of the state (the last sample of every worker and queue, the counts, the node
time grid) is written by batch.BatchPipeline; this module only reads and writes the
manifest file and computes the segments.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

STATE_DIR = "_state"
MANIFEST = "manifest.json"
SEGMENTS = "segments"
_TAIL_PROBE = 64 * 1024


@dataclass
class Segment:
    path: str          # the input file
    start: int         # first byte to read
    end: int           # one past the last byte to read (just after a newline)
    size: int          # the file's size when listed

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == self.size


def file_key(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def complete_end(path: str, size: int) -> int:
    """Offset just after the last newline of the first ``size`` bytes (0 when there is none)."""
    if size == 0:
        return 0
    with open(path, "rb") as f:
        pos = size
        while pos > 0:
            lo = max(0, pos - _TAIL_PROBE)
            f.seek(lo)
            chunk = f.read(pos - lo)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return lo + i + 1
            pos = lo
    return 0


def load_manifest(state_dir: str) -> dict | None:
    p = os.path.join(state_dir, MANIFEST)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def save_manifest(state_dir: str, manifest: dict) -> None:
    os.makedirs(state_dir, exist_ok=True)
    tmp = os.path.join(state_dir, "." + MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f)
    os.replace(tmp, os.path.join(state_dir, MANIFEST))


def plan(files: list[str], manifest: dict | None) -> tuple[list[Segment], dict]:
    """The segments to read now and the manifest to save once they are processed."""
    known = (manifest or {}).get("files", {})
    segments, new_files = [], {}
    for path in files:
        try:
            st = os.stat(path)
        except FileNotFoundError:            # rotated away between listing and now
            continue
        key = file_key(st)
        done = known.get(key, {}).get("done", 0)
        if done > st.st_size:                 # truncated in place: read it again
            done = 0
        end = complete_end(path, st.st_size)
        new_files[key] = {"path": path, "done": max(end, done)}
        if end > done:
            segments.append(Segment(path, done, end, st.st_size))
    # files that disappeared (rotated out of `keep`) are forgotten
    return segments, {"files": new_files}


def materialize(segments: list[Segment], seg_dir: str) -> list[str]:
    """Spark paths for the segments: whole files as they are, parts copied under seg_dir."""
    shutil.rmtree(seg_dir, ignore_errors=True)
    paths = []
    for i, s in enumerate(segments):
        if s.whole:
            paths.append(s.path)
            continue
        os.makedirs(seg_dir, exist_ok=True)
        dest = os.path.join(seg_dir, f"{i:05d}-{os.path.basename(s.path)}")
        with open(s.path, "rb") as src, open(dest, "wb") as out:
            src.seek(s.start)
            left = s.end - s.start
            while left > 0:
                chunk = src.read(min(left, 8 << 20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
        paths.append(dest)
    return paths
