"""A worker's spill log (docs/design.md, "Spilled jobs"): the records of its spilled jobs in
segment files in `dir`, appended in batches and read back by (segment, offset, size).

Each segment counts its live records and bytes; a segment with no live record left is
deleted at once (the one being appended to is truncated instead), and Spill.compact_step
copies the live records out of segments that are mostly dead. The log is a cache of what
the worker holds, not a durable store: the AOF is. A worker deletes its old segments when
it starts.
"""
import glob
import logging
import os
import struct

log = logging.getLogger("disque.worker")

SEGMENT_BYTES = 64 << 20        # a segment is closed for appends past this size
READ_SPAN = 4 << 20             # largest single read when reading neighbouring records
READ_GAP = 64 << 10             # neighbours this close are read together, gap included
# A record: qtime (i64), flags, state, 2 spare bytes, then the job in the AOF's storage form
# (disque/_fast/codec.pyx), which starts with its own u32 length.
HEADER = struct.Struct("<qBB2x")
SIZE_AT = HEADER.size
ID_AT = SIZE_AT + 4
U32 = struct.Struct("<I")


def record_size(buf, pos):
    """Length of the record at `pos` of `buf`, or 0 when it is not complete there."""
    if len(buf) - pos < ID_AT:
        return 0
    size = ID_AT + U32.unpack_from(buf, pos + SIZE_AT)[0]
    return size if len(buf) - pos >= size else 0


class Segment:
    __slots__ = ("n", "path", "fd", "size", "live", "live_bytes")

    def __init__(self, n, path, fd):
        self.n, self.path, self.fd = n, path, fd
        self.size = self.live = self.live_bytes = 0


class SpillLog:
    """Needs: a directory and a file name prefix of its own (node ID and worker)."""

    def __init__(self, directory, prefix):
        self.dir = directory
        self.prefix = prefix
        self.segs = {}
        self.active = None
        self.next_n = 1
        self.bytes_written = self.bytes_read = 0
        self.records_written = self.records_read = 0
        self.segments_deleted = 0
        self.remove_old()

    def path(self, n):
        return os.path.join(self.dir, "%s-%06d.spill" % (self.prefix, n))

    def remove_old(self):
        """Segments of an earlier run: the AOF, not the spill log, holds what survives."""
        for path in glob.glob(os.path.join(glob.escape(self.dir), self.prefix + "-*.spill")):
            try:
                os.unlink(path)
            except OSError as e:
                log.warning("Can't remove the old spill segment %s: %s", path, e.strerror)

    def roll(self):
        n = self.next_n
        path = self.path(n)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self.next_n += 1
        seg = self.segs[n] = Segment(n, path, fd)
        old, self.active = self.active, seg
        if old is not None and old.live == 0:
            self.delete(old)
        return seg

    def append(self, recs):
        """Write `recs` (bytes) one after the other: [(segment, offset)]. On an error
        (OSError: a full disk) nothing is kept and the segment is cut back."""
        seg = self.active
        if seg is None or seg.size >= SEGMENT_BYTES:
            seg = self.roll()
        data = b"".join(recs)
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(seg.fd, view[done:], seg.size + done)
        except OSError:
            try:
                os.ftruncate(seg.fd, seg.size)
            except OSError:
                pass
            raise
        out = []
        off = seg.size
        for rec in recs:
            out.append((seg.n, off))
            off += len(rec)
        seg.size = off
        seg.live += len(recs)
        seg.live_bytes += len(data)
        self.bytes_written += len(data)
        self.records_written += len(recs)
        return out

    def forget(self, n, size):
        """A record is no longer live (its job was loaded back or deleted)."""
        seg = self.segs.get(n)
        if seg is None:
            return
        seg.live -= 1
        seg.live_bytes -= size
        if seg.live <= 0:
            if seg is self.active:
                try:
                    os.ftruncate(seg.fd, 0)
                    seg.size = seg.live = seg.live_bytes = 0
                except OSError:
                    pass
            else:
                self.delete(seg)

    def delete(self, seg):
        self.segs.pop(seg.n, None)
        os.close(seg.fd)
        try:
            os.unlink(seg.path)
        except OSError as e:
            log.warning("Can't remove the spill segment %s: %s", seg.path, e.strerror)
        self.segments_deleted += 1

    def read(self, locs):
        """The records at [(segment, offset, size)], as bytes, in that order; neighbours
        in one segment are read together. OSError when the disk fails."""
        out = []
        i, n = 0, len(locs)
        while i < n:
            seg_n, start, size = locs[i]
            end = start + size
            j = i + 1
            while j < n:
                s2, o2, z2 = locs[j]
                if s2 != seg_n or o2 < end or o2 - end > READ_GAP or o2 + z2 - start > READ_SPAN:
                    break
                end = o2 + z2
                j += 1
            buf = os.pread(self.segs[seg_n].fd, end - start, start)
            if len(buf) != end - start:
                raise OSError(5, "short read in spill segment %d" % seg_n)
            view = memoryview(buf)
            for k in range(i, j):
                _, off, z = locs[k]
                out.append(view[off - start:off - start + z])
            self.bytes_read += end - start
            i = j
        self.records_read += n
        return out

    def compact_candidate(self):
        """The closed segment with the smallest live share, under half, once the log
        holds more than twice its live bytes (plus a segment): a queue being drained
        frees its segments by itself, and copying them would only write twice."""
        total = sum(s.size for s in self.segs.values())
        live = sum(s.live_bytes for s in self.segs.values())
        if total <= 2 * live + SEGMENT_BYTES:
            return None
        best, best_share = None, 0.5
        for seg in self.segs.values():
            if seg is self.active or seg.size == 0:
                continue
            share = seg.live_bytes / seg.size
            if share < best_share:
                best, best_share = seg, share
        return best

    def read_span(self, seg, start, length):
        return os.pread(seg.fd, length, start)

    def files(self):
        """(segments, bytes on disk) for INFO."""
        return len(self.segs), sum(s.size for s in self.segs.values())

    def close(self):
        for seg in list(self.segs.values()):
            os.close(seg.fd)
        self.segs.clear()
        self.active = None

    def remove_all(self):
        """FLUSHALL: every segment goes."""
        for seg in list(self.segs.values()):
            self.delete(seg)
        self.active = None
