"""Connections served by the worker that owns their queues (`connection-affinity yes`;
docs/design.md "Connections served by their worker").

A connection whose last commands all went to one worker is handed to that worker once
its replies are written: its socket (SCM_RIGHTS over the worker's hand-over channel,
disque/contracts/connection_handover.py), its RESP version and its unparsed input. The
worker then serves it with no front-end hop (disque/workers/served_clients.py) and hands
it back, unexecuted input and unwritten replies included, when a command needs more.

The front-end keeps the connection's `Client` (CLIENT LIST, maxclients, CLIENT KILL) with
`handed` set to the worker. It takes every connection back (RECALL) while a node-wide
state needs each command to pass through it: MONITOR, CLIENT PAUSE, a requirepass change,
LOADING / MISCONF, queues held off their slot, connection-affinity turned off, SHUTDOWN.

A connection that keeps coming back for commands its worker cannot serve (a client using
queues of several workers) is handed over less and less often: each such return doubles
the number of commands in a row to one worker it takes (`affine_need`). A worker also
gives back a connection whose commands have gone on to another worker's queues
(BACK_FOLLOW: FOLLOW_AFTER forwarded in a row), so that it is handed to that worker.
"""
import logging
import os
import socket

from disque.contracts import connection_handover as handover_msg

log = logging.getLogger("disque.frontend")

MAX_AFFINE_NEED = 1024


