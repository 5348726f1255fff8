"""The writer of one worker's append-only file (SPEC 12; the format: disque.contracts.aof_format).

Writes are buffered during a batch and written before the batch's replies leave the
worker, so a reply never announces a job the file does not hold. `appendfsync always`
fsyncs that write before the replies go out; `everysec` fsyncs from a background thread
at most once a second; `no` leaves it to the kernel. A failed write puts the writer in an
error state (the worker then answers write commands with -MISCONF) until a write works; a
failed background fsync is kept in `fsync_error` for the worker (which rewrites the file).
"""
import os
import threading
import time

from disque.contracts.aof_format import record


class AofWriter:
    """One worker's open AOF: records appended during a batch, written by flush()."""

    def __init__(self, path, fsync="everysec"):
        self.path = path
        self.policy = fsync
        self.buf = []
        self.buf_bytes = 0                  # bytes appended and not written yet
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.base_size = self.size          # size after the last load/rewrite
        self.error = None                   # strerror of the last failed write
        self.fsync_error = None             # a background fsync failed (the owner resets it)
        self.delayed_fsync = 0              # writes that waited 2 s for a slow fsync
        self.lock = threading.Lock()
        self.dirty_since_fsync = False
        self.fsync_in_progress = False
        self.fsync_started = 0.0
        self.skip_fsync = False             # no-appendfsync-on-rewrite while rewriting
        self.rewrite_buffer = None          # records written while a rewrite runs
        self.rewrite_bytes = 0              # their total size (memory accounting, SPEC 9)
        self.stop = threading.Event()
        self.thread = None
        self.set_policy(fsync)

    def set_policy(self, policy):
        """appendfsync always|everysec|no, also at runtime (CONFIG SET appendfsync)."""
        self.policy = policy
        if policy == "everysec" and self.thread is None:
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self.fsync_loop, args=(self.stop,),
                                           name="aof-fsync", daemon=True)
            self.thread.start()
        elif policy != "everysec" and self.thread is not None:
            self.stop.set()
            self.thread.join(5.0)
            self.thread = None

    @property
    def rewrite_buffer(self):
        return self._rewrite_buffer

    @rewrite_buffer.setter
    def rewrite_buffer(self, records):
        """[] when a rewrite starts, None when it ends: the byte count follows."""
        self._rewrite_buffer = records
        self.rewrite_bytes = sum(len(r) for r in records) if records else 0

    def append(self, cmd, arg):
        rec = record(cmd, arg)
        self.buf.append(rec)
        self.buf_bytes += len(rec)

    def flush(self):
        """Write what the batch appended; False (and self.error set) when writing failed.

        Unlike upstream, a write is never postponed while the background fsync runs (upstream
        delays it up to 2 s, replying meanwhile): the records always reach the file before
        the replies leave, so a killed process loses nothing acknowledged. The price is
        that a write may wait for a slow fsync; one that finds an fsync running for more
        than 2 s is counted in `delayed_fsync` (INFO aof_delayed_fsync)."""
        if not self.buf:
            return self.error is None
        if self.fsync_in_progress and time.monotonic() - self.fsync_started > 2.0:
            self.delayed_fsync += 1
        data = self.buf[0] if len(self.buf) == 1 else b"".join(self.buf)
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self.fd, view[written:])
        except OSError as e:
            self.error = e.strerror or str(e)
            if written:
                # never leave half a record behind: cut the file back to its last whole
                # record; if even that fails, keep only the part still to be written
                try:
                    os.ftruncate(self.fd, self.size)
                except OSError:
                    if self.rewrite_buffer is not None:
                        self.rewrite_buffer.append(data[:written])
                        self.rewrite_bytes += written
                    self.size += written
                    data = data[written:]
            # keep the data: it is written again on the next flush (retried every second)
            self.buf = [data]
            self.buf_bytes = len(data)
            return False
        self.buf = []
        self.buf_bytes = 0
        self.size += len(data)
        if self.rewrite_buffer is not None:
            self.rewrite_buffer.append(data)
            self.rewrite_bytes += len(data)
        if self.policy == "always" and not self.skip_fsync:
            try:
                os.fsync(self.fd)
            except OSError as e:
                self.error = e.strerror or str(e)
                try:        # their replies never leave: the file must not hold them either
                    os.ftruncate(self.fd, self.size - len(data))
                    self.size -= len(data)
                except OSError:
                    pass
                return False
        else:
            self.dirty_since_fsync = True
        self.error = None
        return True

    def fsync_loop(self, stop):
        while not stop.wait(1.0):
            if self.dirty_since_fsync and not self.skip_fsync:
                self.dirty_since_fsync = False
                with self.lock:
                    self.fsync_started = time.monotonic()
                    self.fsync_in_progress = True
                    try:
                        os.fsync(self.fd)
                    except OSError as e:
                        # the kernel may have dropped the dirty pages ("fsyncgate"): a later
                        # fsync would succeed without them, so the file must be rewritten
                        self.fsync_error = e.strerror or str(e)
                    finally:
                        self.fsync_in_progress = False

    def close(self):
        self.flush()
        self.set_policy("no")
        with self.lock:
            try:
                os.fsync(self.fd)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = -1

    def reopen(self, path=None):
        """After a rewrite renamed a new file over ours (or made one at a new `path`).

        The old descriptor is closed by a short-lived thread: it was the last reference to
        the replaced file, and closing it frees all its blocks, which for a large file
        takes tens of milliseconds (upstream closes it in a background job too)."""
        with self.lock:
            threading.Thread(target=os.close, args=(self.fd,), name="aof-close",
                             daemon=True).start()
            if path is not None:
                self.path = path
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.size = self.base_size = os.fstat(self.fd).st_size
            self.dirty_since_fsync = False
            self.fsync_error = None     # the old file's: the new one was fsynced whole


def write_snapshot(path, records, tmp_path=None):
    """Write `records` (bytes) to a temp file, fsync and rename it over `path` atomically."""
    tmp = tmp_path or "%s.temp-rewriteaof-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        written = 0
        for chunk in records:
            f.write(chunk)
            written += len(chunk)
            if written >= 32 * 1024 * 1024:        # aof-rewrite-incremental-fsync
                f.flush()
                os.fsync(f.fileno())
                written = 0
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def should_auto_rewrite(size, base_size, percentage, min_size):
    """auto-aof-rewrite-percentage / -min-size (SPEC 12)."""
    if not percentage or size < min_size:
        return False
    base = base_size or 1
    return (size - base) * 100 // base >= percentage
