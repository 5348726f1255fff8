"""A worker's append-only file (SPEC 12, docs/persistence.md).

Every worker k of the node on `port` owns one file, `<dir>/<stem>.<port>.w<k>.aof` (stem:
`appendfilename` without `.aof`), holding LOADJOB / DELJOB records (disque.workers.aof).

* Logging. The shard calls `aof_loadjob(job)` when a job is accepted (a local job once
  its copies are confirmed, a replica on REPLJOB) and `aof_deljob(job)` when an
  active/queued job is acked or deleted; both only while `self.aof_on` is set. Records
  are buffered during a batch; `aof_flush()` writes them (and fsyncs with `appendfsync
  always`) before the worker loop sends the batch's replies.
* Write errors. A failed write keeps the records and is retried once a second; until it
  works the write commands this worker executes answer -MISCONF (their handlers are
  swapped, so the normal path pays nothing), and the front-end, which learns the error
  from the periodic memory poll, answers -MISCONF for PING and GETJOB too. With
  `appendfsync always` a failed write or fsync makes the worker exit (WORKER_FATAL_EXIT)
  before the batch's replies leave, since they may promise jobs that are not on disk;
  the front-end restarts it (disque/worker_restart.py) with `refuse`: it answers -MISCONF
  and takes no copies until it has rewritten its file, retried every second. A failed
  background fsync (everysec) also refuses writes until a rewrite works: after a failed
  fsync the kernel may have dropped the dirty pages, so the file is not trusted. While
  refusing, REPLJOB gets no GOTJOB (`shard.aof_refusing`): copies go to nodes that can
  write them.
* Rewrite (BGREWRITEAOF, automatic, CONFIG SET appendonly yes, start-up). No fork: the
  worker takes the list of its jobs, serializes them in slices of a few milliseconds
  between batches (`aof_work`, called after each reply send) and a thread writes the
  chunks to `temp-rewriteaof-bg-<pid>.aof` and fsyncs it. Records logged meanwhile are
  written to the old file as usual and also kept (`AofWriter.rewrite_buffer`); when the
  thread is done they are appended to the temp file, which is fsynced and renamed over
  the worker's file. A job deleted before its turn is skipped (its DELJOB is in the
  kept records anyway), a job added after the start is in the kept records.
* Load. Every worker reads every file of the node (`<stem>.<port>.w*.aof`, and any
  `.old<g>.w*.aof` an interrupted start left; a restart may change the number of workers)
  in slices, keeps the records of the jobs whose slot it owns now, replays LOADJOB/DELJOB
  per file and registers the survivors. Jobs come back
  active, or queued once with `aof-enqueue-jobs-once` (RETRY 0 jobs too: a deliberate
  difference from upstream, see docs/differences.md). The front-end runs the load in two phases
  (disque/frontend/persistence_phases.py): every worker loads, then every worker rewrites its own file.
"""
import logging
import os
import time

from disque import replies
from disque import commands
from disque._fast.job import ACTIVE, QUEUED
from disque.contracts import worker_link as link_msg
from disque.contracts.aof_format import DELJOB, aof_path, loadjob_record, record
from disque.workers.aof import AofWriter, should_auto_rewrite, write_snapshot
from disque.contracts.aof_format import fsync_dir
from disque.workers.aof_load import Loader
from disque.workers.aof_rewrite import CHUNK_JOBS, REWRITE_BACKLOG, Rewrite

log = logging.getLogger("disque.worker")

# commands with the `w` flag (SPEC 2) that a worker executes: -MISCONF while writes fail
WRITE_COMMANDS = frozenset(name for name, cmd in commands.BY_BYTES.items() if "w" in cmd.flags)
STARTED = "started"             # immediate answer to a control whose result comes later
WORKER_FATAL_EXIT = 3           # disque.worker_restart: stop the node, no restart
REWRITE_SLICE_S = 0.004         # serialization per loop turn while serving clients
STARTUP_SLICE_S = 0.05          # ... while loading (no client is served)
WRITE_RETRY_S = 1.0
WAIT_REWRITE_RETRY_S = 5.0     # after a failed rewrite, before an automatic one is tried again
REFUSE_RETRY_S = 1.0           # ... while refusing writes: the node serves again soon after


