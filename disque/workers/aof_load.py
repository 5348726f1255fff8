"""Loading the AOF files at start-up (SPEC 12, docs/persistence.md): every worker reads every
file of the node in slices, keeps the records of the jobs whose slot it owns, replays
LOADJOB / DELJOB per file and registers the survivors. Driven by `Persistence`
(disque/workers/persistence.py) and, across workers, by disque/frontend/persistence_phases.py.
"""
import os
import time

from disque._fast.job import FLAG_BCAST_QUEUED, FLAG_DELIVERED, QUEUED, mark_active
from disque._fast.jobid import id_worker
from disque.contracts import job_codec as codec
from disque.contracts.aof_format import DELJOB, LOADJOB, AofCorrupt, AofTruncated, read_records


LOAD_HEAD = b"*2\r\n$7\r\nLOADJOB\r\n$"        # then <n>\r\n<payload>\r\n
DEL_HEAD = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"     # then <id>\r\n
READ_CHUNK = 4 << 20


def scan_records(f, path, size):
    """The records of an open AOF, read in chunks of 4 MB:
    (cmd, buf, a, b, offset): the argument is buf[a:b] (sliced only by a caller that keeps
    it), the record starts at byte `offset` of the file. Records written as our writer
    writes them take a fast path; anything else (another spelling, damage) goes through
    aof.read_records, which gives the exact AofCorrupt / AofTruncated with the offset."""
    buf = b""
    base = 0                    # file offset of buf[0]
    pos = 0
    eof = False
    while True:
        n = len(buf)
        need_more = pos >= n
        if not need_more:
            if buf.startswith(LOAD_HEAD, pos):
                nl = buf.find(b"\r\n", pos + 18, pos + 32)
                if nl > 0 and buf[pos + 18:nl].isdigit():
                    a = nl + 2
                    b = a + int(buf[pos + 18:nl])
                    if b + 2 <= n:
                        if buf[b:b + 2] == b"\r\n":
                            yield LOADJOB, buf, a, b, base + pos
                            pos = b + 2
                            continue
                    else:
                        need_more = not eof
                elif n - pos < 32:
                    need_more = not eof
            elif buf.startswith(DEL_HEAD, pos):
                b = pos + 61
                if b + 2 <= n:
                    if buf[b:b + 2] == b"\r\n":
                        yield DELJOB, buf, pos + 21, b, base + pos
                        pos = b + 2
                        continue
                else:
                    need_more = not eof
            elif n - pos < 21:
                need_more = not eof
        if not need_more:
            try:
                cmd, arg, rel_end = next(read_records(path, buf[pos:], whole=eof))
            except AofTruncated:
                if eof:
                    raise AofTruncated(path, base + pos, size)
                need_more = True
            except AofCorrupt as e:
                raise AofCorrupt(path, base + pos + e.offset, e.reason)
            else:
                yield cmd, arg, 0, len(arg), base + pos
                pos += rel_end
                continue
        if eof:
            return
        chunk = f.read(READ_CHUNK)
        if not chunk:
            eof = True
        buf = buf[pos:] + chunk
        base += pos
        pos = 0


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
        me = shard.index
        nworkers = shard.nworkers
        survivors = {}
        base = 0
        min_payload = codec.FIXED.size
        for k, path in self.files:
            alive = {}
            count = 0
            f = open(path, "rb")
            try:
                size = os.fstat(f.fileno()).st_size
                for cmd, buf, a, b, start in scan_records(f, path, size):
                    if cmd == LOADJOB:
                        if b - a < min_payload:
                            raise AofCorrupt(path, start, "LOADJOB payload of %d bytes" % (b - a))
                        jid = buf[a + 4:a + 44]
                    else:
                        if b - a != 40:
                            raise AofCorrupt(path, start, "DELJOB with a %d-byte job ID" % (b - a))
                        jid = buf[a:b]
                    if id_worker(jid, nworkers) == me:
                        if cmd == LOADJOB:
                            alive[jid] = (buf[a:b], path, start)
                        else:
                            alive.pop(jid, None)
                    elif self.own_only:
                        self.result = {"ok": True, "foreign": True}
                        return None
                    count += 1
                    if not count & 255:
                        self.done_bytes = base + start
                        if time.perf_counter() > self.deadline:
                            yield
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

    def restore(self, shard, survivors, warnings):
        """The surviving jobs back in the shard: registered, queued or scheduled as their
        records say; expired ones dropped."""
        loaded = queued = expired = 0
        names = {}
        jobs = shard.jobs
        for count, (jid, (payload, path, offset)) in enumerate(survivors.items()):
            if not count & 255 and time.perf_counter() > self.deadline:
                yield
            if jid in jobs:
                continue            # duplicates are ignored
            now_s = shard.now_s
            now_ms = shard.now_ms
            try:
                job, end = codec.deserialize(payload, 0, True, now_s, now_ms, shard.rand_err())
                if end != len(payload):
                    raise codec.CodecError("%d bytes after the job" % (len(payload) - end))
            except codec.CodecError as e:
                raise AofCorrupt(path, offset, "bad serialized job: %s" % e)
            if job.etime <= now_s:
                expired += 1
                continue
            was_queued = job.state == QUEUED
            mark_active(job)
            if shard.node_id not in job.nodes_delivered:
                # written under another node ID: this node holds the job, as it did then
                job.nodes_delivered = shard.self_nodes
            job.queue = names.setdefault(job.queue, job.queue)
            shard.register_job(job)
            loaded += 1
            if self.enqueue_once:
                if was_queued:
                    counters = job.nacks, job.additional_deliveries
                    if not job.qtime:
                        job.qtime = now_ms      # RETRY 0: restored too (docs/differences.md)
                    # putting it back where it was is no redelivery: no counter grows and
                    # no dead-letter move (MAXDELIVERIES, docs/job-features.md)
                    job.flags &= ~FLAG_BCAST_QUEUED
                    if shard.enqueue(job):
                        queued += 1
                        job.nacks, job.additional_deliveries = counters
                        continue
                elif not job.retry and not job.flags & FLAG_DELIVERED:
                    # a RETRY 0 job still waiting for its DELAY: queue it when that ends
                    job.qtime = max(now_ms, job.ctime // 1000000 + job.delay * 1000)
            shard.schedule(job)
        self.result = {"ok": True, "jobs": loaded, "queued": queued, "expired": expired,
                       "warnings": warnings}
