"""`disque-server`: parse the configuration, start the workers, serve clients.

    disque-server [config-file] [--workers N] [--<directive> value ...]
"""
import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import zmq

from disque import config as config_mod
from disque import log as dlog
from disque.frontend import Frontend
from disque.workers import protocol as P

log = logging.getLogger("disque.server")
WORKER_START_TIMEOUT = 30.0


class StartupError(Exception):
    pass


def new_event_loop():
    """uvloop when installed (measured faster for this front-end), else asyncio's."""
    try:
        import uvloop
        return uvloop.new_event_loop(), "uvloop"
    except ImportError:
        return asyncio.new_event_loop(), "asyncio"


def listen_sockets(cfg):
    """Bind every listening socket before starting workers, so a busy port fails fast."""
    socks = []
    if not cfg.port:
        return socks
    for addr in cfg.bind or ["127.0.0.1"]:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, cfg.port))
        except OSError as e:
            s.close()
            for o in socks:
                o.close()
            raise StartupError("Creating Server TCP listening socket %s:%d: %s" % (addr, cfg.port, e.strerror))
        s.listen(getattr(cfg, "tcp_backlog", 511))
        s.setblocking(False)
        socks.append(s)
    return socks


class Node:
    def __init__(self, cfg):
        self.cfg = cfg
        self.nworkers = cfg.workers
        self.node_id = os.urandom(20).hex().encode()
        self.ipc_dir = tempfile.mkdtemp(prefix="disque-%d-" % cfg.port)
        self.endpoint = "ipc://%s/workers" % self.ipc_dir
        self.ctx = zmq.Context(1)
        self.router = None
        self.procs = []
        self.exit_code = 0
        self.stopping = False

    def worker_config(self):
        cfg = self.cfg
        return {"loglevel": cfg.loglevel, "logfile": cfg.logfile or "",
                "maxmemory": cfg.maxmemory}

    def start_workers(self):
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.setsockopt(zmq.RCVHWM, 0)
        self.router.bind(self.endpoint)
        conf = json.dumps(self.worker_config())
        for k in range(self.nworkers):
            cmd = [sys.executable, "-m", "disque.workers", "--index", str(k),
                   "--workers", str(self.nworkers), "--endpoint", self.endpoint,
                   "--node-id", self.node_id.decode(), "--config", conf]
            self.procs.append(subprocess.Popen(cmd, close_fds=True))
        waiting = {b"w%d" % k for k in range(self.nworkers)}
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while waiting:
            for k, p in enumerate(self.procs):
                if p.poll() is not None:
                    raise StartupError("worker %d exited during startup (code %s)" % (k, p.returncode))
            if time.monotonic() > deadline:
                raise StartupError("workers did not start within %ds" % WORKER_START_TIMEOUT)
            if self.router.poll(100):
                ident, msg = self.router.recv_multipart()
                if msg == P.READY:
                    waiting.discard(ident)

    def stop_workers(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cleanup(self):
        self.stop_workers()
        if self.router is not None:
            self.router.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self.ipc_dir, ignore_errors=True)

    def run(self):
        cfg = self.cfg
        socks = listen_sockets(cfg)
        loop, loop_name = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self.start_workers()
            fe = Frontend(cfg, self.node_id, self.router, [b"w%d" % k for k in range(self.nworkers)], loop)
            fe.loop_name = loop_name
            fe.executable = os.path.abspath(sys.argv[0])
            fe.shutdown_cb = self.request_stop
            self.fe = fe
            loop.add_reader(self.router.getsockopt(zmq.FD), fe.on_worker_readable)
            servers = [loop.run_until_complete(loop.create_server(fe.new_client, sock=s))
                       for s in socks]
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.on_signal, sig)
            loop.call_later(0.5, self.watch_workers)
            log.info("Disque %s node %s: port %d, %d worker(s), %s loop. Ready to accept connections",
                     "1.0-rc1", self.node_id[:8].decode(), cfg.port, self.nworkers, loop_name)
            loop.run_forever()
            for srv in servers:
                srv.close()
        finally:
            self.cleanup()
            loop.close()
        log.info("Disque is now ready to exit, bye bye...")
        return self.exit_code

    def on_signal(self, sig):
        log.warning("Received %s scheduling shutdown...", signal.Signals(sig).name)
        self.request_stop()

    def request_stop(self, code=0):
        if not self.stopping:
            self.stopping = True
            self.exit_code = code
            asyncio.get_event_loop().stop()

    def watch_workers(self):
        for k, p in enumerate(self.procs):
            if p.poll() is not None:
                log.error("Worker %d (pid %d) died with code %s: shutting the node down",
                          k, p.pid, p.returncode)
                self.request_stop(1)
                return
        asyncio.get_event_loop().call_later(0.5, self.watch_workers)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = config_mod.parse_command_line(argv)
    except config_mod.CommandLineExit as e:
        print(str(e))
        sys.exit(0)
    except config_mod.ConfigError as e:
        print("disque-server: " + e.one_line, file=sys.stderr)
        sys.exit(1)
    dlog.setup("frontend", cfg.loglevel, cfg.logfile)
    try:
        node = Node(cfg)
        code = node.run()
    except StartupError as e:
        log.error("Fatal: %s", e)
        print("disque-server: %s" % e, file=sys.stderr)
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
