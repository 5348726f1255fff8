"""`disque-server`: parse the configuration, start the workers, serve clients.

    disque-server [config-file] [--workers N] [--<directive> value ...]
"""
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from disque import commands as commands_mod
from disque import config as config_mod
from disque import log as dlog
from disque import nodeclock
from disque._fast.clock import PeriodicTimer
from disque.bus import announce as announce_mod
from disque.bus.cluster import Cluster
from disque.bus.nodes import ConfigFileError
from disque.bus.secret import SecretError, bus_keys_from_config, file_is_private
from disque.frontend.persistence_phases import worker_config as aof_worker_config
from disque.listen import bind_tcp
from disque.contracts.tls_settings import TlsConfigError, https_context, server_context, settings_of
from disque.contracts.worker_args import WorkerArgs
from disque.workers.link import front_end_links
from disque.worker_restart import WorkerRestarts
from disque.worker_spawn import exec_worker, fork_workers

log = logging.getLogger("disque.server")
WORKER_START_TIMEOUT = 30.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CRON_MS = 50            # front-end cron: GETJOB timeouts are enforced at this granularity
WATCH_TICKS = 10        # check that every worker is alive every WATCH_TICKS * CRON_MS
LOADING_HOLD_S = 0.25   # a longer AOF load serves clients during the load, with -LOADING
LOADING_HOLD_BYTES = 1 << 20  # ... of files this big: smaller ones load before anyone is served
BUS_OPEN_DELAY_S = 0.001    # the bus opens this long after the loop starts (Node.open_bus)
PICK_PORT_TRIES = 16    # ports the kernel may give a job link listener before one is kept
MEMORY_TICKS = 2        # measure memory and push the level to workers (SPEC 9) every 100 ms


class StartupError(Exception):
    pass


def new_event_loop():
    """uvloop when installed (measured faster for this front-end), else asyncio's; set as
    the thread's loop. Imported here, after the workers are forked (Node.run): they run no
    asyncio, and the front-end imports it while they start."""
    import asyncio
    try:
        import uvloop
        loop, name = uvloop.new_event_loop(), "uvloop"
    except ImportError:
        loop, name = asyncio.new_event_loop(), "asyncio"
    asyncio.set_event_loop(loop)
    return loop, name


def listen_sockets(cfg):
    """Bind every listening socket before starting workers, so a busy port fails fast."""
    if not cfg.port:
        return []
    try:
        return bind_tcp(cfg.bind or ["127.0.0.1"], cfg.port, getattr(cfg, "tcp_backlog", 511),
                        "Server TCP listening socket")
    except OSError as e:
        raise StartupError(str(e))


def tls_listen_sockets(cfg, client_socks):
    """The `tls-port` sockets (none without it), after checking the TLS settings: a bad
    certificate, key or CA stops the node here with a one-line reason."""
    if not cfg.tls_port:
        return []
    try:
        if cfg.worker_link != "unix":
            raise StartupError("tls-port needs worker-link unix: the workers run the TLS "
                               "connections")
        if cfg.tls_port == cfg.port:
            raise StartupError("tls-port %d is the plaintext port" % cfg.tls_port)
        try:
            server_context(settings_of(cfg))
        except TlsConfigError as e:
            raise StartupError(str(e))
        try:
            return bind_tcp(cfg.bind or ["127.0.0.1"], cfg.tls_port,
                            getattr(cfg, "tcp_backlog", 511), "Server TLS listening socket")
        except OSError as e:
            raise StartupError(str(e))
    except StartupError:
        for s in client_socks:
            s.close()
        raise


def metrics_tls_context(cfg):
    """The metrics port's TLS context with `metrics-tls yes`, else None."""
    if not cfg.metrics_tls:
        return None
    try:
        return https_context(settings_of(cfg))
    except TlsConfigError as e:
        raise StartupError(str(e))


def metrics_listen(cfg, client_socks):
    """The metrics port's sockets (none when metrics-port is 0), bound before the workers start."""
    if not cfg.metrics_port:
        return []
    if cfg.metrics_port in (cfg.port, cfg.tls_port):
        for s in client_socks:
            s.close()
        raise StartupError("metrics-port %d is the client port" % cfg.metrics_port)
    from disque.metrics.endpoint import listen_sockets as metrics_sockets  # only when enabled
    try:
        metrics_tls_context(cfg)            # a certificate that does not load: stop here
        return metrics_sockets(cfg)
    except OSError as e:
        for s in client_socks:
            s.close()
        raise StartupError(str(e))


