"""A worker's spill log (docs/design.md, "Spilled jobs"): the records of its spilled jobs in
segment files in `dir`, appended in batches and read back by (segment, offset, size).

Each segment counts its live records and bytes; a segment with no live record left is
deleted at once (the one being appended to is truncated instead), and SpillCompaction.step
copies the live records out of segments that are mostly dead. The log is a cache of what
the worker holds, not a durable store: the AOF is. A worker deletes its old segments when
it starts.

The segments are written with O_DIRECT where the file system allows it: a spill log is
written once and read once, so the page cache would only copy every body once more and hold
it (in the container's memory, where that is counted) until writeback. A batch therefore
starts and ends on an ALIGN boundary (zeros pad it: a record never has length 0) and is
written from a page-aligned buffer of the log's own. Reads go through the page cache, whose
read-ahead fetches the next records while the worker serves (a direct read is a trip to the
device each time), and what was read is dropped from it at once.

Spilling appends in the background (disque/_fast/bgwrite.pyx, a thread that needs no GIL):
the worker serves while the device writes, and waits for a batch only when it appends the
next or touches the log (`settle`). A batch whose write fails is cut back and handed to
`lost`, which brings its jobs back into RAM from the batch's bytes: no job is ever only in
a write that failed.
"""
import errno
import fcntl
import glob
import logging
import mmap
import os
import struct

from disque._fast.bgwrite import BackgroundWriter
from disque._fast.codec import SPILL_HEADER, spill_records_into, spill_sizes

log = logging.getLogger("disque.worker")

SEGMENT_BYTES = 64 << 20        # a segment is closed for appends past this size
READ_SPAN = 4 << 20             # largest single read when reading neighbouring records
READ_GAP = 64 << 10             # neighbours this close are read together, gap included
# A record: codec.spill_records' header (requeue time, flags, state), then the job in the
# AOF's storage form (disque/_fast/codec.pyx), which starts with its own u32 length.
SIZE_AT = SPILL_HEADER
ID_AT = SIZE_AT + 4
U32 = struct.Struct("<I")
ALIGN = 4096                    # O_DIRECT's unit for offsets, lengths and buffers
O_DIRECT = getattr(os, "O_DIRECT", 0)
ZEROS = bytes(ALIGN)            # a batch's padding


def aligned(n):
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def locations(n, start, sizes):
    """[(segment n, offset)] of records of `sizes` written one after the other from `start`."""
    out = []
    for size in sizes:
        out.append((n, start))
        start += size
    return out


def walk_records(buf, base, last):
    """The whole records in `buf`, read from offset `base` of a segment (`last`: to its
    end): ([(position in buf, size, job ID)], how far they and the padding after them
    reach; 0 when nothing whole is there, a torn tail). A batch's zero padding is passed
    over: a record's length is never 0, and the next batch starts at an ALIGN boundary."""
    out = []
    at, end = 0, len(buf)
    while end - at >= ID_AT:
        length = U32.unpack_from(buf, at + SIZE_AT)[0]
        if length == 0:
            at = aligned(base + at) - base
            continue
        size = ID_AT + length
        if end - at < size:
            break
        out.append((at, size, bytes(buf[at + ID_AT:at + ID_AT + 40])))
        at += size
    if last and at < end and not buf[at:].strip(b"\0"):
        at = end            # the last batch's padding, shorter than a record's header
    return out, at


