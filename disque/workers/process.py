"""A worker process: owns the queues of its slots and serves front-end batches.

`Worker` holds the parts (docs/design.md, "The worker's loop"): the shard, the link to the
front-end, the connections it serves (ServedClients) and the direct job links, and the
loop's own parts: WorkerLoop (the turn), Batches (the front-end's requests, controls.py
for the controls), Crons, IdleTick and the Outbox (the order things leave in). `serve`
runs one, in a new interpreter (main) or in a fork of the front-end (disque/worker_spawn.py).
"""
import gc
import json
import logging
import os
import signal
import sys
import time


from disque import log as dlog
from disque import nodeclock
from disque._fast import procctl
from disque._fast.clock import PeriodicTimer
from disque.contracts import worker_link as link_msg
from disque.contracts.worker_args import WorkerArgs
from disque.workers.batches import Batches
from disque.workers.crons import TICK_MS, Crons
from disque.workers.idle import IdleTick
from disque.workers.job_links import JobLinks
from disque.workers.link import worker_link
from disque.workers.outbox import Outbox
from disque.workers.peer_links import peer_sockets
from disque.workers.served_clients import ServedClients
from disque.workers.shard import Shard
from disque.workers.worker_loop import WorkerLoop

log = logging.getLogger("disque.worker")


def die_with_parent():
    """Ask the kernel to SIGTERM us when the front-end dies, even by SIGKILL (the loop
    also polls getppid())."""
    procctl.die_with_parent(signal.SIGTERM)


class Worker:
    """The parts of one worker process, and their life: `run` builds the loop's parts, runs
    it, and closes everything when it ends."""

    def __init__(self, index, nworkers, link_spec, node_id, config, peers=None,
                 job_links_fd=None, job_links_tls=None):
        self.index = index
        self.shard = Shard(index, nworkers, node_id, config)
        self.link = worker_link(link_spec, index)
        self.running = True
        self.started = time.time()
        self.ops = 0                # requests from the front-end, controls included
        self.work = 0               # requests and job messages from the front-end (not control)
        self.loop_turns = 0         # turns through the Python loop (WorkerLoop.turn), INFO
        self.peers = peers          # sockets to the other workers (disque/workers/peer_links.py)
        self.job_links_fd = job_links_fd    # listening socket for other nodes' workers
        self.job_links_tls = job_links_tls  # their TLS files on a secured cluster (a directory)
        self.served = None          # ServedClients when the front-end hands connections over
        self.job_links = None       # JobLinks (disque/workers/job_links.py)
        self.timer = None
        self.crons = self.idle = self.batches = self.outbox = None

    def tick_ms(self):
        return self.timer.interval_ms if self.timer is not None else TICK_MS

    def start_parts(self):
        shard = self.shard
        link = self.link
        timer = self.timer = PeriodicTimer(TICK_MS)
        if link.channel is not None:
            served = self.served = ServedClients(self.index, shard.nworkers, shard, link.channel,
                                                 link.sock.fileno(), timer.fileno(), self.peers)
            shard.served = shard.replication.served = served
            if self.job_links_fd is not None:
                self.job_links = JobLinks(self.index, shard.nworkers, self.job_links_fd, shard,
                                          served.ep, served.extra_fds, self.job_links_tls)
                shard.job_links = self.job_links
        self.crons = Crons(self, timer)
        self.idle = IdleTick(self, timer)
        self.batches = Batches(self)
        self.outbox = Outbox(self)
        if self.job_links is not None:
            # job messages in and out within the C turn: a copy's GOTJOB, a producer's
            # REPLJOBs, without a pass through the loop for each frame
            self.served.job_links_out = self.job_links

    def run(self):
        self.start_parts()
        self.link.send(link_msg.READY)
        log.info("Worker %d ready", self.index)
        WorkerLoop(self).run()
        if self.link.closed and self.running:
            log.warning("Link to the front-end closed: worker %d exits", self.index)
        self.close()

    def close(self):
        shard = self.shard
        if self.served is not None:
            shard.persistence.aof_flush()       # what was executed is written first
            if self.job_links is not None:
                self.job_links.flush()
                self.job_links.close_all()
            self.served.close_all()
        shard.persistence.aof_close()
        self.timer.close()
        self.link.close()


def parse_args(argv=None):
    """A new interpreter's command line (disque/worker_spawn.py, WorkerArgs.argv)."""
    import argparse             # not in a forked worker, which gets WorkerArgs as they are
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
    # what the start made stays for the worker's life: out of the collector's walks, as a
    # fork's inherited objects are (worker_spawn.fork_workers); a new interpreter (a
    # secured node's workers, a restarted one) has every module's objects to freeze
    gc.freeze()
    try:
        worker.run()
    except KeyboardInterrupt:
        pass
    log.info("Worker %d stopped", args.index)
    return 0


def main(argv=None):
    sys.exit(serve(parse_args(argv)))