def misconf_reply(error):
    return replies.misconf(error)



class Persistence:
    """A worker's append-only file. Needs from the shard: the ShardCore (jobs, aof_on,
    handlers while loading) and its config. Offers: write_loadjob (the core's `aof_loadjob`
    hook), aof_deljob, aof_flush (before every batch of replies), aof_control (the
    front-end's "aof_*" controls), aof_work / aof_cron, aof_status / aof_info / aof_memory."""

    def __init__(self, shard):
        self.shard = shard
    aof_state = "off"           # off | on | wait-rewrite (INFO aof_state)
    aof_writer = None           # AofWriter while the file is open
    aof_rw = None               # Rewrite in progress
    aof_loader = None           # Loader in progress (start-up)
    aof_busy = False            # the worker loop calls aof_work()
    aof_saved_handlers = None   # the write commands' handlers while answering -MISCONF
    aof_refused = None          # why writes are refused until a rewrite works, or None
    aof_last_retry = 0.0
    aof_last_check = 0.0
    aof_last_rewrite_s = -1
    aof_bgrewrite_ok = True
    aof_rewrite_failed_at = 0.0
    aof_slice = REWRITE_SLICE_S

    # ---- hooks of the shard ----------------------------------------------------------

    def write_loadjob(self, job):
        """The shard's `aof_loadjob` hook: log a LOADJOB record of `job`."""
        rec = loadjob_record(job)
        w = self.aof_writer
        if w is not None:
            w.buf.append(rec)
            w.buf_bytes += len(rec)
        else:
            self.aof_log(rec)

    def aof_deljob(self, job):
        self.aof_log(record(DELJOB, job.id))

    def aof_log(self, rec):
        w = self.aof_writer
        if w is not None:
            w.buf.append(rec)
            w.buf_bytes += len(rec)
        elif self.aof_rw is not None:       # wait-rewrite: the new file will hold it
            self.aof_rw.diff.append(rec)
            self.aof_rw.diff_bytes += len(rec)

    def aof_flushall(self):
        """DEBUG FLUSHALL with AOF on: DELJOB for every active/queued job (SPEC 4.4)."""
        if self.shard.aof_on:
            for job in list(self.shard.jobs.values()):
                if job.state == ACTIVE or job.state == QUEUED:
                    self.aof_deljob(job)

    def aof_flush(self):
        """Write (and with appendfsync always, fsync) what this batch logged, before the
        batch's replies leave the worker. False when the write failed."""
        w = self.aof_writer
        if w is None or not w.buf:
            return True
        if w.error is not None:
            now = time.monotonic()
            if now - self.aof_last_retry < WRITE_RETRY_S:
                return False
            self.aof_last_retry = now
        if w.flush():
            if self.aof_saved_handlers is not None and self.aof_refused is None:
                self.aof_misconf_off()
            return True
        self.aof_write_failed(w.error)
        return False

    def aof_write_failed(self, error):
        w = self.aof_writer
        self.aof_last_retry = time.monotonic()
        if w.policy == "always":
            # the batch's replies may promise jobs the file does not hold: they must not
            # leave. The file ends at its last whole record (AofWriter.flush cut it back)
            log.critical("AOF write error with appendfsync always (%s: %s): exiting before "
                         "this batch's replies leave; the node restarts this worker, which "
                         "refuses writes until it rewrites its file", w.path, error)
            raise SystemExit(WORKER_FATAL_EXIT)
        if self.aof_saved_handlers is None:
            log.warning("Error writing to the AOF file %s: %s (write commands get -MISCONF "
                        "until a write works again; retried every second)", w.path, error)
            self.aof_misconf_on(error)

    def aof_misconf_on(self, error):
        """Write commands answer -MISCONF (their handlers swapped) and copies are refused."""
        reply = misconf_reply(error)
        saved = self.aof_saved_handlers or {}
        for name in WRITE_COMMANDS:
            if name in self.shard.handlers and name not in saved:
                saved[name] = self.shard.handlers[name]
                self.shard.handlers[name] = lambda argv, reply=reply: reply
        self.aof_saved_handlers = saved
        self.shard.aof_refusing = True

    def aof_misconf_off(self):
        self.shard.handlers.update(self.aof_saved_handlers)
        self.aof_saved_handlers = None
        self.aof_refused = None
        self.shard.aof_refusing = False
        log.warning("AOF write error looks solved, Disque can write again.")

    def aof_refuse(self, why):
        """Refuse writes until a rewrite of the whole file from memory works: the file on
        disk is not trusted (a failed fsync, or the previous process could not write)."""
        if self.aof_refused is None:
            log.warning("AOF not trusted (%s): write commands get -MISCONF and copies are "
                        "refused until the file is rewritten", why)
        self.aof_refused = why
        self.aof_misconf_on(why)
        # aof_cron starts the rewrite REFUSE_RETRY_S from now
        self.aof_rewrite_failed_at = time.monotonic() - WAIT_REWRITE_RETRY_S + REFUSE_RETRY_S

    def aof_close(self):
        """The worker stops: flush and fsync the file, drop a rewrite in progress."""
        if self.aof_rw is not None:
            self.aof_rw.abort()
            self.aof_rw.thread.join(5.0)
            self.aof_rw = None
        if self.aof_writer is not None:
            try:
                self.aof_writer.close()
            except OSError as e:
                log.warning("Closing the AOF file %s: %s", self.aof_writer.path, e.strerror)
            if self.aof_writer.buf:
                log.warning("%d bytes of the AOF could not be written before exiting",
                            self.aof_writer.buf_bytes)
            self.aof_writer = None

    # ---- requests from the front-end (Worker.control: names aof_*) ----------------------

    def aof_control(self, name, arg):
        if name == "aof_load":
            if arg.get("refuse"):
                self.aof_refuse(arg["refuse"])
            self.aof_loader = Loader(self.shard, arg["files"], arg["enqueue_once"], arg["load_truncated"],
                                     arg.get("own_only", False))
            self.aof_loader.reqid = arg["reqid"]
            self.aof_busy = True
            return STARTED
        if name == "aof_rewrite":
            self.aof_slice = STARTUP_SLICE_S if arg.get("startup") else REWRITE_SLICE_S
            return self.aof_start_rewrite(arg.get("enable", False), arg["reqid"])
        if name == "aof_append":
            return self.aof_append()
        if name == "aof_rewrite_sync":
            return self.aof_rewrite_sync()
        if name == "aof_disable":
            self.aof_disable()
            return True
        if name == "aof_config":
            self.aof_set_config(arg)
            return True
        raise ValueError("unknown control %r" % name)

    def aof_append(self):
        """The usual restart, where this worker loaded its own file and all of it: append to
        that file from now on, as the original does, instead of writing it afresh."""
        path = self.aof_path()
        try:
            self.aof_writer = AofWriter(path, self.aof_cfg("appendfsync", "everysec"))
        except OSError as e:
            return {"ok": False, "error": "%s: %s" % (path, e.strerror or e)}
        self.aof_state = "on"
        self.shard.aof_on = True
        log.info("Append only file enabled: %s (%d bytes)", path, self.aof_writer.size)
        return {"ok": True}

    def aof_cfg(self, key, default=None):
        return self.shard.config.get(key, default)

    def aof_path(self):
        return aof_path(self.aof_cfg("dir") or os.getcwd(),
                        self.aof_cfg("appendfilename", "disque.aof"),
                        int(self.aof_cfg("port", 7711)), self.shard.index)

    def aof_set_config(self, changes):
        self.shard.config.update(changes)
        w = self.aof_writer
        if w is not None and "appendfsync" in changes:
            w.set_policy(changes["appendfsync"])
        if w is not None and "no-appendfsync-on-rewrite" in changes:
            w.skip_fsync = bool(self.aof_rw is not None and changes["no-appendfsync-on-rewrite"])

    def aof_start_rewrite(self, enable, reqid):
        """BGREWRITEAOF (enable False) or turning the AOF on (enable True: wait-rewrite
        until the new file is complete)."""
        reqids = [reqid] if reqid is not None else []
        if enable and self.aof_state == "off":
            self.aof_state = "wait-rewrite"
            self.shard.aof_on = True
            if self.aof_rw is not None:
                # a rewrite started while the AOF was off misses what was done since: restart
                reqids += self.aof_rw.reqids
                self.aof_rw.reqids = []
                self.aof_drop_rewrite()
        elif self.aof_rw is not None:
            self.aof_rw.reqids += reqids        # already rewriting: answered when it ends
            return STARTED
        path = self.aof_path()
        tmp = os.path.join(os.path.dirname(path), "temp-rewriteaof-bg-%d.aof" % os.getpid())
        rw = Rewrite(self.shard.jobs.values(), path, tmp,
                     self.aof_cfg("aof-rewrite-incremental-fsync", True), self.shard.spill)
        rw.reqids = reqids
        self.aof_rw = rw
        w = self.aof_writer
        if w is not None:
            w.rewrite_buffer = []
            w.skip_fsync = bool(self.aof_cfg("no-appendfsync-on-rewrite", False))
        self.aof_busy = True
        log.info("Background append only file rewriting started (%s, %d jobs)", path, len(rw.jobs))
        return STARTED

    def aof_drop_rewrite(self, why="interrupted"):
        rw = self.aof_rw
        if rw is None:
            return
        for reqid in rw.reqids:
            self.shard.out.append(
                link_msg.Reply.encode(reqid, {"ok": False, "error": "rewrite %s" % why}))
        rw.abort()
        self.aof_rw = None
        w = self.aof_writer
        if w is not None:
            w.rewrite_buffer = None
            w.skip_fsync = False

    def aof_finish_rewrite(self):
        rw = self.aof_rw
        w = self.aof_writer
        self.aof_rw = None
        error = rw.error
        if error is None:
            diff = w.rewrite_buffer if w is not None else rw.diff
            try:
                fd = os.open(rw.tmp, os.O_WRONLY | os.O_APPEND)
                try:
                    data = b"".join(diff)
                    view = memoryview(data)
                    n = 0
                    while n < len(data):
                        n += os.write(fd, view[n:])
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(rw.tmp, rw.path)
                fsync_dir(rw.path)
            except OSError as e:
                error = "%s: %s" % (rw.tmp, e.strerror or e)
                try:
                    os.unlink(rw.tmp)
                except OSError:
                    pass
        if w is not None:
            w.rewrite_buffer = None
            w.skip_fsync = False
        self.aof_last_rewrite_s = int(time.monotonic() - rw.started)
        if error is None:
            try:
                self.aof_switch_file(rw.path)
            except OSError as e:
                error = "%s: %s" % (rw.path, e.strerror or e)
        self.aof_bgrewrite_ok = error is None
        if error is None:
            log.info("Background AOF rewrite finished successfully (%s, %d bytes)", rw.path,
                     self.aof_writer.size if self.aof_writer else os.path.getsize(rw.path))
            result = {"ok": True}
            if self.aof_refused is not None:
                self.aof_writer.error = None    # the new file holds every job: trusted
                self.aof_misconf_off()
        else:
            log.warning("Background AOF rewrite failed: %s", error)
            self.aof_rewrite_failed_at = time.monotonic()
            if self.aof_refused is not None:
                self.aof_refused = error
                self.aof_rewrite_failed_at -= WAIT_REWRITE_RETRY_S - REFUSE_RETRY_S
            result = {"ok": False, "error": error}
        for reqid in rw.reqids:
            self.shard.out.append(link_msg.Reply.encode(reqid, result))

    def aof_switch_file(self, path):
        """After a rewrite: append to the new file from now on."""
        w = self.aof_writer
        if w is not None:
            w.reopen(path)
        elif self.aof_state == "wait-rewrite":
            self.aof_writer = AofWriter(path, self.aof_cfg("appendfsync", "everysec"))
            self.aof_state = "on"
            log.info("Append only file enabled: %s", path)

    def aof_rewrite_sync(self):
        """SHUTDOWN REWRITE-AOF: write the file from the jobs now, even with AOF off."""
        self.aof_drop_rewrite("replaced by a synchronous rewrite")
        path = self.aof_path()
        tmp = os.path.join(os.path.dirname(path), "temp-rewriteaof-%d.aof" % os.getpid())
        jobs = [j for j in self.shard.jobs.values() if j.state == ACTIVE or j.state == QUEUED]

        def chunks():
            for i in range(0, len(jobs), CHUNK_JOBS):
                yield b"".join([loadjob_record(j) for j in jobs[i:i + CHUNK_JOBS]])
        try:
            write_snapshot(path, chunks(), tmp_path=tmp)
            w = self.aof_writer
            if w is not None:
                w.buf = []              # the snapshot holds everything they said
                w.buf_bytes = 0
                w.error = None
            self.aof_switch_file(path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            log.warning("Synchronous AOF rewrite of %s failed: %s", path, e.strerror or e)
            return {"ok": False, "error": "%s: %s" % (path, e.strerror or e)}
        if self.aof_saved_handlers is not None:
            self.aof_misconf_off()
        log.info("Append only file %s rewritten synchronously: %d jobs", path, len(jobs))
        return {"ok": True, "jobs": len(jobs)}

    def aof_disable(self):
        """CONFIG SET appendonly no: flush, fsync and close the file; stop logging."""
        self.aof_drop_rewrite("stopped: AOF turned off")
        if self.aof_writer is not None:
            self.aof_writer.rewrite_buffer = None
            self.aof_writer.close()
            self.aof_writer = None
        if self.aof_saved_handlers is not None:
            self.aof_misconf_off()
        self.shard.aof_on = False
        self.aof_state = "off"
        self.aof_busy = self.aof_rw is not None or self.aof_loader is not None

    def walks_spilled(self):
        """Whether a rewrite is walking the spilled jobs by slot: their index must not
        repack under it (disque/workers/spill.py)."""
        rw = self.aof_rw
        return rw is not None and rw.cold_pos >= 0

    # ---- background work (the worker loop, after sending each batch's replies) ------------

    def aof_has_slices(self):
        """The start-up load or rewrite has work for aof_work now (not just a thread to
        wait for): the worker loop then polls instead of sleeping until its next tick."""
        if self.aof_loader is not None:
            return True
        rw = self.aof_rw        # the start-up rewrite only: a background one keeps its pace
        return (rw is not None and self.aof_slice == STARTUP_SLICE_S and not rw.fed_all
                and rw.chunks.qsize() <= REWRITE_BACKLOG)

    def aof_work(self):
        loader = self.aof_loader
        if loader is not None:
            if loader.step(STARTUP_SLICE_S):
                self.aof_loader = None
                self.shard.out.append(link_msg.Reply.encode(loader.reqid, loader.result))
        rw = self.aof_rw
        if rw is not None:
            if not rw.fed_all:
                self.shard.tick()
                rw.step(self.shard, self.aof_slice)
            elif rw.done.is_set():
                self.aof_finish_rewrite()
        now = time.monotonic()
        if now - self.aof_last_check >= 1.0:
            self.aof_last_check = now
            self.aof_cron(now)
        self.aof_busy = (self.aof_writer is not None or self.aof_rw is not None
                         or self.aof_loader is not None or self.aof_state != "off")

    def aof_cron(self, now):
        """Once a second: automatic rewrite; a failed rewrite of wait-rewrite retried."""
        if self.aof_rw is not None:
            return
        w = self.aof_writer
        if w is not None and w.fsync_error is not None:
            error, w.fsync_error = w.fsync_error, None
            self.aof_refuse("fsync failed: %s" % error)
        if (self.aof_refused is not None and self.aof_state == "on"
                and now - self.aof_rewrite_failed_at >= WAIT_REWRITE_RETRY_S):
            self.aof_slice = REWRITE_SLICE_S
            self.aof_start_rewrite(False, None)     # the file from memory, then trusted
        elif (self.aof_state == "on" and w is not None and w.error is None
                and now - self.aof_rewrite_failed_at >= WAIT_REWRITE_RETRY_S):
            pct = int(self.aof_cfg("auto-aof-rewrite-percentage", 100))
            min_size = int(self.aof_cfg("auto-aof-rewrite-min-size", 64 * 1024 * 1024))
            if should_auto_rewrite(w.size, w.base_size, pct, min_size):
                growth = (w.size - w.base_size) * 100 // (w.base_size or 1)
                log.info("Starting automatic rewriting of AOF on %d%% growth", growth)
                self.aof_slice = REWRITE_SLICE_S
                self.aof_start_rewrite(False, None)
        elif (self.aof_state == "wait-rewrite"
              and now - self.aof_rewrite_failed_at >= WAIT_REWRITE_RETRY_S):
            self.aof_slice = REWRITE_SLICE_S
            self.aof_state = "off"              # aof_start_rewrite(enable) starts from off
            self.aof_start_rewrite(True, None)

    # ---- reports -----------------------------------------------------------------------

    def aof_status(self):
        """For the front-end's memory poll: {"aof": [write error or None, rewriting, state]}."""
        w = self.aof_writer
        error = w.error if w is not None else None
        return {"aof": [error or self.aof_refused, self.aof_rw is not None, self.aof_state]}

    def aof_memory(self):
        """Bytes the AOF holds in memory (SPEC 9 accounting, docs/memory.md): records not
        written yet, records kept for a running rewrite and its list of jobs to write."""
        n = 0
        w = self.aof_writer
        if w is not None:
            n += w.buf_bytes + w.rewrite_bytes
        rw = self.aof_rw
        if rw is not None:
            n += rw.diff_bytes
            if rw.jobs is not None:             # None once every job was handed to the thread
                n += 8 * len(rw.jobs)
        return n

    def aof_info(self):
        w = self.aof_writer
        rw = self.aof_rw
        loader = self.aof_loader
        info = {
            "state": self.aof_state,
            "rewriting": rw is not None,
            "last_rewrite_s": self.aof_last_rewrite_s,
            "current_rewrite_s": int(time.monotonic() - rw.started) if rw is not None else -1,
            "bgrewrite_ok": self.aof_bgrewrite_ok,
            "write_error": (w.error if w is not None else None) or self.aof_refused,
            "size": w.size if w is not None else 0,
            "base_size": w.base_size if w is not None else 0,
            "buffer": w.buf_bytes if w is not None else 0,
            "rewrite_buffer": (w.rewrite_bytes if w is not None and w.rewrite_buffer is not None
                               else rw.diff_bytes if rw is not None else 0),
            "pending_fsync": int(w.fsync_in_progress) if w is not None else 0,
            "delayed_fsync": w.delayed_fsync if w is not None else 0,
            "loading": loader is not None,
        }
        if loader is not None:
            info["load_total"] = loader.total
            info["load_done"] = loader.done_bytes
        return info
