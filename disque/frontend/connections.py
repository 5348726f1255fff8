"""Client connections (SPEC 1.1, 4.5): accepting and losing them, maxclients, the idle
`timeout`, `client-output-buffer-limit`, CLIENT (LIST, KILL, PAUSE, REPLY, SETNAME, ...).

The per-connection state and the hot path (parsing, reply order, writes) are the Cython
`Client` (disque/_fast/frontcore.pyx). This part needs of its node only `clients` (id ->
Client), `next_client_id`, `now`, `paused`, `loop`, `flush_replies`, `maxclients`,
`obuf_limited`, `unix_addr` and the `on_client_gone` callbacks of the other parts,
so a process other than the front-end (a worker serving connections itself) can own one.
"""
import logging
import resource
import time
from socket import AF_UNIX

from disque import replies
from disque import nodeclock
from disque._fast import resp
from disque.contracts.connection_handover import peer_text
from disque.replies import one_line

log = logging.getLogger("disque.frontend")

OK = replies.OK
NULL_BULK = b"$-1\r\n"
MAXCLIENTS_REACHED = b"-ERR max number of clients reached\r\n"
CLIENT_SYNTAX = (b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                 b"SETNAME connection-name)\r\n")
BAD_CLIENT_NAME = b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
NO_SUCH_CLIENT = b"-ERR No such client\r\n"
CLIENT_TYPES = (b"normal", b"slave", b"replica", b"pubsub", b"master")
RESERVED_FDS = 32             # upstream's CONFIG_MIN_RESERVED_FDS: listeners, links, logs
MAXCLIENTS_TOO_HIGH = (b"-ERR The operating system is not able to handle the specified "
                       b"number of clients, try with %d\r\n")


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
    """CLIENT SETNAME / SETINFO / HELLO SETNAME charset: '!' .. '~' only."""
    return all(33 <= c <= 126 for c in name)


