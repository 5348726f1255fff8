"""Compaction of a worker's spill log (docs/memory.md, "Spilling"): the live records of a
mostly dead segment copied to the active one, a chunk at a time, paid for by what spilling
writes. Spill (disque/workers/spill.py) owns the log and the index and calls `due` and
`step` from its work."""
import time

from disque.workers.spill_log import walk_records

COMPACT_CHUNK = 4 << 20
# compaction copies no more than spilling writes (banked up to this): it keeps a growing log
# within about twice its live bytes, and leaves a draining one alone, whose live records are
# about to be read back anyway (copying them once made a 10 M-job drain 0.57x from 0.83x)
COMPACT_CREDIT_MAX = 2 * COMPACT_CHUNK


class SpillCompaction:
    """Needs the Spill: its log, index, `settle` and `disk_failed`."""

    def __init__(self, spill):
        self.spill = spill
        self.under_way = None           # (segment, next offset) being compacted
        self.credit = 0                 # bytes it may copy (COMPACT_CREDIT_MAX)
        self.done = 0                   # compactions finished
        self.bytes_copied = 0

    def earn(self, written):
        """Spilling wrote `written` bytes: compaction may copy as many."""
        self.credit = min(self.credit + written, COMPACT_CREDIT_MAX)

    def reset(self):
        self.under_way = None
        self.credit = 0

    def due(self):
        """Whether compaction has credit and a segment to copy (chosen here when none is
        under way)."""
        spill_log = self.spill.log
        if spill_log is None or self.credit <= 0:
            return False
        if self.under_way is None:
            seg = spill_log.compact_candidate()
            if seg is None:
                return False
            self.under_way = (seg, 0)
        return True

    def step(self, deadline):
        """Copy the live records of the segment under way to the active one, a chunk at a
        time; the segment is deleted when its last live record has moved."""
        spill = self.spill
        spill.settle()
        spill_log = spill.log
        seg, pos = self.under_way
        index = spill.index
        while time.perf_counter_ns() < deadline and self.credit > 0:
            if spill_log.segs.get(seg.n) is not seg or pos >= seg.size:
                self.under_way = None
                self.done += 1
                return
            try:
                buf = spill_log.pread(seg, pos, COMPACT_CHUNK)
            except OSError as e:
                spill.disk_failed(e)
                self.under_way = None
                return
            records, at = walk_records(buf, pos, pos + len(buf) >= seg.size)
            if at == 0:
                self.under_way = None       # a torn tail: nothing more to read here
                return
            moving = []
            for rec_at, size, jid in records:
                slot = index.find(jid)
                if slot >= 0 and index.location(slot) == (seg.n, pos + rec_at, size):
                    moving.append((slot, size, buf[rec_at:rec_at + size]))
            if moving:
                try:
                    locs = spill_log.append(b"".join([m[2] for m in moving]),
                                            [m[1] for m in moving])
                except OSError as e:
                    spill.disk_failed(e)
                    self.under_way = None
                    return
                for (slot, size, _), (nseg, noff) in zip(moving, locs):
                    index.move(slot, nseg, noff)
                    spill_log.forget(seg.n, size)
                    self.credit -= size
                    self.bytes_copied += size
            pos += at
            self.under_way = (seg, pos)
