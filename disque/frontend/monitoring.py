"""Watching the commands: MONITOR (SPEC 1.4), SLOWLOG and LATENCY (SPEC 4.5).

Timing (SLOWLOG, and the `usec` of front-end commands in INFO commandstats): the front-end
measures each command from its dispatch to the moment its reply is ready. For a command a
worker executes that includes the trip to the worker and back (tens of microseconds, more
under load), which is what the client waits for; a blocking GETJOB is timed only for its
front-end part, so the time it spends blocked is never logged (upstream does the same).
Commands executed by workers report their pure execution time in INFO commandstats.
"""
import collections
import re
import time

from disque import replies
from disque._fast import resp
from disque.replies import one_line

SLOWLOG_ERROR = b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"
SLOWLOG_MAX_ARGC = 32
SLOWLOG_MAX_STRING = 128

# MONITOR quoting (upstream sdscatrepr): printable ASCII as is except \ and ", C escapes
# for \n \r \t \a \b, \xHH for every other byte
_REPR = {}
for _b in range(256):
    if _b in (0x5c, 0x22):
        _REPR[_b] = b"\\" + bytes([_b])
    elif 0x20 <= _b <= 0x7e:
        _REPR[_b] = bytes([_b])
    else:
        _REPR[_b] = b"\\x%02x" % _b
_REPR.update({0x0a: b"\\n", 0x0d: b"\\r", 0x09: b"\\t", 0x07: b"\\a", 0x08: b"\\b"})
_NEEDS_ESCAPE = re.compile(rb'[^\x20\x21\x23-\x5b\x5d-\x7e]')


def repr_arg(arg):
    """One argument as MONITOR shows it: double-quoted, C-escaped."""
    if not _NEEDS_ESCAPE.search(arg):
        return b'"' + arg + b'"'
    return b'"' + b"".join([_REPR[c] for c in arg]) + b'"'


class Monitoring:
    """Needs from the node (`fe`): cfg, unix_addr, nmonitors (kept here) and
    slowlog_slower_than (set by apply_slowlog_config). Offers: feed_monitors and
    slowlog_push (hooks of the Cython core), client_gone, the MONITOR / SLOWLOG / LATENCY
    commands."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.monitors = []
        self.slowlog = collections.deque()
        self.slowlog_next_id = 0
        self.slowlog_max_len = 128

    def client_gone(self, client):
        if client.monitor:
            client.monitor = False
            try:
                self.monitors.remove(client)
            except ValueError:
                pass
            self.fe.nmonitors = len(self.monitors)

    def apply_slowlog_config(self, name):
        if name == "slowlog-log-slower-than":
            self.fe.slowlog_slower_than = self.cfg.slowlog_log_slower_than
        else:
            self.slowlog_max_len = self.cfg.slowlog_max_len

    # ---- MONITOR (SPEC 1.4) ----------------------------------------------------------------

    def cmd_monitor(self, client, argv):
        if client.monitor:
            return
        client.monitor = True
        self.monitors.append(client)
        self.fe.nmonitors = len(self.monitors)
        self.fe.handover.recall_all()   # the feed needs every command through the front-end
        client.reply(replies.OK)

    def feed_monitors(self, client, argv):
        """Called by the core before a command executes, only while monitors exist.
        Admin commands and AUTH are not shown (upstream skips admin commands; AUTH and
        HELLO ... AUTH would show the password)."""
        if argv[0].lower() == b"hello" and any(a.lower() == b"auth" for a in argv[2:]):
            return
        t = time.time()
        sec = int(t)
        addr = client.addr
        if addr == self.fe.unix_addr:
            addr = "unix:" + self.cfg.unixsocket        # upstream's form for these clients
        line = b"+%d.%06d [%s] %s\r\n" % (sec, int((t - sec) * 1e6), addr.encode(),
                                          b" ".join([repr_arg(a) for a in argv]))
        for m in self.monitors:
            if not m.closing and not m.closed:
                m.reply(line)

    # ---- SLOWLOG ---------------------------------------------------------------------------

    def slowlog_push(self, client, argv, duration_us):
        """Called by the core for a command at least slowlog-log-slower-than us long."""
        argc = len(argv)
        args = []
        for j, a in enumerate(argv[:SLOWLOG_MAX_ARGC]):
            if argc > SLOWLOG_MAX_ARGC and j == SLOWLOG_MAX_ARGC - 1:
                args.append(b"... (%d more arguments)" % (argc - SLOWLOG_MAX_ARGC + 1))
            elif len(a) > SLOWLOG_MAX_STRING:
                args.append(a[:SLOWLOG_MAX_STRING] + b"... (%d more bytes)"
                            % (len(a) - SLOWLOG_MAX_STRING))
            else:
                args.append(a)
        self.slowlog.appendleft((self.slowlog_next_id, int(time.time()), duration_us, args))
        self.slowlog_next_id += 1
        while len(self.slowlog) > max(self.slowlog_max_len, 0):
            self.slowlog.pop()

    def cmd_slowlog(self, client, argv):
        sub = argv[1].lower()
        argc = len(argv)
        if sub == b"reset" and argc == 2:
            self.slowlog.clear()
            client.reply(replies.OK)
        elif sub == b"len" and argc == 2:
            client.reply(b":%d\r\n" % len(self.slowlog))
        elif sub == b"get" and argc in (2, 3):
            count = 10
            if argc == 3:
                count = resp.parse_int(argv[2])
                if count is None:
                    client.reply(replies.NOT_INTEGER)
                    return
            entries = list(self.slowlog) if count < 0 else list(self.slowlog)[:count]
            out = [b"*%d\r\n" % len(entries)]
            for eid, when, duration, args in entries:
                out.append(b"*4\r\n:%d\r\n:%d\r\n:%d\r\n" % (eid, when, duration))
                out.append(resp.bulk_array(args))
            client.reply(b"".join(out))
        else:
            client.reply(SLOWLOG_ERROR)

    # ---- LATENCY ---------------------------------------------------------------------------

    def cmd_latency(self, client, argv):
        """The latency monitor records no events in this implementation: every subcommand
        answers as upstream does with nothing recorded."""
        sub = argv[1].lower()
        argc = len(argv)
        if sub in (b"history", b"graph") and argc == 3:
            if sub == b"history":
                client.reply(b"*0\r\n")
            else:
                client.reply(b"-ERR No samples available for event '%s'\r\n" % one_line(argv[2]))
        elif sub == b"latest" and argc == 2:
            client.reply(b"*0\r\n")
        elif sub == b"doctor" and argc == 2:
            if self.cfg.latency_monitor_threshold == 0:
                text = (b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in "
                        b"this Disque instance. You may use \"CONFIG SET latency-monitor-threshold "
                        b"<milliseconds>.\" in order to enable it.\n")
            else:
                text = (b"Dave, no latency spike was observed during the lifetime of this "
                        b"Disque instance, not in the slightest bit. I honestly think you "
                        b"ought to sleep better.\n")
            client.reply(resp.bulk(text))
        elif sub == b"reset" and argc >= 2:
            client.reply(b":0\r\n")
        else:
            client.reply(replies.SYNTAX_ERROR)
