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
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    arity: int
    flags: str
    route: str

    def arity_ok(self, argc: int) -> bool:
        return argc == self.arity if self.arity > 0 else argc >= -self.arity

    @property
    def flag_words(self):
        # upstream's order (COMMAND): write readonly denyoom admin loading fast
        return [word for letter, word in (("w", "write"), ("r", "readonly"), ("m", "denyoom"),
                                          ("a", "admin"), ("l", "loading"), ("F", "fast"))
                if letter in self.flags]


COMMANDS = {c.name: c for c in [
    Command("auth", 2, "rlF", "local"),
    Command("ping", -1, "rF", "local"),
    # not in upstream Disque: redis-cli --pipe ends its input with ECHO to know it is done
    Command("echo", 2, "rF", "local"),
    Command("info", -1, "rl", "local"),
    Command("shutdown", -1, "arl", "local"),
    Command("monitor", 1, "ar", "local"),
    Command("debug", -2, "a", "local"),
    Command("config", -2, "ar", "local"),
    Command("cluster", -2, "ar", "local"),
    Command("client", -2, "ar", "local"),
    Command("slowlog", -2, "r", "local"),
    Command("time", 1, "rF", "local"),
    Command("command", 0, "rl", "local"),
    Command("latency", -2, "arl", "local"),
    Command("hello", -1, "rF", "local"),     # -1: HELLO <protover> [AUTH u p] [SETNAME n]
    Command("addjob", -4, "wmF", "queue"),
    Command("getjob", -2, "wF", "getjob"),
    Command("ackjob", -1, "wF", "ids"),
    Command("fastack", -1, "wF", "ids"),
    Command("deljob", -1, "wF", "ids"),
    Command("show", 2, "rF", "id"),
    Command("loadjob", 2, "w", "local"),
    Command("bgrewriteaof", 1, "ar", "local"),
    Command("qlen", 2, "rF", "queue"),
    Command("qpeek", 3, "r", "queue"),
    Command("qstat", 2, "rF", "queue"),
    Command("qscan", -1, "r", "all"),
    Command("jscan", -1, "r", "all"),
    Command("enqueue", -1, "mwF", "ids"),
    Command("nack", -1, "mwF", "ids"),
    Command("dequeue", -1, "wF", "ids"),
    Command("working", 2, "wF", "id"),
    Command("pause", -3, "rF", "queue"),
]}

# The byte-string view used on the hot path: lowercased name -> Command.
BY_BYTES = {name.encode(): cmd for name, cmd in COMMANDS.items()}


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