def unix_listen_socket(cfg):
    """The `unixsocket` listener (as upstream: a stale file is replaced, `unixsocketperm`
    applied with chmod when not 0), or None when not configured."""
    path = cfg.unixsocket
    if not path:
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        if cfg.unixsocketperm:
            os.chmod(path, cfg.unixsocketperm)
        s.listen(getattr(cfg, "tcp_backlog", 511))
    except OSError as e:
        s.close()
        raise StartupError("Opening Unix socket %s: %s" % (path, e.strerror or e))
    s.setblocking(False)
    return s


def job_link_listeners(cfg, cluster, nworkers):
    """One listening TCP socket per worker for direct job links (docs/design.md, "Direct
    job links"), on the bus' address, or [] when job messages stay on the bus: with
    `cluster-job-links bus`, with `worker-link zmq`, or with no single address to bind.
    On a secured bus the links are TLS (Node.start_workers writes the workers' files).
    Worker w listens on `cluster-job-link-port` + w, or on a port the kernel picks when it
    is 0. The front-end keeps them, so a restarted worker takes links on the same ports.

    A port the kernel picks comes from the ephemeral range, where a node's bus port can be
    too (port 25000 has bus port 35000): one picked that is the client or bus port of a
    node this one knows (nodes.conf) is given back and another taken. Else a node of the
    same host restarting a moment later could not open its bus ("Address already in use";
    the original's own suite restarts 20 such nodes at once)."""
    if cluster is None or cfg.cluster_job_links != "direct" or cfg.worker_link != "unix":
        return []
    addrs = cfg.bind or ["127.0.0.1"]
    if len(addrs) != 1:
        log.info("Direct job links are off: they need one bind address, not %d", len(addrs))
        return []
    host = "0.0.0.0" if addrs[0] == "*" else addrs[0]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    base = cfg.cluster_job_link_port
    for name, first in (("cluster-job-link-port", base),
                        ("cluster-announce-job-link-port", cfg.cluster_announce_job_link_port)):
        if first and first + nworkers - 1 > 65535:
            raise StartupError("%s %d + %d workers goes past port 65535" % (name, first, nworkers))
    taken = set()
    for node in cluster.nodes.values():
        taken.update((node.port, node.bus_port))
    socks, refused = [], []     # refused: known nodes' ports, held until the others are picked
    try:
        for w in range(nworkers):
            for attempt in range(PICK_PORT_TRIES):
                s = socket.socket(family, socket.SOCK_STREAM)
                socks.append(s)
                if base:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((host, base + w if base else 0))
                if base or s.getsockname()[1] not in taken or attempt == PICK_PORT_TRIES - 1:
                    break
                refused.append(socks.pop())     # kept open, so that the kernel picks another
            s.listen(128)
    except OSError as e:
        for s in socks:
            s.close()
        raise StartupError("Opening the direct job link sockets on %s: %s" % (host, e.strerror or e))
    finally:
        for s in refused:
            s.close()
    return socks


def check_bus_port(addrs, port):
    """The bus port must be free before the workers start: ZeroMQ binds it only once the
    node serves (Node.open_bus), and a busy one stops the start here with its reason."""
    try:
        socks = bind_tcp(addrs, port, 1, "the cluster bus socket")
    except OSError as e:
        raise StartupError("Creating the cluster bus socket on port %d: %s"
                           % (port, (e.__cause__ or e).strerror or e))
    for s in socks:
        s.close()


def secured(cfg):
    """Whether the node has a cluster secret (docs/security.md)."""
    return bool(cfg.cluster_secret or cfg.cluster_secret_file)


def remove_unix_socket(path):
    log.info("Removing the unix socket file.")
    try:
        os.unlink(path)
    except OSError:
        pass


