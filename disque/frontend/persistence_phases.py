"""The front-end's side of persistence (SPEC 12, 14; docs/persistence.md).

The workers own their files (disque/workers/persistence.py: the worker halves of the
"aof_*" controls below); the front-end orchestrates what concerns all of them:

* start-up load, while clients get -LOADING: on the usual restart (the files of as many
  workers as the node has) each worker reads its own file and then appends to it. Otherwise
  in two phases: every worker reads every file of the node and keeps the jobs of its slots;
  then (appendonly yes) the files are set aside (renamed <stem>.<port>.old<g>.w<k>.aof),
  every worker writes its own file afresh, and the set-aside files are deleted once every
  new one is complete (a crash in between leaves both sets, and the next start loads them
  all). A file with a truncated tail (aof-load-truncated yes) is written afresh too.
  Corruption, a refused truncated tail or a missing file stop the start (exit code 1,
  one line naming the file and the byte offset);
* BGREWRITEAOF, CONFIG SET appendonly yes|no and the other AOF directives, SHUTDOWN
  REWRITE-AOF (synchronous rewrite with every client paused, then exit);
* the -MISCONF / -LOADING gate (SPEC 1.3 steps 6-7) through `Core.gate` /
  `command_gate`: a worker that cannot write its file says so in every memory poll;
* INFO persistence, aggregated over the workers (sizes are sums).
"""
import logging
import os
import sys
import time

from disque import replies
from disque.contracts.aof_format import aof_files, aof_stem
from disque.contracts.aof_format import fsync_dir

log = logging.getLogger("disque.frontend")

LOADING_ERROR = b"-LOADING Disque is loading the dataset in memory\r\n"
REWRITE_BUSY = b"-ERR Background append only file rewriting already in progress\r\n"
REWRITE_STARTED = b"+Background append only file rewriting started\r\n"
ENABLE_FAILED = b"-ERR Unable to turn on AOF. Check server logs.\r\n"
SHUTDOWN_FAILED = b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
STARTED = "started"

# directives the workers need (Node.worker_config), also pushed on CONFIG SET
WORKER_DIRECTIVES = ("dir", "appendfilename", "port", "appendfsync", "no-appendfsync-on-rewrite",
                     "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size",
                     "aof-rewrite-incremental-fsync", "spill-keep")
AOF_DIRECTIVES = frozenset(WORKER_DIRECTIVES + ("appendonly",))


def worker_config(cfg):
    """The AOF part of the configuration a worker starts with."""
    values = {name: cfg.get(name) for name in WORKER_DIRECTIVES}
    values["port"] = cfg.node_port      # the files are named by it (a TLS-only node too)
    return values


