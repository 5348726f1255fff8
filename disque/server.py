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

from disque import commands as commands_mod
from disque import config as config_mod
from disque import log as dlog
from disque._fast.clock import PeriodicTimer
from disque.bus.cluster import BUS_PORT_OFFSET, Cluster
from disque.bus.nodes import ConfigFileError
from disque.aof_front import worker_config as aof_worker_config
from disque.frontend import Frontend
from disque.workers.link import front_end_links
from disque.worker_restart import WorkerRestarts

log = logging.getLogger("disque.server")
WORKER_START_TIMEOUT = 30.0
# Workers import the same `disque` the front-end runs: `python -m` would put the current
# directory first on sys.path, and started from inside a source checkout the worker would
# import the uncompiled tree instead of the installed package.
WORKER_BOOT = ("import os, sys\n"
               "if sys.path and sys.path[0] in ('', os.getcwd()):\n"
               "    sys.path.pop(0)\n"
               "from disque.workers.process import main\n"
               "main()\n")
CRON_MS = 50            # front-end cron: GETJOB timeouts are enforced at this granularity
WATCH_TICKS = 10        # check that every worker is alive every WATCH_TICKS * CRON_MS
MEMORY_TICKS = 2        # measure memory and push the level to workers (SPEC 9) every 100 ms


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
        self.node_id = None             # from the cluster config file (start_cluster)
        self.cluster = None
        self.ipc_dir = tempfile.mkdtemp(prefix="disque-%d-" % cfg.port)
        self.links = None
        self.procs = []
        self.exit_code = 0
        self.stopping = False
        self.cron_timer = None
        self.cron_ticks = 0
        self.memory_ticks = 0
        self.fe = None
        self.restarts = WorkerRestarts(self)

    def worker_config(self):
        cfg = self.cfg
        return {"loglevel": cfg.loglevel, "logfile": cfg.logfile or "", **aof_worker_config(cfg)}

    def start_workers(self):
        self.links = links = front_end_links(self.cfg.worker_link, self.nworkers, self.ipc_dir)
        for k in range(self.nworkers):
            self.procs.append(None)
            self.spawn_worker(k)
        waiting = set(range(self.nworkers))
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while waiting:
            for k, p in enumerate(self.procs):
                if p.poll() is not None:
                    raise StartupError("worker %d exited during startup (code %s)" % (k, p.returncode))
            if time.monotonic() > deadline:
                raise StartupError("workers did not start within %ds" % WORKER_START_TIMEOUT)
            waiting.difference_update(links.wait_ready(100))

    def spawn_worker(self, k):
        """Start the process of worker k (at start-up, or again after it died)."""
        link_args, fds = self.links.worker_args(k)
        node_id = self.fe.node_id if self.fe is not None else self.node_id
        cmd = [sys.executable, "-c", WORKER_BOOT, "--index", str(k),
               "--workers", str(self.nworkers), "--node-id", node_id.decode(),
               "--config", json.dumps(self.worker_config())] + link_args
        self.procs[k] = subprocess.Popen(cmd, close_fds=True, pass_fds=fds)
        self.links.after_spawn(k)

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

    def start_cluster(self):
        """The bus on port + 10000 and the node identity from the cluster config file."""
        cfg = self.cfg
        if not cfg.port:
            self.node_id = os.urandom(20).hex().encode()
            return
        path = cfg.resolve_path(cfg.cluster_config_file)
        try:
            self.cluster = Cluster(cfg.port, cfg.bind or ["127.0.0.1"], cfg.cluster_node_timeout,
                                   path)
        except ConfigFileError as e:
            raise StartupError(str(e))
        except zmq.ZMQError as e:
            raise StartupError("Creating the cluster bus socket on port %d: %s"
                               % (cfg.port + BUS_PORT_OFFSET, e))
        except OSError as e:
            raise StartupError("Cluster config file %s: %s" % (path, e.strerror or e))
        self.node_id = self.cluster.myself.id.encode()

    def cleanup(self):
        self.stop_workers()
        if self.cluster is not None:
            self.cluster.close()
        if self.links is not None:
            self.links.close()
        if self.cron_timer is not None:
            self.cron_timer.close()
        shutil.rmtree(self.ipc_dir, ignore_errors=True)

    def run(self):
        cfg = self.cfg
        socks = listen_sockets(cfg)
        loop, loop_name = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self.start_cluster()
            self.start_workers()
            fe = Frontend(cfg, self.node_id, self.links, self.nworkers, loop)
            fe.loop_name = loop_name
            fe.executable = os.path.abspath(sys.argv[0])
            fe.shutdown_cb = self.request_stop
            self.fe = fe
            if self.cluster is not None:
                fe.cluster_attach(self.cluster)
            fe.restarts = self.restarts
            self.links.on_ready = self.restarts.ready
            self.links.start(loop, fe.deliver, fe.flush_replies, self.worker_lost)
            error = fe.aof_startup()    # load the AOF; clients get -LOADING until it is done
            if error:
                raise StartupError(error)
            servers = [loop.run_until_complete(loop.create_server(fe.new_client, sock=s))
                       for s in socks]
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.on_signal, sig)
            # the cron tick comes from a timerfd, so the loop never holds a timer and
            # waits in epoll with no timeout (see disque/_fast/clock.pyx)
            self.cron_timer = PeriodicTimer(CRON_MS)
            loop.add_reader(self.cron_timer.fileno(), self.cron)
            log.info("Disque %s node %s: port %d, %d worker(s) over %s, %s loop. "
                     "Ready to accept connections", "1.0-rc1", self.node_id[:8].decode(),
                     cfg.port, self.nworkers, self.links.kind, loop_name)
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

    def worker_lost(self, w):
        if not self.stopping:
            self.restarts.died(w)       # a dead worker is not a dead node

    def cron(self):
        ticks = self.cron_timer.drain()
        self.cron_ticks += ticks
        self.memory_ticks += ticks
        self.fe.cron()
        if self.memory_ticks >= MEMORY_TICKS:
            self.memory_ticks = 0
            self.fe.memory_cron()
        if self.cron_ticks >= WATCH_TICKS:
            self.cron_ticks = 0
            self.watch_workers()

    def watch_workers(self):
        for k, p in enumerate(self.procs):
            if p.poll() is not None:
                self.restarts.died(k)
                if self.stopping:
                    return


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
    try:
        commands_mod.command_table(cfg.rename_commands)
    except ValueError as e:
        print("disque-server: config error: rename-command: %s" % e, file=sys.stderr)
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
