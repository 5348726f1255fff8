"""Front-end administration (SPEC 1.3, 1.4, 4.3, 4.5, 13, 14): AUTH and `requirepass`, the
Redis 6 `HELLO <protover>` handshake (RESP3), CLIENT, MONITOR, SLOWLOG, LATENCY, COMMAND,
the front-end side effects of CONFIG SET, and the client cron (idle `timeout`,
`client-output-buffer-limit`, the instantaneous metrics of INFO).

`AdminMixin` is mixed into `disque.frontend.Frontend`; the per-command checks it relies on
live in the Cython core (`disque/_fast/frontcore.pyx`) as flags tested once per command.

Timing (SLOWLOG, and the `usec` of front-end commands in INFO commandstats): the front-end
measures each command from its dispatch to the moment its reply is ready. For a command a
worker executes that includes the trip to the worker and back (tens of microseconds, more
under load), which is what the client waits for; a blocking GETJOB is timed only for its
front-end part, so the time it spends blocked is never logged (upstream does the same).
Commands executed by workers report their pure execution time in INFO commandstats.
"""
import collections
import hmac
import logging
import re
import resource
import time

from disque import replies as R
from disque import VERSION
from disque import log as dlog
from disque._fast import resp
from disque.aof_front import AOF_DIRECTIVES

log = logging.getLogger("disque.frontend")

OK = R.OK
NULL_BULK = b"$-1\r\n"
SYNTAX_ERROR = R.SYNTAX_ERROR
NOT_INTEGER = R.NOT_INTEGER
CLIENT_SYNTAX = (b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                 b"SETNAME connection-name)\r\n")
BAD_CLIENT_NAME = b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
SLOWLOG_ERROR = b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"
COMMAND_ERROR = b"-ERR Unknown subcommand or wrong number of arguments.\r\n"
NO_PASSWORD = b"-ERR Client sent AUTH, but no password is set\r\n"
BAD_PASSWORD = b"-ERR invalid password\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
NOPROTO = b"-NOPROTO unsupported protocol version\r\n"
HELLO_NOAUTH = (b"-NOAUTH HELLO must be called with the client already authenticated, otherwise "
                b"the HELLO AUTH <user> <pass> option can be used to authenticate the client and "
                b"select the RESP protocol version at the same time\r\n")
CLIENT_TYPES = (b"normal", b"slave", b"replica", b"pubsub", b"master")

RESERVED_FDS = 32             # upstream's CONFIG_MIN_RESERVED_FDS: listeners, links, logs
SLOWLOG_MAX_ARGC = 32
SLOWLOG_MAX_STRING = 128
METRIC_SAMPLES = 16
METRIC_PERIOD = 0.1            # seconds between instantaneous-metric samples (SPEC 14)

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


def one_line(text):
    """Client input echoed in an error: CR/LF become spaces, as upstream's
    addReplyErrorFormat does, so a client cannot break (or forge) the reply stream."""
    return text.replace(b"\r", b" ").replace(b"\n", b" ")


def fd_limited_clients(wanted):
    """How many clients the open-files limit allows, after trying to raise it to
    `wanted` + 32 (upstream's adjustOpenFilesLimit)."""
    need = wanted + RESERVED_FDS
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    except (OSError, ValueError):
        pass
    return wanted if soft >= need else max(1, soft - RESERVED_FDS)


def valid_name(name):
    """CLIENT SETNAME / SETINFO charset: '!' .. '~' only."""
    return all(33 <= c <= 126 for c in name)


