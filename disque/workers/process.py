"""A worker process: owns the queues of its slots and serves front-end batches.

The loop is deliberately plain (no asyncio): block in zmq poll until a batch arrives or a
timer is due, process everything that is readable, send one reply message, run timers.
"""
import argparse
import ctypes
import json
import logging
import os
import signal
import sys
import time

import msgpack
import psutil

from disque import replies as R
from disque import log as dlog
from disque import memstat
from disque import nodeclock
from disque._fast.clock import PeriodicTimer
from disque._fast.replcore import count_types
from disque.contracts import worker_link as P
from disque.contracts.worker_args import WorkerArgs
from disque.workers.job_links import JobLinks
from disque.workers.link import worker_link
from disque.workers.queue_report import (job_page, queue_names, queue_report, queue_rows,
                                         queued_ids, search)
from disque.workers.peer_links import peer_sockets
from disque.workers.served_clients import ServedClients
from disque.workers.shard import Shard

PR_SET_PDEATHSIG = 1
TICK_MS = 10             # job timers fire within this of their due time (SPEC allows 100)
SLOW_CRON_TICKS = 50
CLUSTER_CRON_TICKS = 10
# An idle worker ticks every IDLE_TICK_MS instead (docs/design.md, "The idle tick"): after
# IDLE_AFTER_MS with no command and no job message, when nothing is due within a tick
IDLE_TICK_MS = 100
IDLE_AFTER_MS = 1000
log = logging.getLogger("disque.worker")


