"""COMMAND (COUNT, INFO, GETKEYS): the command table as clients see it, after rename-command."""
from disque._fast import resp

NULL_BULK = b"$-1\r\n"
COMMAND_ERROR = b"-ERR Unknown subcommand or wrong number of arguments.\r\n"


def command_entry(c, resp3):
    flags = [f.encode() for f in c.flag_words]
    head = b"*7\r\n" if resp3 else b"*6\r\n"
    out = (head + resp.bulk(c.name.encode()) + b":%d\r\n" % c.arity
           + (b"~%d\r\n" if resp3 else b"*%d\r\n") % len(flags)
           + b"".join(b"+%s\r\n" % f for f in flags) + b":0\r\n:0\r\n:0\r\n")
    if resp3:
        out += b"*0\r\n"        # ACL categories: redis-py's RESP3 parser expects them
    return out


class CommandInfo:
    """Needs from the node (`fe`): table (the dispatch table, rename-command applied)."""

    def __init__(self, fe):
        self.fe = fe

    def live_commands(self):
        """Commands reachable under some name (rename-command removes or renames)."""
        seen = {}
        for entry in self.fe.table.values():
            seen.setdefault(entry.command.name, entry.command)
        return list(seen.values())

    def cmd_command(self, client, argv):
        table = self.fe.table
        resp3 = client.resp3
        argc = len(argv)
        if argc == 1:
            items = [command_entry(c, resp3) for c in self.live_commands()]
            client.reply(b"*%d\r\n" % len(items) + b"".join(items))
            return
        sub = argv[1].lower()
        if sub == b"count" and argc == 2:
            client.reply(b":%d\r\n" % len(self.live_commands()))
        elif sub == b"info":
            items = []
            for n in argv[2:]:
                entry = table.get(n.lower())
                items.append(command_entry(entry.command, resp3) if entry else NULL_BULK)
            client.reply(b"*%d\r\n" % len(items) + b"".join(items))
        elif sub == b"getkeys" and argc >= 3:
            entry = table.get(argv[2].lower())
            if entry is None:
                client.reply(b"-ERR Invalid command specified\r\n")
            elif not entry.command.arity_ok(argc - 2):
                client.reply(b"-ERR Invalid number of arguments specified for command\r\n")
            else:
                client.reply(b"*0\r\n")         # no command has keys
        else:
            client.reply(COMMAND_ERROR)