class AdminMixin:
    """Admin commands and client housekeeping of the front-end (see the module doc)."""

    # ---- state and configuration ---------------------------------------------------------

    def admin_init(self):
        self.monitors = []
        self.slowlog = collections.deque()
        self.slowlog_next_id = 0
        self.slowlog_max_len = 128
        self.requirepass = None
        self.obuf_limits = (0, 0, 0)
        self.obuf_soft_clients = set()
        self.pause_until = 0.0
        self.pause_handle = None
        self.local_usec = collections.Counter()    # front-end commands, INFO commandstats
        self.worker_usec_base = {}                 # workers' usec at the last CONFIG RESETSTAT
        self.reset_metrics()
        self.next_timeout_check = 0.0
        self.started_up = False
        self.maxclients = self.cfg.maxclients
        for name in ("requirepass", "maxclients", "slowlog-log-slower-than", "slowlog-max-len",
                     "client-output-buffer-limit"):
            self.config_changed(name)
        self.started_up = True

    def config_changed(self, name):
        """Apply the front-end side effect of a directive (startup and CONFIG SET).
        Returns an error reply when the new value cannot be applied (it is then undone)."""
        cfg = self.cfg
        if name == "requirepass":
            pw = cfg.requirepass
            self.requirepass = pw.encode("utf-8", "surrogateescape") if pw else None
            self.auth_required = self.requirepass is not None
        elif name == "maxclients":
            wanted = cfg.maxclients
            possible = fd_limited_clients(wanted)
            if possible < wanted:
                if self.started_up:
                    cfg.maxclients = self.maxclients
                    return (b"-ERR The operating system is not able to handle the specified "
                            b"number of clients, try with %d\r\n" % possible)
                log.warning("You requested maxclients of %d requiring at least %d max file "
                            "descriptors. Server can't set maximum open files to %d: "
                            "maxclients has been reduced to %d.", wanted, wanted + RESERVED_FDS,
                            wanted + RESERVED_FDS, possible)
                cfg.maxclients = possible
            self.maxclients = cfg.maxclients
        elif name == "slowlog-log-slower-than":
            self.slowlog_slower_than = cfg.slowlog_log_slower_than
        elif name == "slowlog-max-len":
            self.slowlog_max_len = cfg.slowlog_max_len
        elif name == "client-output-buffer-limit":
            limits = tuple(cfg.client_output_buffer_limit)
            self.obuf_limits = limits
            self.obuf_limited = bool(limits[0] or limits[1])
            if not self.obuf_limited:
                for c in self.obuf_soft_clients:
                    c.obuf_soft_since = 0.0
                self.obuf_soft_clients.clear()
        elif name == "maxmemory":
            if cfg.maxmemory and cfg.maxmemory < self.mem_used:
                log.warning("WARNING: the new maxmemory value set via CONFIG SET is smaller than "
                            "the current memory usage. This will result in jobs eviction and/or "
                            "inability to accept new jobs depending on the maxmemory-policy.")
            if self.started_up:
                self.memory_cron()          # the new memory level now, not at the next poll
        elif name == "loglevel":
            logging.getLogger().setLevel(dlog.LEVELS.get(cfg.loglevel, logging.INFO))
        elif name in AOF_DIRECTIVES:
            return self.aof_config_changed(name)    # disque.aof_front
        return None

    def reset_metrics(self):
        now = time.monotonic()
        self.metrics = {}
        for key in ("ops", "in", "out"):
            self.metrics[key] = [now, self.metric_value(key), [0.0] * METRIC_SAMPLES, 0]

    def metric_value(self, key):
        if key == "ops":
            return self.commands_processed
        return self.net_input_bytes if key == "in" else self.net_output_bytes

    def instantaneous(self, key):
        """Mean of the last 16 per-second rates, sampled every 100 ms (SPEC 14)."""
        return sum(self.metrics[key][2]) / METRIC_SAMPLES

    # ---- the client cron ------------------------------------------------------------------

    def admin_cron(self):
        """Every front-end cron tick (50 ms)."""
        self.now = time.time()
        mono = time.monotonic()
        for key, m in self.metrics.items():
            elapsed = mono - m[0]
            if elapsed >= METRIC_PERIOD:
                value = self.metric_value(key)
                m[2][m[3]] = (value - m[1]) / elapsed
                m[3] = (m[3] + 1) % METRIC_SAMPLES
                m[0], m[1] = mono, value
        for c in list(self.obuf_soft_clients):
            self.check_output_buffer(c)
        timeout = self.cfg.timeout
        if timeout > 0 and mono >= self.next_timeout_check:
            self.next_timeout_check = mono + 1.0
            now = self.now
            for c in list(self.clients.values()):
                # blocked clients and monitors never time out (SPEC 1.1)
                if (c.waiting is None and not c.monitor and not c.closing
                        and now - c.last_interaction > timeout):
                    log.log(15, "Closing idle client %s", c.addr)
                    self.drop_client(c)

    def drop_client(self, c):
        """Close a client now (CLIENT KILL, idle timeout, output buffer limit): nothing
        more is executed for it or written to it."""
        self.obuf_soft_clients.discard(c)
        if c.closed:
            return
        c.closing = True
        c.closed = True          # replies still arriving are dropped; late jobs go back
        t = c.transport
        if t.get_write_buffer_size():
            t.abort()            # do not wait for a peer that is not reading
        else:
            t.close()

    def check_output_buffer(self, c):
        """client-output-buffer-limit normal <hard> <soft> <secs> (upstream semantics: over
        the hard limit, or over the soft limit for more than <secs> seconds, the client is
        closed). The buffer is what the event loop holds because the client reads slower
        than we write: `transport.get_write_buffer_size()`."""
        if c.closed:
            self.obuf_soft_clients.discard(c)
            return
        hard, soft, secs = self.obuf_limits
        size = c.transport.get_write_buffer_size()
        over = bool(hard and size >= hard)
        if not over:
            if soft and size >= soft:
                now = time.monotonic()
                if not c.obuf_soft_since:
                    c.obuf_soft_since = now
                    self.obuf_soft_clients.add(c)
                elif now - c.obuf_soft_since > secs:
                    over = True
            elif c.obuf_soft_since:
                c.obuf_soft_since = 0.0
                self.obuf_soft_clients.discard(c)
        if over:
            log.warning("Client %s scheduled to be closed ASAP for overcoming of output buffer "
                        "limits.", self.client_line(c).rstrip("\n"))
            self.drop_client(c)

    def admin_client_gone(self, client):
        self.obuf_soft_clients.discard(client)
        if client.monitor:
            client.monitor = False
            try:
                self.monitors.remove(client)
            except ValueError:
                pass
            self.nmonitors = len(self.monitors)

    # ---- AUTH / HELLO ---------------------------------------------------------------------

    def password_ok(self, password):
        return self.requirepass is not None and hmac.compare_digest(password, self.requirepass)

    def cmd_auth(self, client, argv):
        if self.requirepass is None:
            client.reply(NO_PASSWORD)
        elif self.password_ok(argv[1]):
            client.authenticated = True
            client.reply(OK)
        else:
            client.authenticated = False
            client.reply(BAD_PASSWORD)

    def cmd_hello_handshake(self, client, argv):
        """HELLO alone: the Disque reply (SPEC 4.1). HELLO <protover> [AUTH user pass]
        [SETNAME name]: the Redis 6 handshake, which also selects RESP2 or RESP3."""
        if len(argv) == 1:
            self.cmd_hello(client, argv)
            return
        ver = resp.parse_int(argv[1])
        if ver is None:
            client.reply(b"-ERR Protocol version is not an integer or out of range\r\n")
            return
        if ver < 2 or ver > 3:
            client.reply(NOPROTO)
            return
        name = None
        i, argc = 2, len(argv)
        while i < argc:
            opt = argv[i].lower()
            more = argc - 1 - i
            if opt == b"auth" and more >= 2:
                user, password = argv[i + 1], argv[i + 2]
                # the only user is "default"; with no requirepass it has no password
                if user != b"default" or (self.requirepass is not None
                                          and not self.password_ok(password)):
                    client.reply(WRONGPASS)
                    return
                client.authenticated = True
                i += 3
            elif opt == b"setname" and more >= 1:
                name = argv[i + 1]
                if not valid_name(name):
                    client.reply(BAD_CLIENT_NAME)
                    return
                i += 2
            else:
                client.reply(b"-ERR Syntax error in HELLO option '%s'\r\n" % one_line(argv[i]))
                return
        if self.auth_required and not client.authenticated:
            client.reply(HELLO_NOAUTH)
            return
        if name is not None:
            client.name = name
        client.resp3 = ver == 3
        fields = [(b"server", resp.bulk(b"disque")), (b"version", resp.bulk(VERSION.encode())),
                  (b"proto", b":%d\r\n" % ver), (b"id", b":%d\r\n" % client.id),
                  (b"mode", resp.bulk(b"standalone")), (b"role", resp.bulk(b"master")),
                  (b"modules", b"*0\r\n")]
        head = b"%%%d\r\n" % len(fields) if ver == 3 else b"*%d\r\n" % (2 * len(fields))
        client.reply(head + b"".join(resp.bulk(k) + v for k, v in fields))

    # ---- MONITOR (SPEC 1.4) ----------------------------------------------------------------

    def cmd_monitor(self, client, argv):
        if client.monitor:
            return
        client.monitor = True
        self.monitors.append(client)
        self.nmonitors = len(self.monitors)
        client.reply(OK)

    def feed_monitors(self, client, argv):
        """Called by the core before a command executes, only while monitors exist.
        Admin commands and AUTH are not shown (upstream skips admin commands; AUTH and
        HELLO ... AUTH would show the password)."""
        if argv[0].lower() == b"hello" and any(a.lower() == b"auth" for a in argv[2:]):
            return
        t = time.time()
        sec = int(t)
        addr = client.addr
        if addr == self.unix_addr:
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
            client.reply(OK)
        elif sub == b"len" and argc == 2:
            client.reply(b":%d\r\n" % len(self.slowlog))
        elif sub == b"get" and argc in (2, 3):
            count = 10
            if argc == 3:
                count = resp.parse_int(argv[2])
                if count is None:
                    client.reply(NOT_INTEGER)
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
            client.reply(SYNTAX_ERROR)

    # ---- COMMAND ---------------------------------------------------------------------------

    def live_commands(self):
        """Commands reachable under some name (rename-command removes or renames)."""
        seen = {}
        for entry in self.table.values():
            seen.setdefault(entry[2].name, entry[2])
        return list(seen.values())

    def command_entry(self, c, resp3):
        flags = [f.encode() for f in c.flag_words]
        head = b"*7\r\n" if resp3 else b"*6\r\n"
        out = (head + resp.bulk(c.name.encode()) + b":%d\r\n" % c.arity
               + (b"~%d\r\n" if resp3 else b"*%d\r\n") % len(flags)
               + b"".join(b"+%s\r\n" % f for f in flags) + b":0\r\n:0\r\n:0\r\n")
        if resp3:
            out += b"*0\r\n"        # ACL categories: redis-py's RESP3 parser expects them
        return out

    def cmd_command(self, client, argv):
        resp3 = client.resp3
        argc = len(argv)
        if argc == 1:
            items = [self.command_entry(c, resp3) for c in self.live_commands()]
            client.reply(b"*%d\r\n" % len(items) + b"".join(items))
            return
        sub = argv[1].lower()
        if sub == b"count" and argc == 2:
            client.reply(b":%d\r\n" % len(self.live_commands()))
        elif sub == b"info":
            items = []
            for n in argv[2:]:
                entry = self.table.get(n.lower())
                items.append(self.command_entry(entry[2], resp3) if entry else NULL_BULK)
            client.reply(b"*%d\r\n" % len(items) + b"".join(items))
        elif sub == b"getkeys" and argc >= 3:
            entry = self.table.get(argv[2].lower())
            if entry is None:
                client.reply(b"-ERR Invalid command specified\r\n")
            elif not entry[2].arity_ok(argc - 2):
                client.reply(b"-ERR Invalid number of arguments specified for command\r\n")
            else:
                client.reply(b"*0\r\n")         # no command has keys
        else:
            client.reply(COMMAND_ERROR)

    # ---- CLIENT ----------------------------------------------------------------------------

    def client_line(self, c, now=None):
        """One CLIENT LIST line (SPEC 4.5), newline included."""
        now = time.time() if now is None else now
        flags = ""
        if c.monitor:
            flags += "O"
        if c.waiting is not None:
            flags += "b"
        if c.closing and not c.closed:
            flags += "c"
        if c.closed:
            flags += "A"
        if c.addr == self.unix_addr and self.unix_addr is not None:
            flags += "U"                    # connected through `unixsocket`
        omem = 0
        if c.transport is not None and not c.closed:
            try:
                omem = c.transport.get_write_buffer_size()
            except Exception:
                omem = 0
        return ("id=%d addr=%s fd=%d name=%s age=%d idle=%d flags=%s qbuf=%d qbuf-free=0 obl=0 "
                "oll=%d omem=%d events=%s cmd=%s\n" % (
                    c.id, c.addr, c.fd, c.name.decode("latin-1"), max(0, now - c.created),
                    max(0, now - c.last_interaction), flags or "N", c.parser.pending,
                    len(c.slots) if c.slots else 0, omem, "rw" if omem else "r",
                    c.last_cmd.decode() if c.last_cmd else "NULL"))

    def cmd_client(self, client, argv):
        sub = argv[1].lower()
        argc = len(argv)
        if sub == b"list" and argc == 2:
            now = time.time()
            text = "".join(self.client_line(c, now) for c in self.clients.values())
            client.reply(resp.bulk(text.encode("latin-1")))
        elif sub == b"info" and argc == 2:
            client.reply(resp.bulk(self.client_line(client).encode("latin-1")))
        elif sub == b"id" and argc == 2:
            client.reply(b":%d\r\n" % client.id)
        elif sub == b"kill":
            self.client_kill(client, argv)
        elif sub == b"setname" and argc == 3:
            if not valid_name(argv[2]):
                client.reply(BAD_CLIENT_NAME)
                return
            client.name = argv[2]
            client.reply(OK)
        elif sub == b"getname" and argc == 2:
            client.reply(resp.bulk(client.name) if client.name else NULL_BULK)
        elif sub == b"pause" and argc == 3:
            ms = resp.parse_int(argv[2])
            if ms is None:
                client.reply(R.TIMEOUT_NOT_INTEGER)
            elif ms < 0:
                client.reply(R.TIMEOUT_NEGATIVE)
            else:
                self.pause_clients(ms)
                client.reply(OK)
        elif sub == b"reply" and argc == 3:
            mode = argv[2].lower()
            if mode == b"on":
                client.reply_mode = 0
                client.mute = False
                client.reply(OK)
            elif mode == b"off":
                client.reply_mode = 1
                client.mute = True
            elif mode == b"skip":
                if client.reply_mode != 1:
                    client.reply_mode = 2
                    client.mute = True
            else:
                client.reply(SYNTAX_ERROR)
        elif sub == b"setinfo" and argc == 4:
            attr = argv[2].lower()
            if attr not in (b"lib-name", b"lib-ver"):
                client.reply(b"-ERR Unrecognized option '%s'\r\n" % one_line(argv[2]))
            elif not valid_name(argv[3]):
                client.reply(b"-ERR %s cannot contain spaces, newlines or special characters.\r\n"
                             % attr)
            else:
                if attr == b"lib-name":
                    client.lib_name = argv[3]
                else:
                    client.lib_ver = argv[3]
                client.reply(OK)
        else:
            client.reply(CLIENT_SYNTAX)

    def client_kill(self, client, argv):
        argc = len(argv)
        addr = cid = ctype = None
        skipme = True
        if argc == 3:
            addr = argv[2].decode("latin-1")       # old form: a client may kill itself
            skipme = False
        elif argc > 3:
            i = 2
            while i < argc:
                opt = argv[i].lower()
                if i + 1 >= argc:
                    client.reply(SYNTAX_ERROR)
                    return
                val = argv[i + 1]
                if opt == b"id":
                    cid = resp.parse_int(val)
                    if cid is None:
                        client.reply(NOT_INTEGER)
                        return
                elif opt == b"type":
                    if val.lower() not in CLIENT_TYPES:
                        client.reply(b"-ERR Unknown client type '%s'\r\n" % one_line(val))
                        return
                    ctype = val.lower()
                elif opt == b"addr":
                    addr = val.decode("latin-1")
                elif opt == b"skipme":
                    if val.lower() == b"yes":
                        skipme = True
                    elif val.lower() == b"no":
                        skipme = False
                    else:
                        client.reply(SYNTAX_ERROR)
                        return
                else:
                    client.reply(SYNTAX_ERROR)
                    return
                i += 2
        else:
            client.reply(SYNTAX_ERROR)
            return
        killed = 0
        close_me = False
        for c in list(self.clients.values()):
            if addr is not None and c.addr != addr:
                continue
            if ctype is not None and ctype != b"normal":
                continue                   # every client here is a normal client
            if cid is not None and cid != 0 and c.id != cid:
                continue
            if c is client and skipme:
                continue
            if c is client:
                close_me = True
            else:
                self.drop_client(c)
            killed += 1
        if argc == 3:
            client.reply(OK if killed else b"-ERR No such client\r\n")
        else:
            client.reply(b":%d\r\n" % killed)
        if close_me:
            client.close_after_reply()

    def pause_clients(self, ms):
        """CLIENT PAUSE: stop processing commands of every client but monitors for ms."""
        until = time.monotonic() + ms / 1000.0
        if until <= self.pause_until and self.paused:
            return
        self.pause_until = until
        self.paused = True
        if self.pause_handle is not None:
            self.pause_handle.cancel()
        self.pause_handle = self.loop.call_later(ms / 1000.0, self.end_pause)

    def end_pause(self):
        left = self.pause_until - time.monotonic()
        if left > 0.0005:
            self.pause_handle = self.loop.call_later(left, self.end_pause)
            return
        self.pause_handle = None
        self.paused = False
        for c in list(self.clients.values()):
            if c.closed or c.closing or c.waiting is not None:
                continue
            if c.backlog or c.parser.pending:
                c.process_input()
                if self.paused:
                    break       # a CLIENT PAUSE in the input just paused everyone again
        self.flush_replies()

    # ---- CONFIG (SPEC 4.3) -----------------------------------------------------------------

    def config_reply_pairs(self, client, pairs):
        flat = []
        for k, v in pairs:
            flat += [k.encode(), v.encode("utf-8", "surrogateescape")]
        if client.resp3:
            return b"%%%d\r\n" % len(pairs) + b"".join(resp.bulk(x) for x in flat)
        return resp.bulk_array(flat)

    def reset_stats(self, client):
        """CONFIG RESETSTAT: counters, per-command stats (the workers' command times are
        kept as a baseline that INFO subtracts), instantaneous metrics."""
        for k in self.stats:
            self.stats[k] = 0
        self.commands_processed = self.net_input_bytes = self.net_output_bytes = 0
        self.local_commands = 0          # with commands_processed: the INFO snapshot mark
        self.calls.clear()
        self.local_usec.clear()
        self.reset_metrics()
        s = client.slot()

        def done(workers):
            base = {}
            for w in workers:
                if isinstance(w, dict):
                    for k, v in w.get("command_usec", {}).items():
                        base[k] = base.get(k, 0) + v
            self.worker_usec_base = base
            s.fill(OK)

        self.control_all("info", None, done)

    def command_usec(self, workers):
        """INFO commandstats usec per command: the workers' execution time since the last
        CONFIG RESETSTAT plus the front-end's own commands."""
        usec = collections.Counter()
        for w in workers:
            if isinstance(w, dict):
                for k, v in w.get("command_usec", {}).items():
                    usec[k] += v
        for k, v in self.worker_usec_base.items():
            usec[k] = max(0, usec[k] - v)
        for k, v in self.local_usec.items():
            usec[k.decode() if isinstance(k, bytes) else k] += v
        return usec
