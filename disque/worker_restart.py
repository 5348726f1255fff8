"""A dead worker is not a dead node (issue 13).

When a worker process dies (a crash, the OOM killer, kill -9) the front-end:
  1. holds every request for that worker (they wait in order in the link, see
     `UnixLinks.hold`), and answers the ones the dead process had taken and not answered
     with an error, each in its client's reply order (a blocked GETJOB or a waiting
     ADDJOB included: never a hang); node-level controls it had taken are sent again to
     the next process;
  2. starts a new process for the same slots, tells it the cluster membership and, with
     the AOF on, makes it load its own file (`<stem>.<port>.w<k>.aof`) and rewrite it;
  3. releases the held requests. Without the AOF the worker starts empty: the jobs of
     its slots that have copies on other nodes come back through the cluster's usual
     requeue (the copies' RETRY), exactly as when a whole node restarts empty.

A worker that exits with WORKER_FATAL_EXIT could not write or fsync its AOF with
appendfsync always, and left before its batch's replies could promise jobs the file does
not hold. Unlike upstream (which exits) the node goes on: the requests it had taken get
-MISCONF, every write command gets -MISCONF until the new process has rewritten its file
from what it loads (retried every second), and such restarts are not crashes (INFO
worker_aof_restarts). A worker dying more than MAX_RESTARTS times in RESTART_WINDOW_S (a
crash loop) stops the node. INFO server reports worker_restarts and how long the slots of
the last restarted worker were unavailable.
"""
import logging
import os
import time

import msgpack

from disque import replies
from disque.contracts import worker_link as link_msg
from disque.contracts.aof_format import aof_path

log = logging.getLogger("disque.server")

WORKER_FATAL_EXIT = 3
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
LOST_REPLY = replies.WORKER_DIED
ORDERLY_EXIT_GRACE_S = 0.25     # a worker that stopped cleanly: the node's own stop may follow
STARTED = "started"


