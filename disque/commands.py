"""The command table (SPEC section 2): one place that says arity, flags and routing.

Arity: N > 0 means exactly N words including the command name; -N means at least N.
Flags follow SPEC 2: w write, r read-only, m deny on OOM, a admin, l allowed while
loading, F fast. `route` says who executes the command (disque/contracts/routes.py);
the dispatch kernel (disque/_fast/dispatch.pyx) builds both command loops' tables from
this one, after rename-command. `front` names the front-end handler as "part.method" (a
part of `disque.frontend.node.Frontend`, listed in its PARTS; None when the Cython core
forwards the command by route alone),
`worker` the worker method (`disque.workers.shard.Shard`, or "part.method" of one of its
parts; None for node-level commands). Both dispatch tables are built from these names,
so the two halves of a command are found from one line here.
"""
from typing import NamedTuple

from disque.contracts.routes import ALL, GETJOB, ID, IDS, LOCAL, QUEUE, WORKER_ROUTES


class Command(NamedTuple):      # immutable; no dataclasses to import at start
    name: str
    arity: int
    flags: str
    route: int              # disque/contracts/routes.py
    front: str | None = None
    worker: str | None = None

    def arity_ok(self, argc: int) -> bool:
        return argc == self.arity if self.arity > 0 else argc >= -self.arity

    @property
    def flag_words(self):
        # upstream's order (COMMAND): write readonly denyoom admin loading fast
        return [word for letter, word in (("w", "write"), ("r", "readonly"), ("m", "denyoom"),
                                          ("a", "admin"), ("l", "loading"), ("F", "fast"))
                if letter in self.flags]


COMMANDS = {c.name: c for c in [
    Command("auth", 2, "rlF", LOCAL, "auth.cmd_auth"),
    Command("ping", -1, "rF", LOCAL, "node_commands.cmd_ping"),
    # not in upstream Disque: redis-cli --pipe ends its input with ECHO to know it is done
    Command("echo", 2, "rF", LOCAL, "node_commands.cmd_echo"),
    Command("info", -1, "rl", LOCAL, "node_commands.cmd_info"),
    Command("shutdown", -1, "arl", LOCAL, "node_commands.cmd_shutdown"),
    Command("monitor", 1, "ar", LOCAL, "monitoring.cmd_monitor"),
    Command("debug", -2, "a", LOCAL, "node_commands.cmd_debug"),
    Command("config", -2, "ar", LOCAL, "node_commands.cmd_config"),
    Command("cluster", -2, "ar", LOCAL, "relay.cmd_cluster"),
    Command("client", -2, "ar", LOCAL, "connections.cmd_client"),
    Command("slowlog", -2, "r", LOCAL, "monitoring.cmd_slowlog"),
    Command("time", 1, "rF", LOCAL, "node_commands.cmd_time"),
    Command("command", 0, "rl", LOCAL, "command_info.cmd_command"),
    Command("latency", -2, "arl", LOCAL, "monitoring.cmd_latency"),
    # -1: HELLO <protover> [AUTH u p] [SETNAME n]; plain HELLO is Disque's (cmd_hello)
    Command("hello", -1, "rF", LOCAL, "auth.cmd_hello_handshake"),
    Command("addjob", -4, "wmF", QUEUE, worker="cmd_addjob"),
    Command("getjob", -2, "wF", GETJOB, "getjobs.getjob", "getjob"),
    Command("ackjob", -1, "wF", IDS, "routing.route_ids", "cmd_ackjob"),
    Command("fastack", -1, "wF", IDS, "routing.route_ids", "cmd_fastack"),
    Command("deljob", -1, "wF", IDS, "routing.route_ids", "cmd_deljob"),
    Command("show", 2, "rF", ID, worker="cmd_show"),
    Command("loadjob", 2, "w", LOCAL, "node_commands.cmd_loadjob"),
    Command("bgrewriteaof", 1, "ar", LOCAL, "persistence.cmd_bgrewriteaof"),
    # a `front` handler on a `queue` command is its CLUSTER form (QLEN q CLUSTER): one word
    # more than the arity sends it to the front-end, which asks every node (docs/commands.md)
    Command("qlen", -2, "rF", QUEUE, "cluster_queries.cmd_qlen", "queue_commands.cmd_qlen"),
    Command("qpeek", -3, "r", QUEUE, "cluster_queries.cmd_qpeek", "queue_commands.cmd_qpeek"),
    Command("qstat", -2, "rF", QUEUE, "cluster_queries.cmd_qstat", "queue_commands.cmd_qstat"),
    Command("qscan", -1, "r", ALL, "scans.all_workers_command", "scan"),
    Command("jscan", -1, "r", ALL, "scans.all_workers_command", "scan"),
    Command("enqueue", -1, "mwF", IDS, "routing.route_ids", "cmd_enqueue"),
    Command("nack", -1, "mwF", IDS, "routing.route_ids", "cmd_nack"),
    Command("dequeue", -1, "wF", IDS, "routing.route_ids", "cmd_dequeue"),
    Command("working", 2, "wF", ID, worker="cmd_working"),
    Command("pause", -3, "rF", QUEUE, worker="queue_commands.cmd_pause"),
]}

# The byte-string view used on the hot path: lowercased name -> Command.
BY_BYTES = {name.encode(): cmd for name, cmd in COMMANDS.items()}


def resolve(owner, handler):
    """The bound method a handler name means: "method" on `owner`, or "part.method" on
    the part `owner.part`. Resolved once, when a dispatch table is built."""
    for name in handler.split("."):
        owner = getattr(owner, name)
    return owner


def front_handlers(frontend):
    """The front-end's dispatch table for node-level commands: name -> bound method."""
    return {name: resolve(frontend, cmd.front) for name, cmd in BY_BYTES.items()
            if cmd.route == LOCAL or cmd.route == QUEUE and cmd.front is not None}


def worker_handlers(shard):
    """A worker's dispatch table for the commands it executes whole: name -> bound method."""
    return {name: resolve(shard, cmd.worker) for name, cmd in BY_BYTES.items()
            if cmd.route in WORKER_ROUTES}


def command_table(renames=None):
    """The dispatch table after `rename-command` (applied in order, as upstream does at
    config load): {name as typed, lowercase bytes: Command}. A command renamed to "" is
    gone; the new name of a renamed command is its only name. Raises ValueError with
    upstream's message for an unknown command or a name already taken."""
    table = dict(BY_BYTES)
    for old, new in (renames or {}).items():
        cmd = table.pop(old.lower().encode(), None)
        if cmd is None:
            raise ValueError("No such command in rename-command")
        if new:
            key = new.lower().encode()
            if key in table:
                raise ValueError("Target command name already exists")
            if key != b"quit":          # QUIT is matched first: such a name is unreachable
                table[key] = cmd
    return table
