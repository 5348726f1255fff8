"""The front-end's share of dispatch (SPEC 1.3): commands the front-end answers itself
(route `local` in disque/commands.py), and the two errors the Cython core leaves to Python.

The table maps each command name to the bound method of the part that handles it, built
once from disque/commands.py (`front_handlers`), so dispatching costs one dict lookup.
"""
import time

from disque import commands
from disque.info_snapshot import NEUTRAL_LOCAL
from disque.replies import arity_error, one_line


class Dispatch:
    """Needs from the node (`fe`): info_snapshot, `fe.stats.local_usec`, and the parts
    named by the `front` handlers of disque/commands.py. Offers: local_command,
    unknown_command and arity_error (hooks of the Cython core), local_commands (a count:
    commands_processed minus this is what was sent to workers)."""

    def __init__(self, fe):
        self.fe = fe
        self.local_commands = 0
        self.local = commands.front_handlers(fe)   # command name (bytes) -> bound handler

    def local_command(self, client, name, argv):
        fe = self.fe
        self.local_commands += 1
        if name not in NEUTRAL_LOCAL:
            fe.info_snapshot.invalidate()
        handler = self.local.get(name)
        if handler is None:
            client.reply(b"-ERR %s is not available in this version\r\n" % name.upper())
        else:
            t0 = time.perf_counter_ns()
            handler(client, argv)
            fe.stats.local_usec[name] += (time.perf_counter_ns() - t0) // 1000

    def unknown_command(self, client, argv):
        client.reply(b"-ERR unknown command '%s'\r\n" % one_line(argv[0]))

    def arity_error(self, client, cmd):
        client.reply(arity_error(cmd.name))