class WorkerRestarts:
    def __init__(self, node):
        self.node = node
        self.count = 0
        self.restarting = {}            # w -> monotonic time the death was noticed
        self.last_unavailable_ms = 0
        self.max_unavailable_ms = 0
        self.recent = []                # monotonic times of recent deaths
        self.aof_restarts = 0           # restarts after an AOF write error (appendfsync always)
        self.refuse = {}                # w -> why its next process refuses writes
        self.graced = {}                # w that exited 0 -> when it may be replaced

    def info_fields(self):
        return [("worker_restarts", self.count),
                ("worker_restarting", len(self.restarting)),
                ("worker_last_restart_unavailable_ms", self.last_unavailable_ms),
                ("worker_max_restart_unavailable_ms", self.max_unavailable_ms),
                ("worker_aof_restarts", self.aof_restarts)]

    def died(self, w):
        """The link to worker w closed or its process is gone."""
        node = self.node
        p = node.procs[w]
        if node.stopping or (w in self.restarting and p.poll() is None):
            return                      # already being replaced, the new process runs
        now = time.monotonic()
        try:
            code = p.wait(1.0)          # the socket closes as the process exits
        except Exception:
            p.kill()
            code = p.wait()
        if code == 0:
            # a worker only exits 0 when a signal told it to stop. A SIGTERM to the whole
            # process group (systemd's KillMode=control-group, pkill -f) reaches the
            # workers before the front-end's loop has run its own: give that a moment
            # before replacing the worker (the node stops, not restarts it)
            until = self.graced.get(w)
            if until is None:
                self.graced[w] = now + ORDERLY_EXIT_GRACE_S
                node.fe.loop.call_later(ORDERLY_EXIT_GRACE_S, self.grace_over, w)
                return
            if now < until:
                return
        self.graced.pop(w, None)
        lost_reply = LOST_REPLY
        if code == WORKER_FATAL_EXIT:
            why = "worker %d could not write its append only file" % w
            log.error("Worker %d (pid %d) could not write its AOF (appendfsync always): "
                      "starting a new one, which refuses writes until it rewrites its file",
                      w, p.pid)
            self.aof_restarts += 1
            self.refuse[w] = why
            lost_reply = replies.misconf(why)
        elif self.note_death(now):
            log.error("Worker %d (pid %d) died (code %s), %d worker deaths in %ds: "
                      "shutting the node down", w, p.pid, code, len(self.recent),
                      RESTART_WINDOW_S)
            node.request_stop(1)
            return
        else:
            log.error("Worker %d (pid %d) died (code %s): starting a new one for its slots",
                      w, p.pid, code)
            self.count += 1
        self.restarting.setdefault(w, now)     # a new process that died too: same outage
        node.links.hold(w)
        node.fe.handover.worker_lost(w)     # the connections it served died with it
        node.fe.tls_port.worker_lost(w)     # and the TLS connections it ran
        if w in self.refuse:
            node.fe.persistence.worker_refusing(w, self.refuse[w])
        self.fail_in_flight(w, lost_reply)
        node.spawn_worker(w)

    def grace_over(self, w):
        """ORDERLY_EXIT_GRACE_S after a worker exited 0 (the loop's timer, whose clock may
        run a little behind time.monotonic): replaced now unless the node stops."""
        if w in self.graced:
            self.graced[w] = 0.0
            self.died(w)

    def note_death(self, now):
        """True when this death makes a crash loop."""
        self.recent = [t for t in self.recent if now - t < RESTART_WINDOW_S] + [now]
        return len(self.recent) > MAX_RESTARTS

    def fail_in_flight(self, w, lost_reply=LOST_REPLY):
        fe = self.node.fe
        n = fe.nworkers
        controls = fe.controls_sent
        for reqid in [r for r in fe.pending if r >= 0 and r % n == w]:
            cb = fe.pending.get(reqid)
            ctl = controls.get(reqid)
            if ctl is not None:
                # held: the next process
                fe.send(w, link_msg.Control.encode(reqid, ctl[0], ctl[1]))
                continue
            del fe.pending[reqid]
            try:
                if hasattr(cb, "fill"):
                    cb.fill(lost_reply)
                else:
                    cb(link_msg.GetJobReply.encode(reqid, lost_reply, None))
            except Exception:
                log.exception("answering request %d of dead worker %d", reqid, w)
        fe.flush_replies()

    # ---- the new process ----

    def ready(self, w):
        """The new process of worker w said READY: membership, then its AOF, then serve."""
        fe = self.node.fe
        state = fe.relay.state
        if state:
            self.control(w, "cluster", state, lambda value: None)
        if fe.affinity:
            self.control(w, "served_config", fe.handover.worker_config(), lambda value: None)
        fe.tls_port.worker_ready(w)
        if fe.persistence.aof_enabled and fe.cfg.appendonly:
            self.load_aof(w)
        else:
            self.serve(w)

    def control(self, w, name, arg, done):
        """A control to worker w now, ahead of the held requests."""
        fe = self.node.fe
        reqid = fe.new_reqid(w)
        if isinstance(arg, dict):
            arg = dict(arg, reqid=reqid)

        def got(rep):
            if rep[1] == LOST_REPLY:
                return                  # this process died too: died() starts it over
            if rep[1] == STARTED:
                fe.pending[reqid] = got
                return
            done(rep[1])
        fe.pending[reqid] = got
        control = link_msg.Control.encode(reqid, name, arg)
        self.node.links.send_now(w, msgpack.packb([control]))

    def load_aof(self, w):
        cfg = self.node.fe.cfg
        path = aof_path(cfg.dir, cfg.appendfilename, cfg.node_port, w)
        files = [[w, path]] if os.path.exists(path) else []
        t0 = time.monotonic()

        def loaded(value):
            if isinstance(value, dict) and value.get("error"):
                self.fatal(w, "reloading its append only file: %s" % value["error"])
                return
            n = value.get("jobs", 0) if isinstance(value, dict) else 0
            log.info("Worker %d reloaded %d job(s) from %s in %.3f s", w, n, path,
                     time.monotonic() - t0)
            self.control(w, "aof_rewrite", {"enable": True, "startup": True}, opened)

        refuse = self.refuse.pop(w, None)

        def opened(value):
            if isinstance(value, dict) and value.get("error"):
                if refuse is None:
                    self.fatal(w, "reopening its append only file: %s" % value["error"])
                    return
                # the disk still refuses: serve reads, -MISCONF for writes; it retries
                log.warning("Worker %d could not rewrite its AOF yet (%s): it serves and "
                            "refuses writes until it can", w, value["error"])
            self.serve(w)

        self.control(w, "aof_load", {"files": files, "enqueue_once": False, "refuse": refuse,
                                     "load_truncated": bool(cfg.aof_load_truncated)}, loaded)

    def fatal(self, w, why):
        log.error("Restarted worker %d failed %s: shutting the node down", w, why)
        self.node.request_stop(1)

    def serve(self, w):
        started = self.restarting.pop(w, None)
        self.node.links.release(w)
        self.node.fe.flush()
        if started is not None:
            ms = int((time.monotonic() - started) * 1000)
            self.last_unavailable_ms = ms
            self.max_unavailable_ms = max(self.max_unavailable_ms, ms)
            log.warning("Worker %d serves again: its slots were unavailable for %d ms", w, ms)
