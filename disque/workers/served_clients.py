"""Client connections a worker serves itself (`connection-affinity yes`; docs/design.md
"Connections served by their worker").

The front-end hands a connection over (its socket, over the hand-over channel of
disque/contracts/connection_handover.py) once its commands all went to this worker. From
then on this worker reads, parses, executes and writes that connection's replies with no
process in between: all commands one read brings run before one write, and many
connections share the worker's one epoll loop.

The commands of this worker's queues and jobs run here; those of another worker's go to it
over a peer link; a GETJOB of this worker's queues with no job waits here, parked among the
shard's consumers, like an ADDJOB waiting for its copies. Anything else goes back to the
front-end with the connection, unexecuted, replies still in order: a node command (INFO,
CONFIG, CLIENT, HELLO, ...), a GETJOB that spans workers or would block on another worker's
queue, an ADDJOB on a node of a cluster for another worker's queue, any error the front-end
words (arity, bad ID, syntax), and a client that reads its replies slower than they come
(the front-end buffers and applies the output limits). The front-end takes every connection back (RECALL) when a
node-wide state needs it: MONITOR, CLIENT PAUSE, requirepass, OOM / MISCONF / LOADING, cluster
LEAVING, queues held off their slot.
"""
import logging
import select
import socket
import time

from disque import commands
from disque._fast.dispatch import build_table
from disque._fast.resp import NULL_ARRAY
from disque._fast.servedcore import ServedCore
from disque._fast.servedloop import ServedClient, take_ready
from disque.contracts import connection_handover as handover_msg
from disque.contracts.getjob_options import parse_getjob
from disque.workers.peer_links import peer_links
from disque.workers.tls_clients import TlsClients

log = logging.getLogger("disque.worker")

EPOLLIN = select.EPOLLIN

# the hooks the Cython halves call (declared in servedloop.pxd and servedcore.pxd): hook -> method
SERVED_HOOKS = {
    "channel_readable": "on_channel",
    "drop_client": "drop",
    "back_when_answered": "finish_back",
    "slow_commands_out": "send_slow",
    "unpark_client": "unpark",
    "hand_back_client": "hand_back",
    "getjob_of_peer": "peer_getjob",
    "dead_letter_possible": "may_dead_letter",
}


