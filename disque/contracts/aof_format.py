"""The AOF format (SPEC 12), shared by the worker that writes it, the loader, the
front-end's start-up phases and disque-check-aof: LOADJOB / DELJOB records in RESP form.

    *2\r\n$7\r\nLOADJOB\r\n$<n>\r\n<serialized job, storage form>\r\n
    *2\r\n$6\r\nDELJOB\r\n$40\r\n<job id>\r\n

Writes are buffered during a batch and written before the batch's replies leave the
worker, so a reply never announces a job the file does not hold. `appendfsync always`
fsyncs that write before the replies go out; `everysec` fsyncs from a background thread
at most once a second; `no` leaves it to the kernel. A failed write puts the writer in an
error state (the worker then answers write commands with -MISCONF) until a write works.
"""
import os
import re

from disque.contracts import job_codec as codec

LOADJOB = b"LOADJOB"
DELJOB = b"DELJOB"


def record(cmd, arg):
    return b"*2\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(cmd), cmd, len(arg), arg)


def loadjob_record(job):
    """The LOADJOB record of a job, storage form (SPEC 11, 12). The codec is C
    (disque._fast.codec behind disque.contracts.job_codec)."""
    payload = codec.serialize(job, True, 0)
    return b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n" % (len(payload), payload)


def aof_stem(appendfilename):
    """`disque.aof` -> `disque`; a name without the .aof suffix is used whole."""
    return appendfilename[:-4] if appendfilename.endswith(".aof") and len(appendfilename) > 4 \
        else appendfilename


def aof_path(directory, appendfilename, port, k):
    """The file of worker k of the node on `port`: <dir>/<stem>.<port>.w<k>.aof, so the
    workers of several nodes can share one `dir`."""
    return os.path.join(directory, "%s.%d.w%d.aof" % (aof_stem(appendfilename), port, k))


def aof_files(directory, appendfilename, port, old=False):
    """{k: path} of every worker file of the node on `port` found in `directory`; with
    old=True, {(generation, k): path} of the files set aside by a start-up that was
    rewriting them (`<stem>.<port>.old<g>.w<k>.aof`, see disque/frontend/persistence_phases.py)."""
    stem = re.escape(aof_stem(appendfilename))
    if old:
        pattern = re.compile(r"^%s\.%d\.old(\d{1,6})\.w(\d{1,6})\.aof$" % (stem, port))
    else:
        pattern = re.compile(r"^%s\.%d\.w(\d{1,6})\.aof$" % (stem, port))
    found = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        m = pattern.match(name)
        if m:
            key = (int(m.group(1)), int(m.group(2))) if old else int(m.group(1))
            found[key] = os.path.join(directory, name)
    return dict(sorted(found.items()))


class AofCorrupt(Exception):
    """Bad data in the middle of the file: the node must not start from it."""

    def __init__(self, path, offset, reason):
        super().__init__("Bad file format reading the append only file %s at byte offset %d: %s"
                         % (path, offset, reason))
        self.path = path
        self.offset = offset
        self.reason = reason


class AofTruncated(Exception):
    """The file ends inside a record (a crash while writing)."""

    def __init__(self, path, valid_up_to, size):
        super().__init__("The append only file %s is truncated: %d bytes after the last "
                         "complete record at offset %d" % (path, size - valid_up_to, valid_up_to))
        self.path = path
        self.valid_up_to = valid_up_to
        self.size = size


def _parse_line(data, pos, prefix, path):
    end = data.find(b"\r\n", pos)
    if end < 0:
        return None, pos
    if data[pos:pos + 1] != prefix:
        raise AofCorrupt(path, pos, "expected %r, got %r" % (prefix.decode(), data[pos:pos + 1]))
    try:
        value = int(data[pos + 1:end])
    except ValueError:
        raise AofCorrupt(path, pos, "bad length %r" % data[pos + 1:end][:20])
    if value < 0:
        raise AofCorrupt(path, pos, "negative length")
    return value, end + 2


RECORD_HEADS = (b"*2\r\n$7\r\nLOADJOB\r\n", b"*2\r\n$6\r\nDELJOB\r\n")


def read_records(path, data=None, whole=True):
    """Yield (command, argument, offset_after) for every complete record.

    Raises AofCorrupt on malformed data and AofTruncated when the file ends inside a
    record (after yielding everything before it). With `whole` (data is all the rest of
    the file), a record cut short but followed by whole records is AofCorrupt: a torn
    record in the middle, whose followers must not be dropped with it."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    pos = 0
    size = len(data)
    while pos < size:
        start = pos
        argc, pos = _parse_line(data, pos, b"*", path)
        if argc is None:
            raise cut_short(path, data, start, whole)
        if argc != 2:
            raise AofCorrupt(path, start, "expected 2 arguments, got %d" % argc)
        args = []
        for _ in range(2):
            n, pos = _parse_line(data, pos, b"$", path)
            if n is None or pos + n + 2 > size:
                raise cut_short(path, data, start, whole)
            if data[pos + n:pos + n + 2] != b"\r\n":
                raise AofCorrupt(path, pos + n, "bulk not terminated by CRLF")
            args.append(data[pos:pos + n])
            pos += n + 2
        cmd = args[0].upper()
        if cmd not in (LOADJOB, DELJOB):
            raise AofCorrupt(path, start, "unknown command %r" % args[0][:20])
        yield cmd, args[1], pos


def cut_short(path, data, start, whole):
    """The data ends inside the record at `start`: AofTruncated (a torn tail), unless
    whole records run from some later record head to the end (AofCorrupt)."""
    if whole:
        for head in RECORD_HEADS:
            at = data.find(head, start + 1)
            while at >= 0:
                if _records_follow(data[at:]):
                    return AofCorrupt(path, start, "a record cut short, followed by whole "
                                      "records %d bytes further" % (at - start))
                at = data.find(head, at + 1)
    return AofTruncated(path, start, len(data))


def _records_follow(data):
    count = 0
    try:
        for _ in read_records("", data, whole=False):
            count += 1
    except AofTruncated:
        pass
    except AofCorrupt:
        return False
    return count > 0


def fsync_dir(path):
    """fsync the directory holding `path`, so a rename or a new file survives a crash."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
