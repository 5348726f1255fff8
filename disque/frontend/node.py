"""The front-end process: RESP clients in, per-worker batches out, replies back in order.

`Frontend` is the composition root. The per-command hot path is the Cython `Core`
(disque/_fast/frontcore.pyx): parsing, the SPEC 1.3 checks, routing by slot, one batch
per worker per event-loop tick, reply slots in request order. Everything else is a part
that owns its state (PARTS below, one file each); the core reaches the parts through the
hooks declared in frontcore.pxd, which are bound here once.

The path of one ADDJOB: Client.data_received -> Client.process_input -> Core.dispatch ->
Core.run (arity, auth, gate, monitors) -> Core.route (route `queue`: the worker owning the
queue's slot) -> Core.forward (a reply slot, the request appended to that worker's batch)
-> the worker's Shard.cmd_addjob -> Core.deliver fills the slot -> Client.flush writes.
On a node of a cluster the `queue` route of ADDJOB goes to Getjobs.addjob_clustered, which
keeps the client waiting until the worker has its copies.

The path of one GETJOB: Core.route (route `getjob`) -> Getjobs.getjob: one worker, or a
MultiGet over several, then as above.
"""
import logging
import os
import time

from disque import commands
from disque import nodeclock
from disque._fast.frontcore import Client, Core
from disque.contracts import worker_link as link_msg
from disque.frontend.handover import Handover
from disque.frontend.auth import Auth
from disque.frontend.cluster_queries import ClusterQueries
from disque.frontend.cluster_relay import ClusterRelay
from disque.frontend.command_info import CommandInfo
from disque.frontend.connections import Connections
from disque.frontend.dispatch import Dispatch
from disque.frontend.getjob import Getjobs
from disque.frontend.memory import Memory
from disque.frontend.monitoring import Monitoring
from disque.frontend.node_commands import NodeCommands
from disque.frontend.node_queries import NodeQueries
from disque.frontend.persistence_phases import PersistencePhases
from disque.frontend.routing import Routing
from disque.frontend.scan import Scans
from disque.frontend.stats import Stats
from disque.frontend.tls_port import TlsPort
from disque.info_snapshot import InfoSnapshot

log = logging.getLogger("disque.frontend")

# attribute of Frontend -> the part's class (tests resolve "part.method" handler names here)
PARTS = {
    "connections": Connections,
    "auth": Auth,
    "monitoring": Monitoring,
    "command_info": CommandInfo,
    "stats": Stats,
    "memory": Memory,
    "getjobs": Getjobs,
    "routing": Routing,
    "scans": Scans,
    "relay": ClusterRelay,
    "queries": NodeQueries,
    "cluster_queries": ClusterQueries,
    "persistence": PersistencePhases,
    "node_commands": NodeCommands,
    "local_dispatch": Dispatch,
    "handover": Handover,
}

# the hooks the Cython core calls (declared in frontcore.pxd): hook -> "part.method"
CORE_HOOKS = {
    "client_connected": "connections.connected",
    "client_gone": "connections.gone",
    "client_overflow": "connections.overflow",
    "check_output_buffer": "connections.check_output_buffer",
    "command_gate": "persistence.command_gate",
    "unknown_command": "local_dispatch.unknown_command",
    "arity_error": "local_dispatch.arity_error",
    "local_command": "local_dispatch.local_command",
    "feed_monitors": "monitoring.feed_monitors",
    "slowlog_push": "monitoring.slowlog_push",
    "getjob": "getjobs.getjob",
    "addjob_clustered": "getjobs.addjob_clustered",
    "route_ids": "routing.route_ids",
    "qlen_spread": "routing.qlen_spread",
    "queue_elsewhere": "routing.queue_elsewhere",
    "all_workers_command": "scans.all_workers_command",
    "bus_from_worker": "relay.bus_from_worker",
    "client_returned": "handover.returned",
    "hand_over": "handover.hand_over",
    "worker_report": "handover.worker_report",
}


