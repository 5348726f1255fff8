"""Loading the AOF files at start-up (SPEC 12, docs/persistence.md): every worker reads every
file of the node in slices, keeps the records of the jobs whose slot it owns, replays
LOADJOB / DELJOB per file and registers the survivors. Driven by `Persistence`
(disque/workers/persistence.py) and, across workers, by disque/frontend/persistence_phases.py.
"""
import os
import time

from disque._fast.aofload import BATCH, FOREIGN, MORE, Restored, restore_slice, scan_chunk
from disque._fast.jobid import id_worker
from disque.contracts import job_codec as codec
from disque.contracts.aof_format import LOADJOB, AofCorrupt, AofTruncated, read_records


READ_CHUNK = 4 << 20
SLICE_RECORDS = 4096        # records scanned in C between two looks at the slice's clock
SLICE_JOBS = 256            # jobs restored in C between two looks at it


def read_on(f, buf, base, pos):
    """The next chunk of the file after what is left of buf from pos: (buf, the file offset
    of its first byte, 0, whether the file ended)."""
    chunk = f.read(READ_CHUNK)
    return buf[pos:] + chunk, base + pos, 0, not chunk


class Loader:
    """Reading every file of the node, in slices (a generator resumed by `step`)."""

    def __init__(self, shard, files, enqueue_once, load_truncated, own_only=False):
        self.files = [(int(k), path) for k, path in files]
        # own_only: the node restarts with the files of as many workers as it has, so each
        # worker reads only its own file; a record of another worker's slot there means the
        # files were written with another number of workers: stop before registering
        # anything and answer {"foreign": True} (the front-end then loads every file)
        self.own_only = own_only
        if own_only:
            self.files = [(k, path) for k, path in self.files if k == shard.index]
        self.enqueue_once = enqueue_once
        self.load_truncated = load_truncated
        self.total = 0
        for _, path in self.files:
            try:
                self.total += os.path.getsize(path)
            except OSError:
                pass
        self.done_bytes = 0
        self.result = None
        self.started = time.time()
        self.gen = self.run(shard)
        self.shard_tick = shard.tick
        self.deadline = 0.0

    def step(self, budget_s):
        """Work for about `budget_s`; True when finished (self.result is set)."""
        self.deadline = time.perf_counter() + budget_s
        self.shard_tick()
        try:
            next(self.gen)
            return False
        except StopIteration:
            return True
        except (AofCorrupt, AofTruncated, OSError, ValueError) as e:
            self.result = {"ok": False, "error": self.error_text(e)}
            return True

    @staticmethod
    def error_text(e):
        if isinstance(e, AofTruncated):
            return ("Unexpected end of file reading the append only file %s at byte offset %d "
                    "(%d bytes after the last complete record). Make a backup of the file, then "
                    "use disque-check-aof --fix, or set aof-load-truncated yes and restart"
                    % (e.path, e.valid_up_to, e.size - e.valid_up_to))
        if isinstance(e, OSError):
            return "Can't read the append only file %s: %s" % (e.filename or "", e.strerror or e)
        return str(e)

    def run(self, shard):
        """The load, in slices (a yield when the slice's time is up): the files scanned for
        the records of this worker's jobs, then the jobs that survive put back."""
        warnings = []
        survivors = yield from self.scan(shard, warnings)
        if survivors is not None:           # None: own_only found another worker's job
            yield from self.restore(shard, survivors, warnings)

    def scan(self, shard, warnings):
        """Every file's records of this worker's jobs: {job id: (payload, path, offset)} of
        those not deleted after their last LOADJOB, or None (own_only, a foreign job)."""
        survivors = {}
        base = 0
        for k, path in self.files:
            alive = {}
            f = open(path, "rb")
            try:
                size = os.fstat(f.fileno()).st_size
                foreign = yield from self.scan_file(f, path, size, shard, alive, base)
                if foreign:
                    self.result = {"ok": True, "foreign": True}
                    return None
            except AofTruncated as e:
                if not self.load_truncated:
                    raise
                warnings.append("!!! Warning: short read while loading the AOF file %s: the %d "
                                "bytes after the last complete record (byte offset %d) are "
                                "ignored (aof-load-truncated yes)"
                                % (path, e.size - e.valid_up_to, e.valid_up_to))
            finally:
                f.close()
            # a job's records are in one file; after a crash in the middle of a start-up
            # that changed the number of workers it may be in two: it lives if it lives in one
            survivors.update(alive)
            base += size
            self.done_bytes = base
        return survivors

    def scan_file(self, f, path, size, shard, alive, done_before):
        """One file, read in chunks of 4 MB: the records our writer writes go through the
        C scanner (aofscan.scan_chunk); any other record through the reference parser,
        which gives the exact AofCorrupt / AofTruncated with the offset. True: own_only
        met a job another worker owns."""
        me, nworkers, own_only = shard.index, shard.nworkers, self.own_only
        min_payload = codec.FIXED.size
        buf = b""
        base = 0                    # file offset of buf[0]
        pos = 0
        eof = False
        while True:
            why, pos = scan_chunk(buf, pos, SLICE_RECORDS, me, nworkers, own_only, alive,
                                  path, base, min_payload)
            if why == BATCH:
                self.done_bytes = done_before + base + pos
                if time.perf_counter() > self.deadline:
                    yield
                continue
            if why == FOREIGN:
                return True
            if why == MORE and not eof:
                buf, base, pos, eof = read_on(f, buf, base, pos)
                continue
            if pos >= len(buf):
                return False
            try:
                cmd, arg, rel_end = next(read_records(path, buf[pos:], whole=eof))
            except AofTruncated:
                if eof:
                    raise AofTruncated(path, base + pos, size)
                buf, base, pos, eof = read_on(f, buf, base, pos)   # the record goes on
                continue
            except AofCorrupt as e:
                raise AofCorrupt(path, base + pos + e.offset, e.reason)
            if cmd == LOADJOB:
                if len(arg) < min_payload:
                    raise AofCorrupt(path, base + pos, "LOADJOB payload of %d bytes" % len(arg))
                jid = arg[4:44]
            else:
                if len(arg) != 40:
                    raise AofCorrupt(path, base + pos, "DELJOB with a %d-byte job ID" % len(arg))
                jid = arg
            if id_worker(jid, nworkers) == me:
                if cmd == LOADJOB:
                    alive[jid] = (arg, path, base + pos)
                else:
                    alive.pop(jid, None)
            elif own_only:
                return True
            pos += rel_end

    def restore(self, shard, survivors, warnings):
        """The surviving jobs back in the shard (aofload.restore_slice), a slice at a time."""
        counts = Restored()
        items = list(survivors.items())
        survivors.clear()
        names = {}
        done = 0
        while done < len(items):
            if time.perf_counter() > self.deadline:
                yield
            done = restore_slice(shard, items, done, SLICE_JOBS, names, self.enqueue_once, counts)
        loaded, queued, expired = counts.loaded, counts.queued, counts.expired
        self.result = {"ok": True, "jobs": loaded, "queued": queued, "expired": expired,
                       "warnings": warnings}