class Segment:
    __slots__ = ("n", "path", "fd", "rfd", "size", "live", "live_bytes")

    def __init__(self, n, path, fd):
        self.n, self.path, self.fd = n, path, fd
        self.rfd = None         # for reads through the page cache (its read-ahead)
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
        self.size_total = 0             # every segment's size, and of that the live records'
        self.live_total = 0             # bytes: kept as they change, for compact_candidate
        self.direct = bool(O_DIRECT)    # cleared when the file system refuses O_DIRECT
        self.wbuf = None                # the page-aligned write buffer, grown as needed
        self.writer = None              # the thread of background appends (one at a time)
        self.in_flight = None           # (segment, start, padded length, length, sizes)
        self.lost = None                # called with (error, data, sizes, locations) of a
                                        # background append that failed (set by Spill)
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
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | (O_DIRECT if self.direct else 0), 0o600)
        except OSError as e:
            if not self.direct or e.errno != errno.EINVAL:
                raise
            self.buffered()
            fd = os.open(path, flags, 0o600)
        self.next_n += 1
        seg = self.segs[n] = Segment(n, path, fd)
        old, self.active = self.active, seg
        if old is not None and old.live == 0:
            self.delete(old)
        return seg

    def buffered(self):
        """The file system refuses O_DIRECT (EINVAL): the page cache from now on."""
        log.info("Spill log in %s: the file system refuses O_DIRECT, writing through the "
                 "page cache", self.dir)
        self.direct = False
        for seg in self.segs.values():
            fcntl.fcntl(seg.fd, fcntl.F_SETFL, fcntl.fcntl(seg.fd, fcntl.F_GETFL) & ~O_DIRECT)

    def write_buffer(self, size):
        """The page-aligned buffer (anonymous mmap), of at least `size` bytes."""
        if self.wbuf is None or len(self.wbuf) < size:
            if self.wbuf is not None:
                self.wbuf.close()
            self.wbuf = mmap.mmap(-1, aligned(max(size, 256 << 10)))
        return self.wbuf

    def drop_buffer(self):
        """The write buffer goes back to the system (it is as big as the biggest batch,
        megabytes after a burst); the next append maps a new one. Not while a write from
        it is in flight."""
        if self.wbuf is not None and self.in_flight is None:
            self.wbuf.close()
            self.wbuf = None

    def append(self, data, sizes, background=False):
        """Write the records in `data`, of `sizes`, as one batch, padded to ALIGN:
        [(segment, offset)]. On an error (OSError: a full disk) nothing is kept and the
        segment is cut back. In the `background` the write is left to the writer thread
        (the device's time is not the worker's): every other call of the log waits for
        it first (`settle`), and hands a batch that failed to `lost`."""
        seg, start, buf, total = self.reserve(len(data))
        buf[:len(data)] = data
        buf[len(data):total] = ZEROS[:total - len(data)]
        self.commit(seg, start, total, len(data), sizes, background)
        return locations(seg.n, start, sizes)

    def append_jobs(self, jobs, background=False):
        """As `append`, the spill records of `jobs` (codec.spill_records' form) made right
        in the write buffer: (their sizes, segment, offset of the first; the others
        follow it)."""
        sizes, length = spill_sizes(jobs)
        seg, start, buf, total = self.reserve(length)
        spill_records_into(jobs, sizes, buf, total)
        self.commit(seg, start, total, length, sizes, background)
        return sizes, seg.n, start

    def reserve(self, length):
        """Where a batch of `length` bytes goes: (segment, offset, write buffer, length
        padded to ALIGN)."""
        self.settle()
        seg = self.active
        if seg is None or seg.size >= SEGMENT_BYTES:
            seg = self.roll()
        total = aligned(length)
        return seg, seg.size, self.write_buffer(total), total

    def commit(self, seg, start, total, length, sizes, background):
        """The batch in the write buffer goes to `seg` at `start`, and is counted."""
        if not background:
            self.write_out(seg, start, total)
        self.count(seg, total, len(sizes), length)
        self.bytes_written += length
        self.records_written += len(sizes)
        if background:
            if self.writer is None:
                self.writer = BackgroundWriter()
            self.writer.submit(seg.fd, self.wbuf, total, start)
            self.in_flight = (seg, start, total, length, sizes)

    def count(self, seg, size, live, live_bytes):
        """A segment's size, live records and live bytes change, and the log's totals with
        them (the one place either changes)."""
        seg.size += size
        seg.live += live
        seg.live_bytes += live_bytes
        self.size_total += size
        self.live_total += live_bytes

    def write_out(self, seg, start, total):
        """The buffer's first `total` bytes at `start` of `seg`; cut back on an error."""
        view = memoryview(self.wbuf)
        done = 0
        try:
            while done < total:
                try:
                    done += os.pwrite(seg.fd, view[done:total], start + done)
                except OSError as e:
                    if not self.direct or e.errno != errno.EINVAL:
                        raise
                    self.buffered()
        except OSError:
            try:
                os.ftruncate(seg.fd, start)
            except OSError:
                pass
            raise
        finally:
            view.release()

    def writing(self):
        """A background append is still being written."""
        return self.in_flight is not None and self.writer.busy()

    def settle(self):
        """Wait for the background append in flight, if any. One that failed is undone
        (its segment was cut back) and its batch handed to `lost`, whose jobs are in no
        other place."""
        if self.in_flight is None:
            return
        seg, start, total, length, sizes = self.in_flight
        self.in_flight = None
        _, err = self.writer.wait()
        if not err:
            return
        if err == errno.EINVAL and self.direct:
            self.buffered()
            try:
                self.write_out(seg, start, total)
                return
            except OSError as e:
                error = e
        else:
            error = OSError(err, os.strerror(err))
            try:
                os.ftruncate(seg.fd, start)
            except OSError:
                pass
        self.count(seg, start - seg.size, -len(sizes), -length)
        self.bytes_written -= length
        self.records_written -= len(sizes)
        # the buffer still holds the batch: nothing was written into it since
        self.lost(error, bytes(self.wbuf[:length]), sizes, locations(seg.n, start, sizes))

    def pread(self, seg, start, length):
        """`length` bytes at `start` of `seg` (fewer at its end): bytes. Reads go through
        the page cache, whose read-ahead fetches what comes next while the worker serves;
        what was read is dropped from it at once (it is read once)."""
        self.settle()
        if seg.rfd is None:
            seg.rfd = os.open(seg.path, os.O_RDONLY | os.O_CLOEXEC)
        buf = os.pread(seg.rfd, length, start)
        os.posix_fadvise(seg.rfd, start, length, os.POSIX_FADV_DONTNEED)
        return buf

    def forget(self, n, size):
        """A record is no longer live (its job was loaded back or deleted)."""
        self.settle()
        seg = self.segs.get(n)
        if seg is None:
            return
        self.count(seg, 0, -1, -size)
        if seg.live <= 0:
            if seg is self.active:
                try:
                    os.ftruncate(seg.fd, 0)
                    self.count(seg, -seg.size, -seg.live, -seg.live_bytes)
                except OSError:
                    pass
            else:
                self.delete(seg)

    def delete(self, seg):
        if self.segs.pop(seg.n, None) is seg:
            self.count(seg, -seg.size, -seg.live, -seg.live_bytes)
        os.close(seg.fd)
        if seg.rfd is not None:
            os.close(seg.rfd)
        try:
            os.unlink(seg.path)
        except OSError as e:
            log.warning("Can't remove the spill segment %s: %s", seg.path, e.strerror)
        self.segments_deleted += 1

    def read(self, locs):
        """The records at [(segment, offset, size)], as bytes, in that order. They are
        read in log order, neighbours in one segment together: a queue's spilled tail was
        written newest first and is read back oldest first, and a read in the order asked
        would be one per record, past the read-ahead each a trip to the device. OSError
        when the disk fails."""
        n = len(locs)
        order = sorted(range(n), key=locs.__getitem__)
        out = [None] * n
        i = 0
        while i < n:
            seg_n, start, size = locs[order[i]]
            end = start + size
            j = i + 1
            while j < n:
                s2, o2, z2 = locs[order[j]]
                if s2 != seg_n or o2 < end or o2 - end > READ_GAP or o2 + z2 - start > READ_SPAN:
                    break
                end = o2 + z2
                j += 1
            buf = self.pread(self.segs[seg_n], start, end - start)
            if len(buf) != end - start:
                raise OSError(5, "short read in spill segment %d" % seg_n)
            if j == i + 1:
                out[order[i]] = buf
            else:
                view = memoryview(buf)
                for k in order[i:j]:
                    _, off, z = locs[k]
                    out[k] = view[off - start:off - start + z]
            self.bytes_read += end - start
            i = j
        self.records_read += n
        return out

    def compact_candidate(self):
        """The closed segment with the smallest live share, under half, once the log
        holds more than twice its live bytes (plus a segment): a queue being drained
        frees its segments by itself, and copying them would only write twice."""
        if self.size_total <= 2 * self.live_total + SEGMENT_BYTES:
            return None
        best, best_share = None, 0.5
        for seg in self.segs.values():
            if seg is self.active or seg.size == 0:
                continue
            share = seg.live_bytes / seg.size
            if share < best_share:
                best, best_share = seg, share
        return best

    def files(self):
        """(segments, bytes on disk) for INFO."""
        return len(self.segs), self.size_total

    def close(self):
        self.settle()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        for seg in list(self.segs.values()):
            os.close(seg.fd)
            if seg.rfd is not None:
                os.close(seg.rfd)
        self.segs.clear()
        self.size_total = self.live_total = 0
        self.active = None
        if self.wbuf is not None:
            self.wbuf.close()
            self.wbuf = None

    def remove_all(self):
        """FLUSHALL: every segment goes."""
        self.settle()
        for seg in list(self.segs.values()):
            self.delete(seg)
        self.active = None