class ServedClients(ServedCore):
    """Offers, with ServedCore's wait (the worker loop's poll), serve_ready and flush (after
    the AOF is written): cron, totals, configure, close_all. Needs the shard (execute,
    getjob, cluster_size, persistence.aof_flush, out) and the hand-over channel."""

    def __init__(self, index, nworkers, shard, channel, link_fd, timer_fd, peers=None):
        self.index = index
        self.nworkers = nworkers
        self.shard = shard
        self.handlers = shard.handlers
        # what turn() checks on every turn, held: no attribute lookups through the shard
        self.deadlines = shard.consumers.deadlines.heap
        self.consumers = shard.consumers
        self.interest_due = shard.interest_due
        self.persistence = shard.persistence
        self.channel = channel
        self.link_fd = link_fd
        self.timer_fd = timer_fd
        ep = self.ep                # ServedCore's epoll set, polled in C
        ep.register(link_fd, EPOLLIN)
        ep.register(timer_fd, EPOLLIN)
        ep.register(channel.fileno(), EPOLLIN)
        self.reported = None
        for hook, method in SERVED_HOOKS.items():
            setattr(self, hook, getattr(self, method))
        # the other workers, for the commands of their queues and jobs (None: hand back)
        if peers is not None:
            self.peers = peer_links(index, peers, self.ep, self)
        self.tls = TlsClients(self)     # the TLS connections this worker runs (tls-port)

    # ---- the hand-over channel ---------------------------------------------------------

    def on_channel(self):
        for msg, fd in self.channel.receive():
            kind = msg[0]
            if kind == handover_msg.HANDOFF:
                if fd is not None:
                    h = handover_msg.Handoff.decode(msg)
                    if h.pump == handover_msg.NO_PUMP:
                        sock = socket.socket(fileno=fd)
                        sock.setblocking(False)
                        self.adopt(h.client, sock, h.resp3, h.unparsed)
                    else:
                        self.tls.serve(h, fd)
            elif kind == handover_msg.TLS_ACCEPT:
                if fd is not None:
                    self.tls.accept(handover_msg.TlsAccept.decode(msg), fd)
            elif kind == handover_msg.RECALL:
                for c in list(self.clients.values()):
                    self.hand_back(c, handover_msg.BACK_RECALL)
            elif kind == handover_msg.KILL:
                c = self.by_id.get(handover_msg.Kill.decode(msg).client)
                if c is not None:
                    self.drop(c, report=False)
            elif kind == handover_msg.PEER and fd is not None:
                sock = socket.socket(fileno=fd)
                if self.peers is not None:
                    self.peers.replace(handover_msg.Peer.decode(msg).worker, sock)
                else:
                    sock.close()

    def adopt(self, cid, sock, resp3, unparsed, tls=None):
        """Serve connection `cid` from now on; `tls`: a TLS connection's (TlsPump, pump id,
        records its pump had not sent yet or None)."""
        c = ServedClient(cid, sock, resp3)
        if tls is not None:
            pump, c.pump, c.tls_pending = tls
            c.tls_pump = pump
            c.tls, c.tls_in, c.tls_out = pump.sslobj, pump.inc, pump.out
        self.clients[c.fd] = c
        self.by_id[cid] = c
        self.ep.register(c.fd, EPOLLIN)
        if c.tls_pending is not None:
            self.dirty.append(c)
        if unparsed:
            c.parser.feed(unparsed)
            self.run_input(c)
        # input that arrived while the socket travelled is already waiting in it
        if self.by_id.get(cid) is c and c.back is None:
            self.read(c)

    def hand_back(self, c, reason, pending=b""):
        """Give the connection back: unwritten replies first, then the unserved input.
        While replies of other workers are still to come it stops reading and waits."""
        if c.back is not None:
            return                  # already on its way back
        if c.parked is not None:
            self.unpark(c)
        if c.held:                  # read behind a command still waiting here
            pending = handover_msg.encode_commands(c.held) + pending
            c.held = None
        if c.waiting:
            c.back = (reason, pending + c.parser.take_unparsed())
            try:
                self.ep.unregister(c.fd)
            except (OSError, ValueError):
                pass
            return
        self.send_slow()
        self.forget(c)
        parts = [c.take_plain()] + [x if type(x) is bytes else x.data for x in c.out]
        rest = c.take_unsent()      # a reply this loop was still writing goes first
        if rest and c.tls is not None:
            c.tls_pending = rest    # records: the pump sends them first (pump_again)
        elif rest:
            parts.insert(0, rest)
        unsent = b"".join(parts)
        c.out = []
        if unsent:
            self.shard.persistence.aof_flush()   # no reply leaves before its AOF record
        pending += c.parser.take_unparsed()
        msg = handover_msg.Handback.encode(c.id, unsent, pending, c.last_cmd, reason, self.totals())
        if c.tls is not None:       # its TLS stays here: the front-end gets a pumped end
            theirs = self.tls.pump_again(c)
            try:
                self.channel.send(msg, theirs.fileno())
            finally:
                theirs.close()
            return
        try:
            self.channel.send(msg, c.fd)
        finally:
            c.sock.close()

    def unpark(self, c):
        """A GETJOB parked here may wait for ever, so a connection going back does not wait
        for it: it leaves the consumers, its reply's place goes (nothing was given to it),
        and it becomes the first command held, which the front-end runs again (its TIMEOUT
        starts over)."""
        parked = c.parked
        c.out.remove(self.cancel_wait(c))
        c.held = [parked] + (c.held or [])

    def forget(self, c):
        self.clients.pop(c.fd, None)
        self.by_id.pop(c.id, None)
        try:
            self.ep.unregister(c.fd)
        except (OSError, ValueError):
            pass

    def drop(self, c, report=True):
        """Close the connection (peer gone, CLIENT KILL, idle timeout)."""
        self.cancel_wait(c)
        self.forget(c)
        c.out = []
        c.sock.close()
        if report:
            self.channel.send(handover_msg.Gone.encode(c.id))

    def may_dead_letter(self, w, argv):
        """NACK / ENQUEUE that may move a job to a dead-letter queue, which can put that
        queue on a worker other than its slot's: the front-end must learn it (QUEUE_ELSEWHERE
        arrives with the reply on its path) before this client's next QLEN or GETJOB.
        Another worker's jobs cannot be checked from here: those go back too."""
        if w != self.index:
            return True
        jobs = self.shard.jobs
        for jid in argv[1:]:
            job = jobs.get(jid)
            if job is not None and job.ext is not None:
                return True
            if job is None and self.shard.cold_jobs and self.shard.spill.index.find(jid) >= 0:
                return True         # spilled: its options are on disk
        return False

    # ---- commands of the other workers (disque/workers/peer_links.py; forward, peer_execute
    # and peer_answered are ServedCore's) ------------------------------------------------

    def peer_getjob(self, argv):
        """GETJOB ... NOHANG of our queues that another worker forwards (ServedCore's
        peer_execute runs the other commands itself)."""
        error, o = parse_getjob(argv)
        if error is not None:
            return error
        o.nohang = True         # only a GETJOB that cannot block comes here (ServedCore.getjob_served)
        reply, _ids = self.shard.getjob(o)
        return reply if reply is not None else NULL_ARRAY

    # ---- output --------------------------------------------------------------------------

    def finish_back(self, c):
        """A hand-back that waited for other workers' replies: go now if none is left."""
        if c.back is not None and not c.waiting:
            reason, pending = c.back
            c.back = None
            self.hand_back(c, reason, pending)

    # ---- cron, configuration, figures ----------------------------------------------------

    def cron(self):
        """Every 100 ms: idle `timeout`, the totals and slow commands for the front-end."""
        if self.timeout > 0 and self.clients:
            limit = time.monotonic() - self.timeout
            for c in list(self.clients.values()):
                if c.last_io < limit and not c.blocked_on:  # a waiting producer is not idle
                    log.log(15, "Closing idle client id=%d", c.id)
                    self.drop(c)
        self.tls.cron()
        self.report()

    def send_slow(self):
        if self.slow:
            slow, self.slow = self.slow, []
            self.channel.send(handover_msg.Slowlog.encode(slow))

    def report(self):
        out = self.shard.out
        key = (self.commands, self.net_in, self.net_out)
        if key != self.reported:
            self.reported = key
            out.append(handover_msg.Served.encode(self.index, self.totals()))

    def totals(self):
        return {"commands": self.commands, "net_in": self.net_in, "net_out": self.net_out,
                "calls": {k.decode(): v for k, v in self.shard.served_calls.items()},
                "connections": len(self.clients)}

    def configure(self, conf):
        self.timeout = conf["timeout"]
        self.slowlog_us = conf["slowlog"]
        self.keep_unsent = not conf["output_limited"]
        # the front-end's table, built here by the same kernel (disque/_fast/dispatch.pyx)
        self.table = build_table(commands.command_table(conf["renames"]))

    def close_all(self):
        """The worker stops: what was executed is written (best effort), then closed."""
        self.flush()
        for c in list(self.clients.values()):
            rest = c.take_unsent()      # TLS: records, else plaintext
            ready = [c.take_plain()] if c.tls is not None else [rest]
            while c.out:                # up to a reply still being made
                run = take_ready(c.out)
                if run is None:
                    break
                ready.append(run)
            ready = b"".join(ready)
            if c.tls is not None:
                try:
                    if ready:
                        c.tls.write(ready)
                except (OSError, ValueError):
                    ready = None
                else:
                    ready = rest + (c.tls_pending or b"") + c.tls_out.read()
            if ready:
                try:
                    c.sock.setblocking(True)
                    c.sock.settimeout(1.0)
                    c.sock.sendall(ready)
                except OSError:
                    pass
            self.forget(c)
            c.sock.close()
        self.tls.close_all()
        self.ep.close()
