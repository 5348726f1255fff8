"""The command table (SPEC section 2): one place that says arity, flags and routing.

Arity: N > 0 means exactly N words including the command name; -N means at least N.
Flags follow SPEC 2: w write, r read-only, m deny on OOM, a admin, l allowed while
loading, F fast. `route` says who executes the command:
  local  - the front-end answers it (node-level commands)
  queue  - the worker owning the slot of argv[1] (a queue name)
  id     - the worker owning the slot carried by the job ID in argv[1]
  ids    - every job ID in argv[1:] is sent to its worker; integer replies are summed
  getjob - GETJOB's own routing and blocking logic
  all    - every worker (replies merged by the front-end)
`front` names the front-end handler as "part.method" (a part of `disque.frontend.Frontend`,
listed in its PARTS; None when the Cython core forwards the command by route alone),
`worker` the worker method (`disque.workers.shard.Shard`, or "part.method" of one of its
parts; None for node-level commands). Both dispatch tables are built from these names,
so the two halves of a command are found from one line here.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    arity: int
    flags: str
    route: str
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
    Command("auth", 2, "rlF", "local", "auth.cmd_auth"),
    Command("ping", -1, "rF", "local", "node_commands.cmd_ping"),
    # not in upstream Disque: redis-cli --pipe ends its input with ECHO to know it is done
    Command("echo", 2, "rF", "local", "node_commands.cmd_echo"),
    Command("info", -1, "rl", "local", "node_commands.cmd_info"),
    Command("shutdown", -1, "arl", "local", "node_commands.cmd_shutdown"),
    Command("monitor", 1, "ar", "local", "monitoring.cmd_monitor"),
    Command("debug", -2, "a", "local", "node_commands.cmd_debug"),
    Command("config", -2, "ar", "local", "node_commands.cmd_config"),
    Command("cluster", -2, "ar", "local", "relay.cmd_cluster"),
    Command("client", -2, "ar", "local", "connections.cmd_client"),
    Command("slowlog", -2, "r", "local", "monitoring.cmd_slowlog"),
    Command("time", 1, "rF", "local", "node_commands.cmd_time"),
    Command("command", 0, "rl", "local", "command_info.cmd_command"),
    Command("latency", -2, "arl", "local", "monitoring.cmd_latency"),
    # -1: HELLO <protover> [AUTH u p] [SETNAME n]; plain HELLO is Disque's (cmd_hello)
    Command("hello", -1, "rF", "local", "auth.cmd_hello_handshake"),
    Command("addjob", -4, "wmF", "queue", worker="cmd_addjob"),
    Command("getjob", -2, "wF", "getjob", "getjobs.getjob", "getjob"),
    Command("ackjob", -1, "wF", "ids", "routing.route_ids", "cmd_ackjob"),
    Command("fastack", -1, "wF", "ids", "routing.route_ids", "cmd_fastack"),
    Command("deljob", -1, "wF", "ids", "routing.route_ids", "cmd_deljob"),
    Command("show", 2, "rF", "id", worker="cmd_show"),
    Command("loadjob", 2, "w", "local", "node_commands.cmd_loadjob"),
    Command("bgrewriteaof", 1, "ar", "local", "persistence.cmd_bgrewriteaof"),
    Command("qlen", 2, "rF", "queue", worker="queue_commands.cmd_qlen"),
    Command("qpeek", 3, "r", "queue", worker="queue_commands.cmd_qpeek"),
    Command("qstat", 2, "rF", "queue", worker="queue_commands.cmd_qstat"),
    Command("qscan", -1, "r", "all", "scans.all_workers_command", "scan"),
    Command("jscan", -1, "r", "all", "scans.all_workers_command", "scan"),
    Command("enqueue", -1, "mwF", "ids", "routing.route_ids", "cmd_enqueue"),
    Command("nack", -1, "mwF", "ids", "routing.route_ids", "cmd_nack"),
    Command("dequeue", -1, "wF", "ids", "routing.route_ids", "cmd_dequeue"),
    Command("working", 2, "wF", "id", worker="cmd_working"),
    Command("pause", -3, "rF", "queue", worker="queue_commands.cmd_pause"),
]}

# routes whose commands a worker executes whole, through its `worker` handler
WORKER_ROUTES = ("queue", "id", "ids")

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
            if cmd.route == "local"}


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