def die_with_parent():
    """Ask the kernel to SIGTERM us when the front-end dies, even by SIGKILL (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the loop also polls getppid()


class Worker:
    def __init__(self, index, nworkers, link_spec, node_id, config, peers=None,
                 job_links_fd=None, job_links_tls=None):
        self.index = index
        self.parent = os.getppid()
        self.shard = Shard(index, nworkers, node_id, config)
        self.link = worker_link(link_spec, index)
        self.running = True
        self.process = psutil.Process()
        self.started = time.time()
        self.ops = 0
        self.served = None          # ServedClients when the front-end hands connections over
        self.peers = peers          # sockets to the other workers (disque/workers/peer_links.py)
        self.job_links_fd = job_links_fd    # listening socket for other nodes' workers
        self.job_links_tls = job_links_tls  # their TLS files on a secured cluster (a directory)
        self.work = 0               # requests and job messages from the front-end (not control)
        self.timer = None
        self.job_links = None       # JobLinks (disque/workers/job_links.py)

    def control(self, name, arg):
        shard = self.shard
        if name == "info":
            info = shard.info()
            cpu = self.process.cpu_times()
            info.update(pid=os.getpid(), rss=memstat.rss(), used_memory=shard.memory.memory_used(),
                        cpu_user=cpu.user, cpu_sys=cpu.system,
                        ops=self.ops, index=self.index, uptime_s=time.time() - self.started,
                        tick_ms=self.timer.interval_ms if self.timer is not None else TICK_MS,
                        aof=shard.persistence.aof_info())
            if self.served is not None:
                info["served"] = self.served.totals()
            if self.job_links is not None:
                info["job_links"] = self.job_links.info()
            return info
        if name == "queues":                # the dashboard's queue list (docs/metrics.md)
            return queue_report(shard, arg) if type(arg) is int else queue_report(shard, *arg)
        if name == "queue_names":           # the console (docs/console.md)
            return queue_names(shard, *arg)
        if name == "queue_rows":
            return queue_rows(shard, arg)
        if name == "jobs":
            return job_page(shard, *arg)
        if name == "search":
            return search(shard, *arg)
        if name == "queued_ids":
            return queued_ids(shard, *arg)
        if name == "scan":                  # QSCAN / JSCAN share: see Shard.scan
            return shard.scan(*arg)
        if name == "cluster":               # membership changed: see Replication.set_cluster
            shard.replication.set_cluster(arg)
            if self.job_links is not None:
                self.job_links.set_cluster(arg)
            return True
        if name == "memory":                # every ~100 ms: [level, excess, noeviction, spill limit]
            shard.memory.set_memory(*arg)
            return shard.memory.memory_report() + [shard.persistence.aof_status()]
        if name.startswith("aof_"):         # persistence: see disque.workers.persistence
            return shard.persistence.aof_control(name, arg)
        if name == "flushall":
            shard.persistence.aof_flushall()    # DELJOB records first (SPEC 4.4)
            shard.flushall()
            return True
        if name == "shutdown":
            self.running = False
            return True
        if name == "ping":
            return True
        if name == "tls_config":            # tls-port: see disque/workers/tls_clients.py
            if self.served is None:
                return {"error": "TLS needs worker-link unix"}
            return self.served.tls.configure(arg)
        if name == "served_config":         # connection-affinity: see ServedClients.configure
            if self.served is not None:
                self.served.configure(arg)
            return self.served is not None
        raise ValueError("unknown control %r" % name)

    def handle_batch(self, batch):
        shard = self.shard
        out = shard.out
        for req in batch:
            kind = req[0]
            self.ops += 1
            if kind != P.CONTROL:
                self.work += 1
            if kind == P.CMD:
                # P.Cmd in, P.Reply out, indexed and built inline: the per-command path
                try:
                    reply = shard.execute(req[1], req[2])
                    if reply is not None:       # None: an ADDJOB waiting for its copies
                        out.append([req[1], reply])
                except Exception:
                    log.exception("command failed: %r", req[2][:3])
                    out.append([req[1], R.INTERNAL_ERROR])
            elif kind == P.GETJOB:
                g = P.GetJob.decode(req)
                reply, ids = shard.getjob(*g)
                if reply is not None:
                    out.append(P.GetJobReply.encode(g.reqid, reply, ids))
            elif kind == P.UNBLOCK:
                u = P.Unblock.decode(req)
                shard.consumers.unblock_client(u.client, u.reqid)
            elif kind == P.RETURN:
                shard.return_jobs(P.Return.decode(req).job_ids)
            elif kind == P.BUS:
                shard.replication.on_bus(P.Bus.decode(req).messages)
            elif kind == P.CONTROL:
                c = P.Control.decode(req)
                try:
                    out.append(P.Reply.encode(c.reqid, self.control(c.name, c.arg)))
                except Exception as e:
                    log.exception("control %s failed", c.name)
                    out.append(P.Reply.encode(c.reqid, {"error": str(e)}))

    def run(self):
        link = self.link
        shard = self.shard
        persistence, replication, consumers = shard.persistence, shard.replication, shard.consumers
        spill = shard.spill
        timer = self.timer = PeriodicTimer(TICK_MS)
        if link.channel is not None:
            served = self.served = ServedClients(self.index, shard.nworkers, shard, link.channel,
                                                 link.sock.fileno(), timer.fileno(), self.peers)
            shard.served = served
            turn = served.turn
            if self.job_links_fd is not None:
                self.job_links = JobLinks(self.index, shard.nworkers, self.job_links_fd, shard,
                                          served.ep, served.extra_fds, self.job_links_tls)
                # job messages in and out within the C turn: a copy's GOTJOB, a producer's
                # REPLJOBs, without a pass through this loop for each frame
                served.job_links_out = self.job_messages_out
        else:
            served = None
            wait = link.waiter(timer.fileno())
        link.send(P.READY)
        log.info("Worker %d ready", self.index)
        unpack = msgpack.unpackb
        pack = msgpack.Packer().pack        # one Packer: packb makes a new one per call
        ticks = 0
        cluster_ticks = 0
        job_links = self.job_links
        idle = False                # ticking every IDLE_TICK_MS
        last_work = self.work_done()
        last_work_ms = shard.now_ms
        while self.running and not link.closed:
            # an AOF load or a rewrite with slices left goes on at once, not at the next tick
            block = not persistence.aof_busy or not persistence.aof_has_slices()
            if served is None:
                readable, ticked = wait(block)
            elif turn(block):
                continue            # only served connections had news: the turn ran in C
            else:
                readable, ticked = served.link_ready, served.ticked
            shard.tick()
            # timers first and again between batches: a request never sees a job whose
            # TTL passed before the request came in, however long the batches take
            if shard.timers_due() or consumers.deadlines:
                shard.run_timers()
            if readable:
                for msg in link.recv_all():
                    self.handle_batch(unpack(msg, use_list=True))
                    shard.tick()
                    if shard.timers_due():
                        shard.run_timers()
            if served is not None:
                served.serve_ready()        # connections this worker serves itself
            if ticked:
                per = timer.interval_ms // TICK_MS      # 10 ms ticks one expiry stands for
                ticks += timer.drain() * per
                if replication.repl_waits:
                    replication.repl_cron()     # producers' timeouts, one more node each 50 ms
                cluster_ticks += per
                if cluster_ticks >= CLUSTER_CRON_TICKS:
                    cluster_ticks = 0
                    self.cluster_cron()
                    if served is not None:
                        served.cron()
                    if job_links is not None:
                        job_links.cron()
                if ticks >= SLOW_CRON_TICKS:
                    ticks = 0
                    if not self.slow_cron():
                        break
            if spill.pending():
                spill.work()                # bodies to disk past the threshold, heads refilled
            if shard.ready:
                shard.consumers.serve_ready()
            if shard.interest_due:
                shard.federation.tell_interest_due()
            if shard.bus_out:
                self.route_bus_out()
            persistence.aof_flush()         # the AOF is written before the replies leave
            if job_links is not None:
                job_links.flush()
            if served is not None:
                served.flush()              # its connections, and the other workers
            if shard.out:
                link.send(pack(shard.out))
                shard.out = []
            if persistence.aof_busy:
                persistence.aof_work()      # rewrite / load slices, auto rewrite, retries
            # the idle tick: after IDLE_AFTER_MS without work (looked at on ticks), and back
            # at the first work or as soon as something is due within a slow tick
            if idle or ticked:
                work = self.work_done()
                if work != last_work or (idle and served is not None and served.woke):
                    last_work = work
                    last_work_ms = shard.now_ms
                    if idle:
                        idle = self.set_idle(False)
                elif idle:
                    if not self.may_idle():
                        idle = self.set_idle(False)
                elif shard.now_ms - last_work_ms >= IDLE_AFTER_MS and self.may_idle():
                    idle = self.set_idle(True)
        if link.closed and self.running:
            log.warning("Link to the front-end closed: worker %d exits", self.index)
        if served is not None:
            shard.persistence.aof_flush()
            if job_links is not None:
                job_links.flush()
                job_links.close_all()
            served.close_all()
        shard.persistence.aof_close()
        timer.close()
        link.close()

    def route_bus_out(self):
        """This turn's job messages: straight to the owning workers where a direct job link
        is up (in their boxes until job_links.flush), the rest through the front-end onto
        the bus."""
        shard = self.shard
        count_types(shard.bus_out, shard.replication.bus_sent)
        rest = shard.bus_out if self.job_links is None else self.job_links.send(shard.bus_out)
        if rest:
            shard.out.append(P.BusOut.encode(rest))
        shard.bus_out = []

    def job_messages_out(self):
        """ServedCore.turn, after serving, with job messages to send and no AOF (the turn
        leaves a node with an AOF to this loop, which writes it before anything leaves)."""
        self.route_bus_out()
        self.job_links.flush()

    def work_done(self):
        """A count that moves with every command and job message this worker gets: the
        commands it runs on any path (those forwarded by the other workers too), those its
        connections send elsewhere, the link's requests and job messages (control messages,
        such as the front-end's memory level every 100 ms, leave it)."""
        n = self.work + self.shard.n_commands
        if self.served is not None:
            n += self.served.commands
        if self.job_links is not None:
            n += self.job_links.received_msgs
        return n

    def may_idle(self):
        """Nothing this worker does needs the 10 ms tick within the next slow one: no job
        timer due within IDLE_TICK_MS + TICK_MS, no consumer deadline, no producer waiting
        for copies, no AOF work, nothing queued for the loop, not leaving."""
        shard = self.shard
        if (shard.consumers.deadlines or shard.replication.repl_waits or shard.ready
                or shard.interest_due or shard.bus_out or shard.out or shard.leaving
                or shard.persistence.aof_busy or shard.spill.pending()):
            return False
        when = shard.timers.next_when()
        return when == 0 or when > shard.now_ms + IDLE_TICK_MS + TICK_MS

    def set_idle(self, idle):
        self.timer.set_interval(IDLE_TICK_MS if idle else TICK_MS)
        if self.served is not None:
            self.served.idle = idle     # every wake-up then comes back to this loop
        return idle

    def cluster_cron(self):
        """Every 100 ms on a node of a cluster: federation interest, LEAVING consumers."""
        shard = self.shard
        if shard.cluster_size > 1:
            if shard.leaving:
                shard.leaving_cron()
            else:
                shard.federation.federation_cron()

    def slow_cron(self):
        """Twice a second: leave if the front-end is gone, evict idle queues."""
        if os.getppid() != self.parent:
            log.warning("Front-end is gone: worker %d exits", self.index)
            return False
        self.shard.queue_commands.evict_idle_queues()
        return True