class Handover:
    """Needs from the node (`fe`): links (unix: channel(w), on_handover, held, starting),
    loop, clients, client_gone, the state flags (nmonitors, paused, gate, auth_required,
    queues_spread), command table, slowlog_push, control_all, info_snapshot, flush_replies.
    Offers: hand_over and returned (core hooks), worker_report (core hook), recall_all,
    kill, worker_lost, config_changed, start, served figures for INFO."""

    def __init__(self, fe, cfg):
        self.fe = fe
        self.cfg = cfg
        self.handed = [dict() for _ in range(fe.nworkers)]   # w -> {client id: Client}
        self.returning = {}             # client id -> (unsent output, unparsed input)
        self.served = [None] * fe.nworkers  # w -> the worker's totals (SERVED reports)
        self.base = {}                  # the totals at the last CONFIG RESETSTAT
        self.handoffs = 0
        self.handbacks = 0
        self.follows = 0                # hand-backs to move to the worker of its commands
        self.ended = 0                  # handed connections closed while a worker served them
        self.stopping = False
        self.configuring = 0            # served_config controls not yet applied by every worker
        self.after_configured = []      # callbacks waiting for that count to reach 0

    @property
    def possible(self):
        return getattr(self.fe.links, "kind", "") == "unix"

    def start(self):
        """At start-up, once the workers serve: enable and configure them."""
        links = self.fe.links
        if self.possible:
            links.on_handover = self.channel_readable
        self.apply()

    def wanted(self):
        return bool(self.cfg.connection_affinity) and self.possible and not self.stopping

    def apply(self):
        """connection-affinity at start-up or by CONFIG SET: off at once (every connection
        taken back); on once every worker has the table of what it may serve."""
        fe = self.fe
        if not self.wanted():
            if fe.affinity:
                fe.affinity = False
                self.recall_all()
            return

        def configured(values):
            fe.affinity = self.wanted()
        fe.control_all("served_config", self.worker_config(), configured)

    def worker_config(self):
        # with an output limit the front-end must see every slow reader's replies, so a
        # worker writes none of them itself (ServedClient.unsent)
        return {"renames": self.cfg.rename_commands, "timeout": self.cfg.timeout,
                "slowlog": self.cfg.slowlog_log_slower_than,
                "output_limited": self.fe.obuf_limited}

    def config_changed(self, name):
        if name == "connection-affinity":
            self.apply()
        elif name == "requirepass":
            self.recall_all()       # every command is checked against the new password
        elif self.wanted():         # timeout, slowlog-log-slower-than, the output limits
            # pushed even before fe.affinity is on: the start-up configuration may still be
            # on its way with the old values, and this one must follow it
            self.configuring += 1
            self.fe.control_all("served_config", self.worker_config(), self._configured)

    def push(self, name, arg):
        """A control every worker applies before CONFIG SET answers (when_configured)."""
        self.configuring += 1
        self.fe.control_all(name, arg, self._configured)

    def _configured(self, values):
        self.configuring -= 1
        if not self.configuring:
            waiting, self.after_configured = self.after_configured, []
            for done in waiting:
                done()

    def when_configured(self, done):
        """Run `done` once every worker applied the values it serves connections with (at
        once when nothing is on its way): CONFIG SET replies then, so a command sent after
        its OK sees the new value."""
        if self.configuring:
            self.after_configured.append(done)
        else:
            done()

    # ---- handing over ----------------------------------------------------------------------

    def hand_over(self, client, w, big=False):
        """Core hook: `client` has no reply outstanding and its commands went to worker w,
        or (`big`) the body of its ADDJOB for a queue of worker w is still arriving."""
        fe = self.fe
        links = fe.links
        tls = client.tls
        if tls is not None:
            fe.tls_port.settled(tls, w)     # where the next connection from its host starts
            w = tls.worker      # its TLS runs there: served there, the others' commands forwarded
        if (fe.nmonitors or fe.paused or fe.gate or fe.queues_spread or client.closed
                or (fe.auth_required and not client.authenticated) or client.handed >= 0
                or links.held[w] is not None or links.starting[w]):
            return
        t = client.transport
        if t is None or t.get_write_buffer_size():
            return
        parser = client.parser
        if parser.pending > (handover_msg.MAX_BIG_HANDOFF_INPUT if big
                             else handover_msg.MAX_HANDOFF_INPUT):
            return
        sock = t.get_extra_info("socket")
        if sock is None:
            return
        fd = sock.fileno()
        if fd < 0:
            return
        t.pause_reading()
        unparsed = parser.take_unparsed()      # a command parsed in part included
        try:
            pump = handover_msg.NO_PUMP if tls is None else tls.pump
            links.post(w, handover_msg.Handoff.encode(client.id, client.resp3, unparsed, pump), fd)
        except OSError:
            if unparsed:
                parser.feed(unparsed)
            t.resume_reading()
            return
        self.handoffs += 1
        log.debug("Client id=%d handed to worker %d", client.id, w)
        client.handed = w
        client.detached += 1
        client.transport = None
        self.handed[w][client.id] = client
        t.abort()           # our copy of the socket; the worker holds its own

    def channel_readable(self, w):
        channel = self.fe.links.channel(w)
        for msg, fd in channel.receive():
            kind = msg[0]
            if kind == handover_msg.HANDBACK:
                self.take_back(w, handover_msg.Handback.decode(msg), fd)
            elif kind == handover_msg.GONE:
                self.gone(w, handover_msg.Gone.decode(msg).client)
            elif kind == handover_msg.SLOWLOG:
                self.slow_commands(handover_msg.Slowlog.decode(msg).entries)
            elif kind == handover_msg.TLS_CONN and fd is not None:
                self.fe.tls_port.connected(w, handover_msg.TlsConn.decode(msg), fd)
            elif fd is not None:
                os.close(fd)
        if channel.closed:
            try:
                self.fe.loop.remove_reader(channel.fileno())
            except (ValueError, OSError):
                pass

    def take_back(self, w, msg, fd):
        cid, unsent, unparsed, last_cmd, reason, totals = msg
        self.served[w] = totals
        self.fe.info_snapshot.invalidate()
        client = self.handed[w].pop(cid, None)
        if fd is None:
            return
        if client is None or client.closed:
            os.close(fd)
            return
        self.handbacks += 1
        log.debug("Client id=%d back from worker %d (reason %d)", cid, w, reason)
        client.handed = -1
        if last_cmd:
            client.last_cmd = last_cmd
        client.affine = -1
        client.affine_run = 0
        if reason == handover_msg.BACK_FOLLOW:
            # its commands went on to another worker's queues: once they reach that worker
            # through here (affine_need in a row), it is handed to it (hand_over)
            self.follows += 1
        if reason == handover_msg.BACK_COMMAND or reason == handover_msg.BACK_FOLLOW:
            # each return, whatever the cause, makes the next hand-over wait for more
            # commands in a row: a connection never moves back and forth often
            client.affine_need = min(client.affine_need * 2, MAX_AFFINE_NEED)
        self.returning[cid] = (unsent, unparsed)
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            self.lost(client)
            return
        loop = self.fe.loop
        loop.create_task(self.adopt(loop, client, sock))

    async def adopt(self, loop, client, sock):
        try:
            await loop.connect_accepted_socket(lambda: client, sock)
        except Exception:
            log.exception("Cannot take back client id=%d", client.id)
            sock.close()
            self.returning.pop(client.id, None)
            self.lost(client)

    def returned(self, client):
        """Core hook (Client.connection_made of a connection coming back)."""
        unsent, unparsed = self.returning.pop(client.id, (b"", b""))
        if client.closed:
            client.transport.close()
            return
        if unsent:
            client.write(unsent)
        if unparsed:
            client.parser.feed(unparsed)
        if unparsed or client.parser.pending:
            client.process_input()
            self.fe.flush_replies()

    def gone(self, w, cid):
        client = self.handed[w].pop(cid, None)
        if client is not None:
            self.lost(client)

    def lost(self, client):
        self.ended += 1
        client.handed = -1
        if not client.closed:
            client.closing = client.closed = True
            self.fe.client_gone(client)

    # ---- node-wide ---------------------------------------------------------------------

    def recall_all(self):
        """Every handed connection comes back (before this returns, nothing more is handed)."""
        links = self.fe.links
        for w, clients in enumerate(self.handed):
            if clients and links.held[w] is None:
                try:
                    links.post(w, handover_msg.Recall.encode())
                except OSError:
                    pass

    def kill(self, client):
        """CLIENT KILL / idle timeout of a handed connection."""
        w = client.handed
        log.debug("Client id=%d killed while worker %d serves it", client.id, w)
        self.handed[w].pop(client.id, None)
        try:
            self.fe.links.post(w, handover_msg.Kill.encode(client.id))
        except OSError:
            pass
        self.lost(client)

    def worker_lost(self, w):
        """Worker w died: the connections it served died with it."""
        handed, self.handed[w] = self.handed[w], {}
        for client in handed.values():
            self.lost(client)
        self.served[w] = None

    def stop(self):
        """SHUTDOWN: no more handing over; workers write what they executed and close."""
        self.stopping = True
        self.fe.affinity = False

    # ---- figures (core hook worker_report; INFO) ------------------------------------------

    def worker_report(self, rep):
        if rep[0] == handover_msg.SERVED_REQID:
            served = handover_msg.Served.decode(rep)
            self.served[served.worker] = served.totals

    def slow_commands(self, entries):
        clients = self.fe.clients
        for cid, argv, duration in entries:
            client = clients.get(cid)
            if client is not None:
                self.fe.slowlog_push(client, argv, duration)

    def total(self, key):
        n = 0
        for t in self.served:
            if t is not None:
                n += t[key]
        return n - self.base.get(key, 0)

    def calls(self):
        out = {}
        for t in self.served:
            if t is not None:
                for k, v in t["calls"].items():
                    out[k] = out.get(k, 0) + v
        for k, v in self.base.get("calls", {}).items():
            out[k] = out.get(k, 0) - v
        return {k: v for k, v in out.items() if v > 0}

    def serving(self):
        """Some connection is served by a worker now."""
        for h in self.handed:
            if h:
                return True
        return False

    @property
    def moves(self):
        """Changes whenever a field of info_fields may have (INFO's section cache key)."""
        return (self.fe.affinity, self.handoffs, self.handbacks, self.follows, self.ended)

    def info_fields(self):
        """INFO server: whether connections move to workers, how many are there now, and
        how often they moved each way."""
        return [("connection_affinity", "yes" if self.fe.affinity else "no"),
                ("connections_served_by_workers", sum(len(h) for h in self.handed)),
                ("connection_handoffs", self.handoffs), ("connection_handbacks", self.handbacks),
                ("connection_follows", self.follows)]

    def reset(self):
        """CONFIG RESETSTAT: from now on the figures count from the current totals."""
        self.base = {}
        self.base = {"commands": self.total("commands"), "net_in": self.total("net_in"),
                     "net_out": self.total("net_out"), "calls": self.calls()}
