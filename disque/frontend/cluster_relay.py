"""The front-end's side of the cluster: it owns the bus (disque.bus.Cluster) and is the
relay between the bus and the workers (docs/design.md: a bus message about a job is routed
to the worker that owns the job). The workers' halves of the job messages are in
disque/workers/replication.py and disque/workers/federation.py.

  bus -> worker: a job message goes to the worker owning the slot of its job ID (or of the
      queue for NEEDJOBS / INTEREST / PAUSE), batched per worker per read.
  worker -> bus: workers return (destinations, type, flags, payload) entries with their
      replies; they are grouped per destination node into one JOBS frame per batch.
  membership -> workers: size, reachable and known nodes, LEAVING and the node ID are
      pushed to every worker whenever they change.

Also here: CLUSTER (SPEC 4.2), HELLO's node list and the DEBUG hooks that cut the node off
the bus for partition tests.
"""
import logging

from disque import replies
from disque.replies import one_line
from disque._fast import resp
from disque._fast.busrelay import (ACCEPT_COPIES, FORWARD_COPIES, REFUSE_COPIES,
                                   group_by_node, route_job_messages)
from disque.bus.nodes import node_address
from disque.contracts import bus_messages as bus_msg
from disque.contracts import worker_link as link_msg

log = logging.getLogger("disque.cluster")

WRONG_CLUSTER = b"-ERR Wrong CLUSTER subcommand or number of arguments\r\n"