class Frontend(Core):
    """The node's front-end: the core plus its parts (see the module doc)."""

    def __init__(self, cfg, node_id, links, nworkers, loop):
        # rename-command was validated at startup (server.main)
        super().__init__(links, nworkers, loop, commands.command_table(cfg.rename_commands))
        self.cfg = cfg
        self.node_id = node_id
        self.maxclients = getattr(cfg, "maxclients", 10000)
        self.eager_batch = int(os.environ.get("DISQUE_EAGER_BATCH", "16"))
        self.started = time.time()
        self.shutdown_cb = None
        self.info_snapshot = InfoSnapshot()
        self.unix_addr = None            # "<unixsocket>:0" once that socket listens (server.py)
        self.controls_sent = {}          # reqid -> (name, arg) until answered (send_control)
        self.restarts = None             # disque.worker_restart.WorkerRestarts (server.py)
        self.cron_ticks = 0
        # the parts; each gets the node (and the configuration when it reads directives)
        self.handover = Handover(self, cfg)     # first: the figures of the others count it
        self.connections = Connections(self, cfg)
        self.auth = Auth(self, cfg)
        self.monitoring = Monitoring(self, cfg)
        self.command_info = CommandInfo(self)
        self.stats = Stats(self, cfg)
        self.memory = Memory(self)
        self.getjobs = Getjobs(self)
        self.routing = Routing(self)
        self.scans = Scans(self)
        self.relay = ClusterRelay(self)
        self.pace = None                # the cron's pace, set by the server (frontend/pace.py)
        self.queries = NodeQueries(self, cfg)
        self.cluster_queries = ClusterQueries(self, cfg)
        self.persistence = PersistencePhases(self, cfg)
        self.node_commands = NodeCommands(self, cfg)
        self.local_dispatch = Dispatch(self)
        self.tls_port = TlsPort(self, cfg)
        self.connections.on_gone += [self.monitoring.client_gone, self.client_stopped_waiting]
        for hook, handler in CORE_HOOKS.items():
            setattr(self, hook, commands.resolve(self, handler))
        self.node_commands.start()

    def new_client(self):
        if self.pace is not None:
            self.pace.wake()            # the cron back at its fast pace (frontend/pace.py)
        return Client(self)

    def client_stopped_waiting(self, client):
        if client.waiting is not None:
            self.getjobs.cancel_wait(client)

    # ---- requests to every worker ---------------------------------------------------------

    def control_all(self, name, arg, done):
        """Ask every worker; `done(list_of_values)` runs when all answered."""
        results = [None] * self.nworkers
        left = [self.nworkers]

        def make(w):
            def got(rep):
                results[w] = rep[1]
                left[0] -= 1
                if left[0] == 0:
                    done(results)
            return got

        for w in range(self.nworkers):
            reqid = self.new_reqid(w)
            self.pending[reqid] = make(w)
            self.send_control(w, reqid, name, arg)

    def send_control(self, w, reqid, name, arg):
        """A control whose answer someone waits for: kept until answered, so it can be sent
        again to the next process of a worker that dies meanwhile (disque.worker_restart)."""
        self.controls_sent[reqid] = (name, arg)
        self.send(w, link_msg.Control.encode(reqid, name, arg))

    def prune_controls(self):
        pending = self.pending
        self.controls_sent = {r: c for r, c in self.controls_sent.items() if r in pending}

    # ---- the cron ---------------------------------------------------------------------------

    def cron(self):
        """Every CRON_MS (timerfd tick): client housekeeping, metrics, the cluster, the
        deadlines of cross-worker GETJOBs."""
        self.now = nodeclock.now()      # idle clients: a wall-clock step must not drop them
        mono = time.monotonic()
        self.stats.cron(mono)
        self.connections.cron(mono)
        self.cron_ticks += 1
        if self.relay.cluster is not None and self.cron_ticks % 2 == 0:
            self.relay.cron()           # every 100 ms (SPEC 10.5)
        if self.cron_ticks % 20 == 0 and self.controls_sent:
            self.prune_controls()
        self.getjobs.expire()