def parse_args(argv=None):
    """A new interpreter's command line (disque/worker_spawn.py, WorkerArgs.argv)."""
    ap = argparse.ArgumentParser(prog="disque-worker")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--link", required=True, help="unix:<fd>,<fd> or zmq:<endpoint>")
    ap.add_argument("--node-id", required=True)
    ap.add_argument("--config", default="{}")
    ap.add_argument("--peers", default="", help="<worker>:<fd>,... links to the other workers")
    ap.add_argument("--job-links", type=int, default=None,
                    help="fd of the socket where other nodes' workers connect (job_links.py)")
    ap.add_argument("--job-links-tls", default=None,
                    help="directory of the job links' TLS files on a secured cluster "
                         "(disque/contracts/job_link_tls.py)")
    a = ap.parse_args(argv)
    return WorkerArgs(a.index, a.workers, a.link, a.node_id, json.loads(a.config), a.peers,
                      a.job_links, a.job_links_tls)


def serve(args):
    """Run worker `args.index` until the front-end stops it (a new interpreter's main, or
    the child of a fork: disque/worker_spawn.py). Returns the exit code."""
    die_with_parent()
    config = args.config
    nodeclock.adopt(config.get("clock_base_ns", nodeclock.BASE_NS))    # before the Shard
    dlog.setup("worker-%d" % args.index, config.get("loglevel", "notice"), config.get("logfile", ""))
    if os.getppid() == 1:
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the front-end decides when we stop
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # file size limit: a failed AOF write, not death
    peers = peer_sockets(args.peers) if args.link.startswith("unix:") else None
    worker = Worker(args.index, args.workers, args.link, args.node_id.encode(), config, peers,
                    args.job_links, args.job_links_tls)
    signal.signal(signal.SIGTERM, lambda *a: setattr(worker, "running", False))
    try:
        worker.run()
    except KeyboardInterrupt:
        pass
    log.info("Worker %d stopped", args.index)
    return 0


def main(argv=None):
    sys.exit(serve(parse_args(argv)))