class ClusterRelay:
    """Needs from the node (`fe`): nworkers, loop, send, new_reqid, control_all, clustered
    and node_id (set here from the membership), `fe.memory.level` and
    `fe.persistence.aof_enabled` (whether a copy is accepted). Offers: attach, cron,
    bus_from_worker (a hook of the Cython core), cmd_cluster, hello_reply, debug_bus;
    `cluster` is the bus (None on a node started without one)."""

    def __init__(self, fe):
        self.fe = fe
        self.cluster = None
        self.state = None            # the membership last pushed to the workers
        self.bus_inbox = {}          # worker -> [[sender, type, flags, payload], ...]
        self.bus_outbox = {}         # node id -> [[type, flags, payload], ...]
        self.bus_ids = {}            # node id -> the same as bytes (workers' form)
        self.node_names = {}         # and back: bytes -> str
        self.bus_flush_scheduled = False

    def attach(self, cluster):
        self.cluster = cluster
        cluster.on_job_messages = self.bus_job_messages
        cluster.on_change = self.push
        cluster.on_query = self.fe.cluster_queries.on_bus
        cluster.on_bus_open = self.bus_opened
        if cluster.bus_open:
            self.bus_opened()
        self.push()

    def bus_opened(self):
        """The bus socket exists (the node opens it once its first clients are taken):
        its reads join the loop."""
        transport = self.cluster.transport
        self.fe.loop.add_reader(transport.fileno(), self.bus_readable)
        guard = transport.guard
        for fd in guard.fds():
            self.fe.loop.add_reader(fd, guard.on_readable)
        guard.on_readable()         # a ZeroMQ FD only signals news: take what came before

    def bus_readable(self):
        more = self.cluster.on_readable()
        inbox = self.bus_inbox
        if inbox:
            self.bus_inbox = {}
            for w, msgs in inbox.items():
                self.fe.send(w, link_msg.Bus.encode(msgs))
        if more:
            # ZeroMQ signals edges: what is left after the read limit needs another pass
            self.fe.loop.call_soon(self.bus_readable)

    def bus_job_messages(self, sender, msgs):
        """The job messages of one frame from a known node: each to the worker that owns it
        (disque/_fast/busrelay.pyx), the GOTJOBs of accepted copies back to the sender."""
        gotjobs = []
        route_job_messages(msgs, self.sender_id(sender), self.fe.nworkers, self.bus_inbox,
                           self.copy_policy(), gotjobs)
        if gotjobs:
            self.bus_outbox.setdefault(sender.id, []).extend(gotjobs)
            self.schedule_flush()

    def copy_policy(self):
        """Whether this node takes copies (REPLJOB) and who answers them (SPEC 8.7, 9: not
        while leaving or above 75% of maxmemory; then no GOTJOB, the originator asks another
        node). Without an AOF the GOTJOB leaves from here, with the copy on its way to the
        worker over a link that loses nothing unless the whole node dies, when the copy
        would be gone anyway: this saves the worker -> front-end hop on every copy, the
        largest cost of synchronous replication (measured). With an AOF the worker answers
        after its LOADJOB record is written."""
        if self.fe.memory.level > 0 or self.cluster.myself.flags & bus_msg.LEAVING:
            return REFUSE_COPIES
        if self.fe.persistence.aof_enabled:
            return FORWARD_COPIES
        return ACCEPT_COPIES

    def sender_id(self, sender):
        sid = self.bus_ids.get(sender.id)
        if sid is None:
            sid = self.bus_ids[sender.id] = sender.id.encode()
        return sid

    def bus_from_worker(self, entries):
        """Job messages a worker wants sent: one JOBS frame per destination node."""
        cluster = self.cluster
        if cluster is None:
            return
        if group_by_node(entries, self.bus_outbox, cluster.myself.id, self.everyone,
                         self.node_names):
            self.schedule_flush()

    def everyone(self):
        return [n.id for n in self.cluster.others() if not n.has(bus_msg.HANDSHAKE)]

    def schedule_flush(self):
        """bus_flush sends what is queued when the loop iteration ends."""
        if not self.bus_flush_scheduled:
            self.bus_flush_scheduled = True
            self.fe.loop.call_soon(self.bus_flush)

    def bus_flush(self):
        """End of a loop iteration: what every worker sent this iteration, one frame per node."""
        self.bus_flush_scheduled = False
        cluster = self.cluster
        frames = self.bus_outbox
        self.bus_outbox = {}
        nodes = cluster.nodes
        for node_id, msgs in frames.items():
            node = nodes.get(node_id)
            if node is not None:
                cluster.send(node, bus_msg.JOBS, msgs)

    # ---- membership pushed to workers ---------------------------------------------------

    def push(self):
        """Tell the workers what they need of the membership, when it changed."""
        c = self.cluster
        me = c.myself
        reachable = c.reachable()
        state = {
            "myid": me.id.encode(),
            "size": c.size,
            "reachable": sorted(n.id.encode() for n in reachable),
            # below 75% of their maxmemory counting spilled jobs: where external replication
            # goes first (docs/memory.md, "Spilling and the memory levels")
            "roomy": sorted(n.id.encode() for n in reachable if not n.has(bus_msg.MEMORY_HIGH)),
            "known": sorted(n.id.encode() for n in c.nodes.values()
                            if not n.has(bus_msg.HANDSHAKE)),
            # the nodes a job group's home is chosen among (docs/job-groups.md): not
            # failed, leaving or stopping; a node that may only be slow (PFAIL) stays
            "members": sorted(n.id.encode() for n in c.nodes.values()
                              if not n.flags & bus_msg.GROUP_OUTSIDERS),
            "leaving": bool(me.flags & bus_msg.LEAVING),
            # direct job links (docs/design.md): where each other node's workers take them,
            # and whether DEBUG BUS cuts this node off (the workers then use the bus only)
            "links": ({n.id.encode(): [n.ip, list(n.job_ports), n.relinks] for n in c.others()
                       if n.job_ports and n.ip and not n.has(bus_msg.HANDSHAKE)}
                      if c.job_ports else {}),
            "drop": c.drop_in or c.drop_out,
        }
        if state == self.state:
            return
        self.state = state
        self.fe.clustered = state["size"] > 1
        self.fe.node_id = state["myid"]
        for w in range(self.fe.nworkers):
            self.fe.send(w, link_msg.Control.encode(self.fe.new_reqid(w), "cluster", state))

    def push_then_ok(self, client):
        """push, and +OK once every worker has the new state (a ping behind it on each
        link): a copy that comes straight from another node's worker (direct job links)
        meets the new LEAVING or DEBUG BUS state from the reply on."""
        self.push()
        s = client.slot()
        self.fe.control_all("ping", None, lambda res: s.fill(resp.OK))

    def cron(self):
        self.cluster.cron()
        self.push()             # reachability changes with time (PFAIL, links)

    # ---- CLUSTER (SPEC 4.2) ---------------------------------------------------------------

    def cmd_cluster(self, client, argv):
        c = self.cluster
        sub = argv[1].lower()
        n = len(argv)
        if sub == b"meet" and n in (4, 5):
            self.meet(client, argv[2], argv[3], argv[4] if n == 5 else None)
        elif sub == b"nodes" and n == 2:
            client.reply(resp.bulk(c.nodes_text().encode()))
        elif sub == b"myid" and n == 2:
            client.reply(resp.bulk(c.myself.id.encode()))
        elif sub == b"info" and n == 2:
            client.reply(resp.bulk(c.info_text().encode()))
        elif sub == b"saveconfig" and n == 2:
            if c.save():
                client.reply(resp.OK)
            else:
                client.reply(b"-ERR error saving the cluster node config: %s\r\n"
                             % c.save_error.encode())
        elif sub == b"forget" and n == 3:
            self.forget(client, argv[2])
        elif sub == b"reset" and n in (2, 3):
            mode = argv[2].lower() if n == 3 else b"soft"
            if mode not in (b"soft", b"hard"):
                client.reply(replies.SYNTAX_ERROR)
                return
            c.reset(mode == b"hard")          # calls cluster_push (on_change)
            s = client.slot()
            self.fe.control_all("flushall", None, lambda res: s.fill(resp.OK))
        elif sub == b"leaving" and n == 2:
            client.reply(b"+yes\r\n" if c.myself.has(bus_msg.LEAVING) else b"+no\r\n")
        elif sub == b"leaving" and n == 3:
            arg = argv[2].lower()
            if arg not in (b"yes", b"no"):
                client.reply(b"-ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'\r\n")
                return
            c.set_leaving(arg == b"yes")
            self.push_then_ok(client)
        else:
            client.reply(WRONG_CLUSTER)

    def meet(self, client, ip_arg, port_arg, bus_port_arg=None):
        """CLUSTER MEET ip port [bus-port] (the bus port as Redis 7 takes it: for a node
        whose bus is not on port + 10000, docs/cluster.md "Announced addresses")."""
        port = resp.parse_int(port_arg)
        if port is None:
            client.reply(b"-ERR Invalid TCP port specified: %s\r\n" % one_line(port_arg))
            return
        cport = 0
        if bus_port_arg is not None:
            cport = resp.parse_int(bus_port_arg)
            if cport is None or not 0 < cport < 65536:
                client.reply(b"-ERR Invalid TCP bus port specified: %s\r\n" % one_line(bus_port_arg))
                return
        address = node_address(ip_arg.decode(errors="replace"), port, cport)
        if address is None:
            client.reply(b"-ERR Invalid node address specified: %s:%s\r\n"
                         % (one_line(ip_arg), one_line(port_arg)))
            return
        self.cluster.meet(*address)
        client.reply(resp.OK)

    def forget(self, client, node_arg):
        c = self.cluster
        node_id = node_arg.decode(errors="replace")
        if len(node_arg) != 40:
            client.reply(b"-ERR Invalid node identifier\r\n")
        elif node_id == c.myself.id:
            client.reply(b"-ERR I tried hard but I can't forget myself...\r\n")
        elif node_id not in c.nodes:
            client.reply(b"-ERR Unknown node %s\r\n" % one_line(node_arg))
        else:
            c.forget(node_id)
            c.save()
            self.push()
            client.reply(resp.OK)

    def hello_reply(self):
        c = self.cluster
        entries = c.hello_entries()
        parts = [b"*%d\r\n:1\r\n" % (2 + len(entries)), resp.bulk(c.myself.id.encode())]
        for e in entries:
            parts.append(resp.bulk_array([f.encode() for f in e]))
        return b"".join(parts)

    # ---- DEBUG hooks for partition tests --------------------------------------------------

    def debug_bus(self, client, mode):
        """DEBUG BUS DROP-IN|DROP-OUT|DROP-ALL|RESTORE: drop this node's bus traffic in one or
        both directions while it keeps running, so tests can cut and heal partitions."""
        c = self.cluster
        mode = mode.lower()
        if mode == b"drop-in":
            c.drop_in = True
        elif mode == b"drop-out":
            c.drop_out = True
        elif mode == b"drop-all":
            c.drop_in = c.drop_out = True
        elif mode == b"restore":
            c.drop_in = c.drop_out = False
        else:
            client.reply(b"-ERR DEBUG BUS takes DROP-IN, DROP-OUT, DROP-ALL or RESTORE\r\n")
            return
        log.warning("DEBUG BUS %s: dropping %s bus traffic", mode.decode(),
                    "/".join(d for d, on in (("incoming", c.drop_in), ("outgoing", c.drop_out))
                             if on) or "no")
        self.push_then_ok(client)       # the workers' direct job links obey it too

