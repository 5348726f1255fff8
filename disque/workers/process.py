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
import zmq

from disque import log as dlog
from disque.workers import protocol as P
from disque.workers.shard import Shard

PR_SET_PDEATHSIG = 1
log = logging.getLogger("disque.worker")


def die_with_parent():
    """Ask the kernel to SIGTERM us when the front-end dies, even by SIGKILL (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the loop also polls getppid()


class Worker:
    def __init__(self, index, nworkers, endpoint, node_id, config):
        self.index = index
        self.parent = os.getppid()
        self.shard = Shard(index, nworkers, node_id, config)
        self.ctx = zmq.Context(1)
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, b"w%d" % index)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.connect(endpoint)
        self.running = True
        self.process = psutil.Process()
        self.started = time.time()
        self.ops = 0

    def control(self, name, arg):
        shard = self.shard
        if name == "info":
            info = shard.info()
            mem = self.process.memory_info()
            cpu = self.process.cpu_times()
            info.update(pid=os.getpid(), rss=mem.rss, cpu_user=cpu.user, cpu_sys=cpu.system,
                        ops=self.ops, index=self.index)
            return info
        if name == "flushall":
            shard.flushall()
            return True
        if name == "shutdown":
            self.running = False
            return True
        if name == "ping":
            return True
        raise ValueError("unknown control %r" % name)

    def handle_batch(self, batch):
        shard = self.shard
        out = shard.out
        for req in batch:
            kind = req[0]
            self.ops += 1
            if kind == P.CMD:
                try:
                    out.append([req[1], shard.execute(req[1], req[2])])
                except Exception:
                    log.exception("command failed: %r", req[2][:3])
                    out.append([req[1], b"-ERR internal error, check server logs\r\n"])
            elif kind == P.GETJOB:
                _, reqid, client, count, nohang, withcounters, timeout_ms, proxy, queues = req
                reply, ids = shard.getjob(reqid, client, count, nohang, withcounters,
                                          timeout_ms, proxy, queues)
                if reply is not None:
                    out.append([reqid, reply, ids])
            elif kind == P.UNBLOCK:
                shard.unblock_client(req[1], req[2])
            elif kind == P.RETURN:
                shard.return_jobs(req[1])
            elif kind == P.CONTROL:
                try:
                    out.append([req[1], self.control(req[2], req[3])])
                except Exception as e:
                    log.exception("control %s failed", req[2])
                    out.append([req[1], {"error": str(e)}])

    def run(self):
        sock = self.sock
        shard = self.shard
        sock.send(P.READY)
        log.info("Worker %d ready", self.index)
        unpack = msgpack.unpackb
        pack = msgpack.packb
        last_parent_check = 0.0
        last_evict = 0
        while self.running:
            shard.tick()
            if sock.poll(shard.next_wakeup_ms()):
                while True:
                    try:
                        msg = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    shard.tick()
                    self.handle_batch(unpack(msg, use_list=True))
            shard.tick()
            shard.run_timers()
            if shard.ready:
                shard.serve_ready()
            if shard.out:
                sock.send(pack(shard.out))
                shard.out = []
            now = time.monotonic()
            if now - last_parent_check > 0.5:
                last_parent_check = now
                if os.getppid() != self.parent:
                    log.warning("Front-end is gone: worker %d exits", self.index)
                    break
                if shard.now_s != last_evict:
                    last_evict = shard.now_s
                    shard.evict_idle_queues()
        sock.close(linger=500)
        self.ctx.term()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="disque-worker")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--node-id", required=True)
    ap.add_argument("--config", default="{}")
    args = ap.parse_args(argv)
    die_with_parent()
    config = json.loads(args.config)
    dlog.setup("worker-%d" % args.index, config.get("loglevel", "notice"), config.get("logfile", ""))
    if os.getppid() == 1:
        sys.exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the front-end decides when we stop
    worker = Worker(args.index, args.workers, args.endpoint, args.node_id.encode(), config)
    signal.signal(signal.SIGTERM, lambda *a: setattr(worker, "running", False))
    try:
        worker.run()
    except KeyboardInterrupt:
        pass
    log.info("Worker %d stopped", args.index)