class PersistencePhases:
    """Needs from the node (`fe`): cfg, nworkers, loop, pending, new_reqid, send_control,
    control_all, flush_replies, gate (set here), shutdown_cb, info_snapshot and
    `fe.connections` (SHUTDOWN REWRITE-AOF holds every client). Offers: startup,
    command_gate (a hook of the Cython core), worker_reports (the memory poll),
    cmd_bgrewriteaof, config_changed, shutdown, info_fields, and the state below."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.loading = False
        self.loading_start_time = 0
        self.loading_total_bytes = 0
        self.aof_enabled = False         # appendonly as the workers were last told
        self.aof_error = None            # a worker's last write error (MISCONF)
        self.aof_status_by_worker = None
        self.aof_rewrites_running = 0    # node-wide rewrites started and still waited for
        self.aof_initial_running = 0     # ... of them, those that turn the AOF on
        self.aof_shutting_down = False
        self.loading_done_cb = None      # server.py: serve clients once loaded

    # ---- calls to every worker -----------------------------------------------------------

    def call_all(self, name, arg, done):
        """Control `name` on every worker with arg["reqid"] set; done(results) once every
        worker gave its final answer (a worker answers "started" first when the work goes
        on in the background, then the result with the same reqid)."""
        n = self.fe.nworkers
        results = [None] * n
        left = [n]

        def make(w, reqid):
            def got(rep):
                value = rep[1]
                if value == STARTED:
                    self.fe.pending[reqid] = got
                    return
                if type(value) is not dict:
                    value = {"ok": bool(value)}
                elif "error" in value and "ok" not in value:
                    value = {"ok": False, "error": value["error"]}
                results[w] = value
                left[0] -= 1
                if left[0] == 0:
                    done(results)
            return got

        for w in range(n):
            reqid = self.fe.new_reqid(w)
            a = dict(arg or {})
            a["reqid"] = reqid
            self.fe.pending[reqid] = make(w, reqid)
            self.fe.send_control(w, reqid, name, a)

    @staticmethod
    def first_error(results):
        for r in results:
            if not r.get("ok"):
                return r.get("error") or "unknown error"
        return None

    def fatal(self, message):
        """A failed load: the node exits with code 1. (The stop is a little later: the loop
        may still be inside server.py's run_until_complete(create_server).)"""
        log.error("Fatal: %s", message)
        print("disque-server: %s" % message, file=sys.stderr, flush=True)
        if self.fe.shutdown_cb:
            self.fe.loop.call_later(0.1, self.fe.shutdown_cb, 1)

    def files_now(self, old=False):
        cfg = self.cfg
        return aof_files(cfg.dir, cfg.appendfilename, cfg.node_port, old)

    def set_aside(self):
        """Before the start-up rewrite: rename every worker file to
        <stem>.<port>.old<g>.w<k>.aof. With another number of workers, a new file holds jobs
        of several old ones, so an old file may only go once every new file is complete;
        a crash in between leaves old and new files, and the next start loads them all
        (a job in two files is loaded once). Returns an error message or None."""
        cfg = self.cfg
        gen = 1 + max([g for g, _ in self.files_now(old=True)] or [0])
        stem = aof_stem(cfg.appendfilename)
        try:
            for k, path in self.files_now().items():
                aside = "%s.%d.old%d.w%d.aof" % (stem, cfg.node_port, gen, k)
                os.rename(path, os.path.join(cfg.dir, aside))
            fsync_dir(cfg.dir)
        except OSError as e:
            return "Can't rename the append only files in %s: %s" % (cfg.dir, e.strerror or e)
        return None

    def delete_old_files(self):
        for path in self.files_now(old=True).values():
            try:
                os.unlink(path)
            except OSError as e:
                log.warning("Cannot remove %s: %s", path, e.strerror)
        fsync_dir(self.cfg.dir)

    def delete_extra_files(self):
        """After every worker wrote its own file: files of workers this node no longer
        has (a start with fewer --workers) would resurrect their jobs at the next start."""
        for k, path in self.files_now().items():
            if k >= self.fe.nworkers:
                try:
                    os.unlink(path)
                    log.info("Removed %s: its jobs now live in the files of %d worker(s)",
                             path, self.fe.nworkers)
                except OSError as e:
                    log.warning("Cannot remove %s: %s", path, e.strerror)

    # ---- start-up (SPEC 12 "Load at startup") ---------------------------------------------

    def startup(self):
        """Called once the workers run and before the first client is served. Returns
        an error message when the node must not start."""
        cfg = self.cfg
        self.aof_status_by_worker = [[None, False, "off"] for _ in range(self.fe.nworkers)]
        if not cfg.appendonly and not cfg.aof_enqueue_jobs_once:
            return
        files = self.files_now()
        # files set aside by a start-up that crashed while rewriting (see aof_set_aside)
        files.update({("old", g, k): path for (g, k), path in self.files_now(old=True).items()})
        if not files and not cfg.appendonly:
            return ("aof-enqueue-jobs-once is yes but there is no append only file to load: "
                    "no %s.%d.w<k>.aof in %s" % (aof_stem(cfg.appendfilename), cfg.node_port, cfg.dir))
        self.loading = True
        self.loading_start_time = int(time.time())
        sizes = 0
        for path in files.values():
            try:
                sizes += os.path.getsize(path)
            except OSError:
                pass
        self.loading_total_bytes = sizes
        self.set_gate()
        t0 = time.monotonic()
        enqueue_once = bool(cfg.aof_enqueue_jobs_once)
        # the usual restart: only the files of workers 0..N-1 (no set-aside files), so
        # each worker may read just its own (a file written with another number of
        # workers is detected and the load starts again over every file: aof_loaded)
        own_only = (bool(files) and not enqueue_once
                    and all(type(k) is int and k < self.fe.nworkers for k in files))
        arg = {"files": [[k[-1] if type(k) is tuple else k, p] for k, p in files.items()],
               "enqueue_once": enqueue_once,
               "load_truncated": bool(cfg.aof_load_truncated),
               "own_only": own_only}
        if files:
            log.info("Loading %d append only file(s) (%d bytes) into %d worker(s)%s", len(files),
                     sizes, self.fe.nworkers, ", queues restored once (aof-enqueue-jobs-once)"
                     if enqueue_once else "")
        self.call_all("aof_load", arg, lambda results: self.loaded(
            results, t0, bool(files), enqueue_once, arg))

    def loaded(self, results, t0, had_files, enqueue_once, arg):
        error = self.first_error(results)
        if error:
            self.fatal(error)
            return
        if any(r.get("foreign") for r in results):
            # a worker's file holds jobs of other workers' slots: written with another
            # number of workers. Forget what the others loaded; every worker reads every file
            log.info("The append only files were written by another number of workers: "
                     "every worker reads every file")
            arg = dict(arg, own_only=False)
            self.fe.control_all("flushall", None, lambda _: self.call_all(
                "aof_load", arg, lambda results: self.loaded(
                    results, t0, had_files, enqueue_once, arg)))
            return
        warnings = []
        for r in results:
            for w in r.get("warnings", ()):
                if w not in warnings:
                    warnings.append(w)
        for w in warnings:
            log.warning("%s", w)
        if had_files:
            log.info("DB loaded from append only file: %.3f seconds (%d jobs, %d queued, "
                     "%d expired and skipped)", time.monotonic() - t0,
                     sum(r.get("jobs", 0) for r in results),
                     sum(r.get("queued", 0) for r in results),
                     sum(r.get("expired", 0) for r in results))
        cfg = self.cfg
        if enqueue_once:
            cfg.aof_enqueue_jobs_once = False
            if cfg.config_file:
                try:
                    cfg.rewrite()
                    log.info("aof-enqueue-jobs-once turned off in %s", cfg.config_file)
                except Exception as e:
                    log.warning("Cannot turn aof-enqueue-jobs-once off in the config file: %s",
                                getattr(e, "message", None) or e)
        if not cfg.appendonly:
            self.loading_done()
            return
        self.aof_enabled = True
        if arg["own_only"] and not warnings:
            # each worker read its own file, whole: it appends to it (a restart costs the
            # load alone); a file read with another number of workers, or cut short, is
            # written afresh below
            self.call_all("aof_append", None, self.opened)
            return
        error = self.set_aside()
        if error:
            self.fatal(error)
            return
        self.call_all("aof_rewrite", {"enable": True, "startup": True}, self.opened)

    def opened(self, results):
        error = self.first_error(results)
        if error:
            self.fatal("Can't open the append-only file: %s" % error)
            return
        self.delete_old_files()         # every new file is complete and fsynced
        self.delete_extra_files()
        self.rewrites_ended(aof_on=True)
        self.loading_done()

    def loading_done(self):
        self.loading = False
        self.fe.info_snapshot.invalidate()     # INFO: the loaded jobs count at once
        self.set_gate()
        self.fe.flush_replies()
        if self.loading_done_cb is not None:
            self.loading_done_cb()          # server.py: serve clients now if not yet

    # ---- the gate (SPEC 1.3 steps 6 and 7) ------------------------------------------------

    def set_gate(self):
        self.fe.gate = self.loading or self.aof_error is not None
        if self.fe.gate:
            self.fe.handover.recall_all()   # the front-end answers -LOADING / -MISCONF

    def command_gate(self, client, cmd, argv):
        if self.aof_error is not None and ("w" in cmd.flags or cmd.name == "ping"):
            client.reply(replies.misconf(self.aof_error))
            return False
        if self.loading and "l" not in cmd.flags:
            client.reply(LOADING_ERROR)
            return False
        return True

    def worker_reports(self, reports):
        """The AOF part of the workers' memory reports (every ~100 ms)."""
        status = self.aof_status_by_worker
        if status is None:
            return
        for w, r in enumerate(reports):
            if type(r) is list:
                for item in r[5:]:
                    if type(item) is dict and "aof" in item:
                        status[w] = item["aof"]
        self.update_error()

    def worker_refusing(self, w, why):
        """Worker w exited on an AOF write error (disque/worker_restart.py): -MISCONF at
        once, until its next process reports a file it could rewrite."""
        if self.aof_status_by_worker is not None:
            self.aof_status_by_worker[w] = [why, False, "wait-rewrite"]
            self.update_error()

    def update_error(self):
        status = self.aof_status_by_worker
        error = None
        for s in status:
            if s[0]:
                error = s[0]
                break
        if error != self.aof_error:
            if error:
                log.warning("AOF write error in a worker (%s): write commands and PING get "
                            "-MISCONF until it writes again", error)
            else:
                log.warning("AOF write error solved: accepting write commands again")
            self.aof_error = error
            self.set_gate()

    # ---- BGREWRITEAOF, CONFIG SET, SHUTDOWN ---------------------------------------------------

    def rewriting(self):
        return self.aof_rewrites_running > 0 or any(s[1] for s in self.aof_status_by_worker or ())

    def cmd_bgrewriteaof(self, client, argv):
        if self.rewriting():
            client.reply(REWRITE_BUSY)
            return
        self.start_node_rewrite(False)
        client.reply(REWRITE_STARTED)

    def rewrites_ended(self, aof_on):
        """Every worker just answered that its rewrite ended: until the next memory poll
        the statuses would still say "rewriting" (and SHUTDOWN would refuse to stop)."""
        for s in self.aof_status_by_worker or ():
            s[1] = False
            if aof_on:
                s[2] = "on"

    def start_node_rewrite(self, enable):
        self.aof_rewrites_running += 1
        self.aof_initial_running += enable
        for s in self.aof_status_by_worker or ():
            s[1] = True             # until the next poll says otherwise
        t0 = time.monotonic()

        def done(results):
            self.aof_rewrites_running -= 1
            self.aof_initial_running -= enable
            error = self.first_error(results)
            self.rewrites_ended(aof_on=enable and not error)
            if error:
                log.warning("Background AOF rewrite%s failed: %s",
                            " (turning the AOF on)" if enable else "", error)
                return
            self.delete_extra_files()
            log.info("Background AOF rewrite of %d worker file(s) terminated with success "
                     "in %.3f seconds", self.fe.nworkers, time.monotonic() - t0)

        self.call_all("aof_rewrite", {"enable": enable}, done)

    def config_changed(self, name):
        """CONFIG SET of an AOF directive (from NodeCommands.config_changed)."""
        cfg = self.cfg
        if name == "appendonly":
            if cfg.appendonly and not self.aof_enabled:
                if not os.access(cfg.dir, os.W_OK | os.X_OK):
                    log.warning("Can't turn on AOF: directory %s is not writable", cfg.dir)
                    cfg.appendonly = False
                    return ENABLE_FAILED
                self.aof_enabled = True
                log.info("AOF turned on by CONFIG SET: rewriting every worker's file")
                self.start_node_rewrite(True)
            elif not cfg.appendonly and self.aof_enabled:
                self.aof_enabled = False
                log.info("AOF turned off by CONFIG SET")
                self.fe.control_all("aof_disable", None, lambda results: None)
            return None
        if name in WORKER_DIRECTIVES:
            self.fe.control_all("aof_config", {name: cfg.get(name)}, lambda results: None)
        return None

    def shutdown(self, client, rewrite):
        """SHUTDOWN [REWRITE-AOF]. True when this took over: refused, or a synchronous
        rewrite first."""
        if self.loading:
            return False
        if self.aof_enabled and (self.aof_initial_running or any(
                s[1] and s[2] == "wait-rewrite" for s in self.aof_status_by_worker or ())):
            # as upstream: the AOF was just turned on and its first files are not complete,
            # stopping now would leave nothing (or old files) to restart from
            log.warning("Writing initial AOF, can't exit.")
            client.reply(SHUTDOWN_FAILED)
            return True
        if not rewrite:
            return False            # workers flush and fsync their files when they stop
        if self.aof_shutting_down:
            client.reply(SHUTDOWN_FAILED)
            return True
        self.aof_shutting_down = True
        # nothing may change the jobs between the rewrite and the exit: hold every client
        # (as CLIENT PAUSE does) until the node stops, or until the rewrite failed
        old_until = self.fe.connections.hold_all()
        slot = client.slot()
        t0 = time.monotonic()
        log.info("Rewriting the append only files before exiting (SHUTDOWN REWRITE-AOF)")

        def done(results):
            error = self.first_error(results)
            if error is None:
                self.delete_extra_files()
                log.info("Append only files rewritten in %.3f seconds (%d jobs)",
                         time.monotonic() - t0, sum(r.get("jobs", 0) for r in results))
                if self.fe.shutdown_cb:
                    self.fe.shutdown_cb()
                return
            log.warning("Error trying to shutdown: the AOF rewrite failed: %s", error)
            self.aof_shutting_down = False
            slot.fill(SHUTDOWN_FAILED)
            self.fe.connections.end_pause(restore_until=old_until)

        self.fe.control_all("aof_rewrite_sync", None, done)
        return True

    # ---- INFO persistence (SPEC 14) ------------------------------------------------------------

    def info_fields(self, workers):
        infos = [w.get("aof") or {} for w in workers]
        states = [i.get("state", "off") for i in infos]
        if "wait-rewrite" in states:
            state = "wait-rewrite"
        elif states and all(s == "on" for s in states):
            state = "on"
        else:
            state = "off" if not self.aof_enabled else "wait-rewrite"
        rewriting = any(i.get("rewriting") for i in infos)
        last = [i.get("last_rewrite_s", -1) for i in infos]
        current = [i.get("current_rewrite_s", -1) for i in infos]
        out = [
            ("loading", int(self.loading)),
            ("aof_enabled", int(bool(self.cfg.appendonly))),
            ("aof_state", state),
            ("aof_rewrite_in_progress", int(rewriting)),
            ("aof_rewrite_scheduled", 0),
            ("aof_last_rewrite_time_sec", max(last) if last else -1),
            ("aof_current_rewrite_time_sec", max(current) if current else -1),
            ("aof_last_bgrewrite_status",
             "ok" if all(i.get("bgrewrite_ok", True) for i in infos) else "err"),
            ("aof_last_write_status",
             "ok" if not any(i.get("write_error") for i in infos) else "err"),
        ]
        if state != "off":
            out += [
                ("aof_current_size", sum(i.get("size", 0) for i in infos)),
                ("aof_base_size", sum(i.get("base_size", 0) for i in infos)),
                ("aof_pending_rewrite", 0),
                ("aof_buffer_length", sum(i.get("buffer", 0) for i in infos)),
                ("aof_rewrite_buffer_length", sum(i.get("rewrite_buffer", 0) for i in infos)),
                ("aof_pending_bio_fsync", sum(i.get("pending_fsync", 0) for i in infos)),
                ("aof_delayed_fsync", sum(i.get("delayed_fsync", 0) for i in infos)),
            ]
        if self.loading:
            total = self.loading_total_bytes
            fractions = [i["load_done"] / i["load_total"] if i.get("load_total") else
                         (0.0 if i.get("loading") else 1.0) for i in infos]
            frac = min(fractions) if fractions else 0.0
            elapsed = max(0, time.time() - self.loading_start_time)
            out += [
                ("loading_start_time", self.loading_start_time),
                ("loading_total_bytes", total),
                ("loading_loaded_bytes", int(total * frac)),
                ("loading_loaded_perc", "%.2f" % (frac * 100)),
                ("loading_eta_seconds", int(elapsed * (1 - frac) / frac) if frac > 0 else 1),
            ]
        return out