class Node:
    def __init__(self, cfg):
        self.cfg = cfg
        self.nworkers = cfg.workers
        self.node_id = None             # from the cluster config file (start_cluster)
        self.cluster = None
        self.ipc_dir = None             # made by private_dir when needed, removed by cleanup
        self.links = None
        self.procs = []
        self.exit_code = 0
        self.stopping = False
        self.cron_timer = None
        self.cron_ticks = 0
        self.memory_ticks = 0
        self.metrics = None             # disque.metrics.endpoint.MetricsEndpoint with metrics-port
        self.serving = False
        self.fe = None
        self.loop = None                # the front-end's event loop, made after the forks
        self.restarts = WorkerRestarts(self)
        self.job_listeners = []         # per worker: direct job links (job_link_listeners)
        self.job_link_tls = None        # their TLS files' directory on a secured bus
        # workers are forks of this process while it has no thread (disque/worker_spawn.py):
        # at start-up, before the bus; with worker-link zmq the links' ZeroMQ comes first,
        # and a node with a cluster secret starts new interpreters, which never hold it
        self.may_fork = cfg.worker_link == "unix" and not secured(cfg)

    def worker_config(self):
        cfg = self.cfg
        return {"loglevel": cfg.loglevel, "logfile": cfg.logfile or "",
                "clock_base_ns": nodeclock.BASE_NS, **aof_worker_config(cfg)}

    def private_dir(self):
        """The node's private directory (mkdtemp: 0700; removed at the stop), made when first
        needed: by the ZeroMQ worker link's endpoint, or the job links' TLS files. A node
        on the default link and an open bus has none (nor a start's tempfile import)."""
        if self.ipc_dir is None:
            import tempfile
            self.ipc_dir = tempfile.mkdtemp(prefix="disque-%d-" % self.cfg.node_port)
        return self.ipc_dir

    def start_workers(self):
        self.links = front_end_links(self.cfg.worker_link, self.nworkers, self.private_dir)
        self.job_listeners = job_link_listeners(self.cfg, self.cluster, self.nworkers)
        if self.job_listeners:
            ports = self.cluster.job_ports = [s.getsockname()[1] for s in self.job_listeners]
            told = self.cluster.announce.job_link_ports(ports)
            keys = self.cluster.keys
            if keys is not None:        # the derived key and certificates, not the secret
                try:
                    from disque.bus.link_keys import write_link_files     # a secured bus only
                    self.job_link_tls = write_link_files(self.private_dir(), keys.link_seeds)
                except ImportError:
                    raise StartupError("direct job links on a secured cluster need the "
                                       "`cryptography` package (pip install cryptography), "
                                       "or set cluster-job-links bus") from None
            log.info("Direct job links on ports %s%s%s", ",".join(map(str, ports)),
                     "" if told == ports else " (announced as %s)" % ",".join(map(str, told)),
                     " (TLS, certificates derived from the cluster secret)"
                     if self.job_link_tls else "")
        elif self.cluster is not None:
            self.cluster.job_ports = []
        if self.may_fork:
            starts = [self.worker_start(k) for k in range(self.nworkers)]
            self.procs = fork_workers(starts, WORKER_START_TIMEOUT)
            for k in range(self.nworkers):
                self.links.after_spawn(k)
        else:
            for k in range(self.nworkers):
                self.procs.append(None)
                self.spawn_worker(k)

    def wait_for_workers(self):
        """Until every worker said it is ready (they start while the bus opens)."""
        links = self.links
        waiting = set(range(self.nworkers))
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while waiting:
            for k, p in enumerate(self.procs):
                if p.poll() is not None:
                    raise StartupError("worker %d exited during startup (code %s)" % (k, p.returncode))
            if time.monotonic() > deadline:
                raise StartupError("workers did not start within %ds" % WORKER_START_TIMEOUT)
            waiting.difference_update(links.wait_ready(100))

    def worker_start(self, k):
        """(WorkerArgs, fds) of worker k's process."""
        link, peers, fds = self.links.worker_args(k)
        node_id = self.fe.node_id if self.fe is not None else self.node_id
        args = WorkerArgs(k, self.nworkers, link, node_id.decode(), self.worker_config(), peers)
        if self.job_listeners:
            args.job_links = self.job_listeners[k].fileno()
            args.job_links_tls = self.job_link_tls
            fds = tuple(fds) + (args.job_links,)
        return args, fds

    def spawn_worker(self, k):
        """Start worker k in a new interpreter: one that died, or every worker of a node
        whose workers are not forked (may_fork)."""
        self.procs[k] = exec_worker(*self.worker_start(k))
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
        if not cfg.node_port:
            self.node_id = os.urandom(20).hex().encode()
            return
        path = cfg.resolve_path(cfg.cluster_config_file)
        try:
            keys = bus_keys_from_config(cfg)
        except SecretError as e:
            raise StartupError(str(e))
        if cfg.cluster_secret_file and not file_is_private(cfg.resolve_path(cfg.cluster_secret_file)):
            log.warning("cluster-secret-file %s may be read by other users: chmod 600 it",
                        cfg.cluster_secret_file)
        try:
            self.cluster = Cluster(cfg.node_port, cfg.bind or ["127.0.0.1"], cfg.cluster_node_timeout,
                                   path, keys=keys, announce=announce_mod.from_config(cfg),
                                   open_bus=False)
        except ConfigFileError as e:
            raise StartupError(str(e))
        except OSError as e:
            raise StartupError("Cluster config file %s: %s" % (path, e.strerror or e))
        self.node_id = self.cluster.myself.id.encode()
        check_bus_port(self.cluster.bind[0], self.cluster.bind[1])
        told = self.cluster.announce
        if (cfg.cluster_announce_ip or cfg.cluster_announce_port or cfg.cluster_announce_bus_port):
            log.info("Announcing this node as %s:%d, bus port %d", told.ip or "(address seen by "
                     "the other nodes)", told.port, told.bus_port)

    def open_bus(self):
        """The bus, a millisecond after the loop started: the clients already waiting
        (a restart's producers) are taken and handed to their workers first, which saves
        them ZeroMQ's import and threads (about 15 ms of a start). The cluster's state
        reached the workers before they serve (ClusterRelay.attach); a command that needs
        the bus sooner opens it (Cluster.transport). The port was free at the start
        (check_bus_port): a bind that fails now stops the node with the reason."""
        if self.cluster is None or self.stopping:
            return
        import zmq                      # after the forks (Node.run), as the bus itself
        try:
            self.cluster.open_bus()
        except zmq.ZMQError as e:
            log.error("Fatal: Creating the cluster bus socket on port %d: %s",
                      self.cfg.bus_port, e)
            self.request_stop(1)

    def cleanup(self):
        self.stop_workers()
        if self.cluster is not None:
            self.cluster.close()
        if self.links is not None:
            self.links.close()
        for s in self.job_listeners:
            s.close()
        if self.cron_timer is not None:
            self.cron_timer.close()
        if self.ipc_dir is not None:
            import shutil               # at the stop only: not a start's import
            shutil.rmtree(self.ipc_dir, ignore_errors=True)

    def run(self):
        cfg = self.cfg
        # SIGTERM / SIGINT before the loop's handlers are in place (the node is starting):
        # noted here and acted on once they are, so the node stops through its cleanup
        # instead of dying with its ipc directory and unix socket left behind
        early = []
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda signum, frame: early.append(signum))
        socks = listen_sockets(cfg)
        tls_socks = tls_listen_sockets(cfg, socks)
        metrics_socks = metrics_listen(cfg, socks + tls_socks)
        try:
            unix_sock = unix_listen_socket(cfg)
        except StartupError:
            for s in socks + tls_socks + metrics_socks:
                s.close()
            raise
        try:
            self.start_cluster()
            self.start_workers()
            self.may_fork = False       # the bus' ZeroMQ threads from here on
            # the front-end's own modules and its loop while the starter imports the
            # workers' (disque/worker_spawn.py), on the other core: neither needs the other's
            from disque.frontend.node import Frontend
            from disque.frontend.pace import CronPace
            loop, loop_name = new_event_loop()
            self.loop = loop            # request_stop stops it; `loop` is its name in here
            fe = Frontend(cfg, self.node_id, self.links, self.nworkers, loop)
            self.wait_for_workers()
            fe.loop_name = loop_name
            fe.executable = os.path.abspath(sys.argv[0])
            fe.shutdown_cb = self.request_stop
            self.fe = fe
            if self.cluster is not None:
                fe.relay.attach(self.cluster)
            fe.restarts = self.restarts
            self.links.on_ready = self.restarts.ready
            self.links.start(loop, fe.deliver, fe.flush_replies, self.worker_lost)
            fe.handover.start()         # connection-affinity (disque/frontend/handover.py)
            # the AOF load (disque/frontend/persistence_phases.py): the sockets already listen, so clients
            # that connect now wait in the backlog and are served once the load is done;
            # a load of LOADING_HOLD_BYTES or more that lasts longer than LOADING_HOLD_S
            # serves them earlier, with -LOADING; a smaller one never does, however busy
            # the machine (the original serves every 1,000 records of a load)
            error = fe.persistence.startup()
            if error:
                raise StartupError(error)
            if metrics_socks:
                from disque.metrics.endpoint import MetricsEndpoint
                self.metrics = MetricsEndpoint(fe)
                https = fe.tls_port.https = metrics_tls_context(cfg)
                self.metrics.start(metrics_socks, https)
                log.info("Metrics and dashboard on %s://%s:%d/", "https" if https else "http",
                         (cfg.bind or ["127.0.0.1"])[0], cfg.metrics_port)
            servers = []
            self.serve_cb = lambda: self.serve(loop, socks, unix_sock, servers, tls_socks)
            if fe.persistence.loading:
                fe.persistence.loading_done_cb = self.serve_cb
                if fe.persistence.loading_total_bytes >= LOADING_HOLD_BYTES:
                    loop.call_later(LOADING_HOLD_S, self.serve_cb)
            else:
                self.serve_cb()

            def arm_signals():
                # from inside run_forever: uvloop lost a signal that came between
                # add_signal_handler and the start of the loop (the node then hung)
                for sig in STOP_SIGNALS:
                    loop.add_signal_handler(sig, self.on_signal, sig)
                if early:
                    self.on_signal(early[0])
            loop.call_soon(arm_signals)
            loop.call_later(BUS_OPEN_DELAY_S, self.open_bus)
            # the cron tick comes from a timerfd, so the loop never holds a timer and
            # waits in epoll with no timeout (see disque/_fast/clock.pyx)
            self.cron_timer = PeriodicTimer(CRON_MS)
            fe.pace = CronPace(fe, self.cron_timer, CRON_MS)
            loop.add_reader(self.cron_timer.fileno(), self.cron)
            loop.run_forever()
            for srv in servers:
                srv.close()
            fe.tls_port.stop()
            if self.metrics is not None:
                self.metrics.close()
        finally:
            if unix_sock is not None:
                unix_sock.close()
                remove_unix_socket(cfg.unixsocket)
            self.cleanup()
            if self.loop is not None:
                self.loop.close()
        log.info("Disque is now ready to exit, bye bye...")
        return self.exit_code

    def serve(self, loop, socks, unix_sock, servers, tls_socks=()):
        """Start serving clients (once: after the AOF load, or when it takes long)."""
        if self.serving or self.stopping:
            return
        self.serving = True
        cfg = self.cfg
        fe = self.fe
        coros = [loop.create_server(fe.new_client, sock=s) for s in socks]
        fe.tls_port.start(list(tls_socks))     # TLS: disque/frontend/tls_port.py
        if unix_sock is not None:
            fe.unix_addr = "%s:0" % cfg.unixsocket      # CLIENT LIST addr, as upstream
            coros.append(loop.create_unix_server(fe.new_client, sock=unix_sock))
        for c in coros:
            if loop.is_running():
                loop.create_task(c).add_done_callback(
                    lambda t: t.cancelled() or t.exception() or servers.append(t.result()))
            else:
                servers.append(loop.run_until_complete(c))
        if fe.persistence.loading:
            log.info("The append only files are still loading: serving clients with -LOADING")
        if unix_sock is not None:
            log.info("The server is now ready to accept connections at %s", cfg.unixsocket)
        if tls_socks:
            log.info("TLS on port %d (TLS runs in the workers)", cfg.tls_port)
        log.info("Disque %s node %s: port %d, %d worker(s) over %s, %s loop. "
                 "Ready to accept connections", "1.0-rc1", self.node_id[:8].decode(),
                 cfg.node_port, self.nworkers, self.links.kind, self.fe.loop_name)

    def on_signal(self, sig):
        log.warning("Received %s scheduling shutdown...", signal.Signals(sig).name)
        self.request_stop()

    def request_stop(self, code=0):
        if not self.stopping:
            self.stopping = True
            self.exit_code = code
            if self.cluster is not None:
                self.cluster.goodbye()  # the others stop counting on this node now
            if self.fe is not None:
                self.fe.handover.stop()
            if self.loop is not None:
                self.loop.stop()

    def worker_lost(self, w):
        if not self.stopping:
            self.restarts.died(w)       # a dead worker is not a dead node

    def cron(self):
        pace = self.fe.pace
        ticks = pace.ticks(self.cron_timer.drain())
        pace.after_cron()       # before this tick's requests to the workers are out
        self.cron_ticks += ticks
        self.memory_ticks += ticks
        self.fe.cron()
        if self.memory_ticks >= MEMORY_TICKS:
            self.memory_ticks = 0
            self.fe.memory.tick()
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