class Connections:
    """Offers: connected / gone / overflow (the Cython Client's hooks), drop, cron (idle
    timeout and output buffers), cmd_client, pause and end_pause (CLIENT PAUSE, and SHUTDOWN
    REWRITE-AOF holding every client), apply_maxclients and apply_output_limits (config),
    and `on_gone`, the callbacks other parts register for a client that went away."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.on_gone = []                 # callbacks(client) when a connection is lost
        self.counters = {"total_connections_received": 0, "rejected_connections": 0}
        self.obuf_limits = (0, 0, 0)
        self.obuf_soft_clients = set()
        self.pause_until = 0.0
        self.pause_handle = None
        self.next_timeout_check = 0.0

    # ---- accept, lose ------------------------------------------------------------------

    def connected(self, client):
        fe = self.fe
        fe.next_client_id += 1
        client.id = fe.next_client_id
        peer = client.transport.get_extra_info("peername")
        sock = client.transport.get_extra_info("socket")
        if client.tls is not None:
            client.addr = client.tls.addr       # the TLS client's, not the worker's socketpair
        elif isinstance(peer, tuple):
            client.addr = peer_text(peer[0], peer[1])
        elif fe.unix_addr is not None and sock is not None and sock.family == AF_UNIX:
            client.addr = fe.unix_addr
        else:
            client.addr = str(peer)
        try:
            client.fd = sock.fileno() if sock is not None else -1
        except Exception:
            client.fd = -1
        client.last_interaction = fe.now
        if len(fe.clients) >= fe.maxclients:
            self.counters["rejected_connections"] += 1
            client.transport.write(MAXCLIENTS_REACHED)
            client.transport.close()
            client.closing = client.closed = True
            return
        self.counters["total_connections_received"] += 1
        fe.clients[client.id] = client

    def gone(self, client):
        self.fe.clients.pop(client.id, None)
        self.obuf_soft_clients.discard(client)
        for callback in self.on_gone:
            callback(client)

    def overflow(self, client):
        log.warning("Closing client %s: query buffer over 1 GiB", client.addr)
        client.transport.abort()

    def drop(self, c):
        """Close a client now (CLIENT KILL, idle timeout, output buffer limit): nothing
        more is executed for it or written to it."""
        self.obuf_soft_clients.discard(c)
        if c.closed:
            return
        if c.handed >= 0:
            self.fe.handover.kill(c)     # a worker serves it (disque/frontend/handover.py)
            return
        if c.transport is None:          # on its way back from a worker: closed on arrival
            c.closing = c.closed = True
            return
        c.closing = True
        c.closed = True          # replies still arriving are dropped; late jobs go back
        t = c.transport
        if t.get_write_buffer_size():
            t.abort()            # do not wait for a peer that is not reading
        else:
            t.close()

    # ---- the client cron ---------------------------------------------------------------

    def cron(self, mono):
        """Every front-end cron tick (50 ms): output buffers over their soft limit, and
        once a second the idle `timeout`."""
        for c in list(self.obuf_soft_clients):
            self.check_output_buffer(c)
        timeout = self.cfg.timeout
        if timeout > 0 and mono >= self.next_timeout_check:
            self.next_timeout_check = mono + 1.0
            now = self.fe.now
            for c in list(self.fe.clients.values()):
                # blocked clients and monitors never time out (SPEC 1.1)
                # a connection a worker serves is timed out by that worker
                if (c.waiting is None and not c.monitor and not c.closing and c.handed < 0
                        and now - c.last_interaction > timeout):
                    log.log(15, "Closing idle client %s", c.addr)
                    self.drop(c)

    def check_output_buffer(self, c):
        """client-output-buffer-limit normal <hard> <soft> <secs> (upstream semantics: over
        the hard limit, or over the soft limit for more than <secs> seconds, the client is
        closed). The buffer is what the event loop holds because the client reads slower
        than we write: `transport.get_write_buffer_size()`."""
        if c.closed or c.transport is None:
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
            self.drop(c)

    # ---- configuration -------------------------------------------------------------------

    def apply_maxclients(self, started_up):
        """maxclients, limited by what the open-files limit allows. At start-up a value too
        high is lowered (with a warning); CONFIG SET refuses it (error reply, value undone)."""
        cfg = self.cfg
        wanted = cfg.maxclients
        possible = fd_limited_clients(wanted)
        if possible < wanted:
            if started_up:
                cfg.maxclients = self.fe.maxclients
                return MAXCLIENTS_TOO_HIGH % possible
            log.warning("You requested maxclients of %d requiring at least %d max file "
                        "descriptors. Server can't set maximum open files to %d: "
                        "maxclients has been reduced to %d.", wanted, wanted + RESERVED_FDS,
                        wanted + RESERVED_FDS, possible)
            cfg.maxclients = possible
        self.fe.maxclients = cfg.maxclients
        return None

    def apply_output_limits(self):
        limits = tuple(self.cfg.client_output_buffer_limit)
        self.obuf_limits = limits
        self.fe.obuf_limited = bool(limits[0] or limits[1])
        if not self.fe.obuf_limited:
            for c in self.obuf_soft_clients:
                c.obuf_soft_since = 0.0
            self.obuf_soft_clients.clear()

    # ---- CLIENT ----------------------------------------------------------------------------

    def client_line(self, c, now=None):
        """One CLIENT LIST line (SPEC 4.5), newline included."""
        now = nodeclock.now() if now is None else now
        unix_addr = self.fe.unix_addr
        flags = ""
        if c.monitor:
            flags += "O"
        if c.waiting is not None:
            flags += "b"
        if c.closing and not c.closed:
            flags += "c"
        if c.closed:
            flags += "A"
        if c.addr == unix_addr and unix_addr is not None:
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
            now = nodeclock.now()
            text = "".join(self.client_line(c, now) for c in self.fe.clients.values())
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
                client.reply(replies.TIMEOUT_NOT_INTEGER)
            elif ms < 0:
                client.reply(replies.TIMEOUT_NEGATIVE)
            else:
                self.pause(ms)
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
                client.reply(replies.SYNTAX_ERROR)
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
                    client.reply(replies.SYNTAX_ERROR)
                    return
                val = argv[i + 1]
                if opt == b"id":
                    cid = resp.parse_int(val)
                    if cid is None:
                        client.reply(replies.NOT_INTEGER)
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
                        client.reply(replies.SYNTAX_ERROR)
                        return
                else:
                    client.reply(replies.SYNTAX_ERROR)
                    return
                i += 2
        else:
            client.reply(replies.SYNTAX_ERROR)
            return
        killed = 0
        close_me = False
        for c in list(self.fe.clients.values()):
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
                self.drop(c)
            killed += 1
        if argc == 3:
            client.reply(OK if killed else NO_SUCH_CLIENT)
        else:
            client.reply(b":%d\r\n" % killed)
        if close_me:
            client.close_after_reply()

    # ---- CLIENT PAUSE ------------------------------------------------------------------

    def pause(self, ms):
        """CLIENT PAUSE: stop processing commands of every client but monitors for ms."""
        fe = self.fe
        until = time.monotonic() + ms / 1000.0
        if until <= self.pause_until and fe.paused:
            return
        self.pause_until = until
        fe.paused = True
        fe.handover.recall_all()        # a paused connection is held by the front-end
        if self.pause_handle is not None:
            self.pause_handle.cancel()
        self.pause_handle = fe.loop.call_later(ms / 1000.0, self.end_pause)

    def hold_all(self):
        """Pause every client until end_pause (SHUTDOWN REWRITE-AOF); returns the pause
        end that was in effect, for end_pause to restore."""
        old_until = self.pause_until
        if self.pause_handle is not None:
            self.pause_handle.cancel()
            self.pause_handle = None
        self.pause_until = time.monotonic() + 365 * 86400.0
        self.fe.paused = True
        self.fe.handover.recall_all()
        return old_until

    def end_pause(self, restore_until=None):
        fe = self.fe
        if restore_until is not None:
            self.pause_until = restore_until
        left = self.pause_until - time.monotonic()
        if left > 0.0005:
            self.pause_handle = fe.loop.call_later(left, self.end_pause)
            return
        self.pause_handle = None
        fe.paused = False
        for c in list(fe.clients.values()):
            if c.closed or c.closing or c.waiting is not None or c.transport is None:
                continue
            if c.backlog or c.parser.pending:
                c.process_input()
                if fe.paused:
                    break       # a CLIENT PAUSE in the input just paused everyone again
        fe.flush_replies()
