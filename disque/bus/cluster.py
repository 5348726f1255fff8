"""Cluster membership: MEET handshakes, gossip, failure detection (SPEC 4.2, 10).

`Cluster` is driven by its owner's event loop: `on_readable()` when the bus socket has
input, `cron()` every CRON_MS. Job messages (REPLJOB ... PAUSE) from known nodes are
handed to `on_job_messages(sender, [[type, flags, payload], ...])`, a frame's worth at a
time, entries unchecked; the front-end routes them to the owning worker.
"""
import logging
import random

from disque.contracts import bus_messages as bus_msg
from disque.bus.announce import BUS_PORT_OFFSET, announce as default_announce
from disque.bus.nodes import Node, NodesFile, node_address, now_ms, random_id

HEADER_FLAGS = bus_msg.LEAVING | bus_msg.PRESSURE | bus_msg.STOPPING  # a sender's own flags
GOODBYE_LINGER_MS = 200      # how long a stopping node's goodbye may take to leave

log = logging.getLogger("disque.bus")

CRON_MS = 100
FORGET_BLACKLIST_MS = 60000
PING_EVERY_CRONS = 10          # one random ping per second
RELINK_AFTER_MS = 250         # a link that could send nothing this long is made again to answer a node
RECV_LIMIT = 10000


class Cluster:
    def __init__(self, port, bind_addrs, node_timeout_ms, config_path, ctx=None,
                 on_job_messages=None, on_change=None, keys=None, announce=None,
                 open_bus=True):
        """`open_bus` False: the node's identity and table only, no socket and no ZeroMQ
        thread until `open_bus()` or the first use of `transport` (the server forks its
        workers and serves its first clients in between)."""
        self.node_timeout = node_timeout_ms
        self.file = NodesFile(config_path)
        self.file.lock()
        myself, others = self.file.load()
        if myself is None:
            myself = Node(random_id(), flags=bus_msg.MYSELF)
            log.info("No cluster configuration found, I'm %s", myself.id)
        else:
            log.info("Node configuration loaded, I'm %s", myself.id)
        self.myself = myself
        # what this node tells the others (disque/bus/announce.py): myself holds it, so the
        # bus headers, CLUSTER NODES, HELLO and nodes.conf all say the same
        self.announce = announce or default_announce(port, bind_addrs)
        if self.announce.ip:
            myself.ip = self.announce.ip
        myself.port = self.announce.port
        myself.cport = self.announce.cport
        self.nodes = {myself.id: myself}
        for n in others:
            n.flags &= ~(bus_msg.PFAIL | bus_msg.MYSELF)
            self.nodes[n.id] = n
        self.keys = keys
        self.bind = (bind_addrs or ["127.0.0.1"], port + BUS_PORT_OFFSET)
        self.own_ctx = ctx is None
        self.ctx = ctx
        self._transport = None
        self.on_bus_open = None     # called once the bus socket exists (the relay's readers)
        self.blacklist = {}
        self.on_job_messages = on_job_messages
        self.on_change = on_change
        self.on_query = None        # QUERY / ANSWER (disque/frontend/cluster_queries.py)
        self.crons = 0
        self.linger_ms = 0          # GOODBYE_LINGER_MS once goodbye() was said
        self.dirty = True
        self.save_error = None      # why the last save of the config file failed
        self.stats_sent = 0
        self.stats_received = 0
        self.drop_in = False        # DEBUG hooks: cut this node off the bus, still running
        self.drop_out = False
        # the TCP ports where this node's workers take direct job links (docs/design.md,
        # "Direct job links"), told to every node (as announced) after each PING and PONG;
        # None: not sent
        self.job_ports = None
        self.save()
        if open_bus:
            self.open_bus()

    def open_bus(self):
        """The bus socket on port + 10000 (ZeroMQ starts its threads here), linked to every
        node of the table, and returned. ZMQError when the port cannot be bound. ZeroMQ is
        imported here: a node opens its bus after it forked its workers and took the
        clients already waiting (disque/server.py, Node.run), and the workers never use it."""
        if self._transport is not None:
            return self._transport
        import zmq
        from disque.bus.transport import Transport
        keys = self.keys
        if self.ctx is None:
            self.ctx = zmq.Context(1)
        self._transport = Transport(self.ctx, self.myself.id, self.bind[0], self.bind[1], keys)
        if keys is not None:
            log.info("Cluster bus secured with CURVE (%d accepted secret%s)",
                     len(keys.pairs), "s" if len(keys.pairs) > 1 else "")
        # each link PINGs at once, as a new link does in the original: a node read back
        # from nodes.conf counts as just heard from and would otherwise wait up to
        # node_timeout / 2 for its first PING, its workers' job link ports (LINKS) with
        # it, while the producers' copies for it take the bus
        for n in self.others():
            self.link(n)
            if not n.has(bus_msg.HANDSHAKE):
                self.ping(n)
        if self.on_bus_open is not None:
            self.on_bus_open()
        return self._transport

    @property
    def transport(self):
        """The bus socket; a use before the start opened it (a command of the node's first
        clients) opens it then."""
        t = self._transport
        return t if t is not None else self.open_bus()

    @property
    def bus_open(self):
        return self._transport is not None

    # ---- helpers ---------------------------------------------------------------------

    def link(self, node):
        if node.ip and node.port:
            self.transport.connect(node.id, node.ip, node.bus_port)

    def others(self):
        return [n for n in self.nodes.values() if n is not self.myself]

    @property
    def size(self):
        """cluster_size: nodes not in handshake, self included."""
        return sum(1 for n in self.nodes.values() if not n.has(bus_msg.HANDSHAKE))

    def reachable(self):
        bad = (bus_msg.HANDSHAKE | bus_msg.LEAVING | bus_msg.PFAIL | bus_msg.FAIL_FLAG
               | bus_msg.STOPPING)
        return [n for n in self.others() if not n.flags & bad]

    def save(self):
        """Write the cluster config file. A disk that refuses (full, failing) leaves it
        dirty for the cron to try again, and returns False: raising would stop the
        front-end's cron (memory polls, failure detection) for as long as it refuses."""
        try:
            self.file.save(self.myself, list(self.nodes.values()))
        except OSError as e:
            if self.save_error is None:
                log.warning("Can't save the cluster config %s: %s (tried again every 100 ms)",
                            self.file.path, e.strerror or e)
            self.save_error = e.strerror or str(e)
            self.dirty = True
            return False
        if self.save_error is not None:
            log.warning("Cluster config %s saved again", self.file.path)
            self.save_error = None
        self.dirty = False
        return True

    def changed(self, save=True):
        """Membership or flags changed: the workers hear of it; `save`: the config file
        holds what changed (storage pressure is only told, never saved)."""
        if save:
            self.dirty = True
        if self.on_change:
            self.on_change()

    def header_flags(self, sender, node_flags):
        """The flags a sender tells about itself in every header (HEADER_FLAGS)."""
        diff = (node_flags ^ sender.flags) & HEADER_FLAGS
        sender.flags ^= diff
        if diff & bus_msg.STOPPING:
            log.info("Node %s %s", sender.id[:8], "is stopping: no copies for it until it "
                     "speaks again" if sender.has(bus_msg.STOPPING) else "is back")
            if not sender.has(bus_msg.STOPPING) and self.bus_open:
                # a new process: the PING its old one never answered would age into PFAIL,
                # and our connection to it may wait in ZeroMQ's reconnect back-off (up to
                # a second). Made again now; the next cron pings the new process afresh.
                sender.ping_sent = 0
                self.transport.renew(sender.id, 0)
        self.changed(save=bool(diff & ~(bus_msg.PRESSURE | bus_msg.STOPPING)))

    def send(self, node, mtype, payload=None, mflags=0):
        if self.drop_out:
            return False
        me = self.myself
        data = bus_msg.encode(mtype, me.id, me.ip, me.port, me.flags & HEADER_FLAGS, mflags,
                              payload, me.cport)
        if self.transport.send(node.id, data):
            self.stats_sent += 1
            return True
        return False

    def broadcast(self, mtype, payload=None, mflags=0, nodes=None):
        for n in (nodes if nodes is not None else self.others()):
            if not n.has(bus_msg.HANDSHAKE):
                self.send(n, mtype, payload, mflags)

    def gossip(self, exclude=None):
        """Entries about max(3, known/10) random nodes, capped at known-2, failing ones first."""
        candidates = [n for n in self.others()
                      if not n.flags & (bus_msg.HANDSHAKE | bus_msg.NOADDR) and n is not exclude]
        wanted = min(max(3, len(self.nodes) // 10), max(0, len(self.nodes) - 2))
        failing = [n for n in candidates if n.failing]
        rest = [n for n in candidates if not n.failing]
        random.shuffle(rest)
        chosen = (failing + rest)[:wanted]
        return [[n.id, n.ping_sent, n.pong_received, n.ip, n.port, n.flags & ~bus_msg.MYSELF]
                + ([n.cport] if n.cport else []) for n in chosen]

    # ---- commands ---------------------------------------------------------------------

    def meet(self, ip, port, cport=0):
        """CLUSTER MEET: start a handshake (ignored when one to that address is running);
        `cport`: its bus port when not port + 10000."""
        for n in self.nodes.values():
            if n.has(bus_msg.HANDSHAKE) and n.ip == ip and n.port == port:
                return
        node = Node(random_id(), ip, port, bus_msg.HANDSHAKE | bus_msg.MEET_FLAG, cport)
        self.nodes[node.id] = node
        self.link(node)
        self.send(node, bus_msg.MEET, self.gossip())

    def forget(self, node_id):
        node = self.nodes.pop(node_id)
        self.transport.disconnect(node_id)
        self.blacklist[node_id] = now_ms() + FORGET_BLACKLIST_MS
        for n in self.nodes.values():
            n.fail_reports.pop(node_id, None)
        self.changed()
        return node

    def reset(self, hard):
        for n in self.others():
            self.transport.disconnect(n.id)
        self.nodes = {self.myself.id: self.myself}
        if hard:
            old = self.myself.id
            self.myself.id = random_id()
            self.nodes = {self.myself.id: self.myself}
            # Keep the bound ROUTER: closing it and binding a new one at once fails with
            # EADDRINUSE (ZeroMQ closes sockets asynchronously in its I/O thread), which
            # killed the client connection and left the node without a bus. Every outgoing
            # link is closed above; new ones carry the new identity.
            self.transport.my_id = self.myself.id
            log.warning("CLUSTER RESET HARD: node id %s -> %s", old, self.myself.id)
        self.changed()
        self.save()

    def set_pressure(self, bits):
        """This node's storage pressure (M.SPILLING / M.SPILL_FULL), told in every header."""
        me = self.myself
        if me.flags & bus_msg.PRESSURE != bits:
            me.flags = (me.flags & ~bus_msg.PRESSURE) | bits
            self.changed(save=False)

    def set_leaving(self, leaving):
        if leaving:
            self.myself.flags |= bus_msg.LEAVING
        else:
            self.myself.flags &= ~bus_msg.LEAVING
        self.changed()
        self.save()

    def nodes_text(self):
        return "".join(n.line(self.myself) + "\n" for n in self.nodes.values())

    def info_text(self):
        return ("cluster_state:ok\r\ncluster_known_nodes:%d\r\ncluster_reachable_nodes:%d\r\n"
                "cluster_size:%d\r\ncluster_stats_messages_sent:%d\r\n"
                "cluster_stats_messages_received:%d\r\n" % (
                    len(self.nodes), len(self.reachable()), self.size,
                    self.stats_sent, self.stats_received))

    def bus_info_fields(self):
        """INFO cluster (our own section, docs/security.md)."""
        keys = self.transport.keys
        return [("cluster_bus_secured", int(keys is not None)),
                ("cluster_bus_accepted_secrets", len(keys.pairs) if keys is not None else 0),
                ("cluster_bus_handshakes_refused", self.transport.guard.refused)]

    def hello_entries(self):
        """HELLO node list: [id, ip, port, priority] with SPEC 4.1 priorities."""
        out = []
        for n in self.nodes.values():
            prio = 1
            if n is not self.myself and not n.linked:
                prio = 5
            if n.has(bus_msg.SPILLING):
                prio = 2            # its backlog spills to disk: another node is better
            if n.has(bus_msg.PFAIL):
                prio = 10
            if n.has(bus_msg.SPILL_FULL):
                prio = 50           # refuses new jobs until its spill disk writes again
            if n.flags & (bus_msg.FAIL_FLAG | bus_msg.LEAVING | bus_msg.STOPPING):
                prio = 100
            out.append([n.id, n.ip, str(n.port), str(prio)])
        return out

    # ---- input ------------------------------------------------------------------------

    def on_readable(self):
        """Process what the bus socket holds; True when more may be left (read limit)."""
        batch = self.transport.recv_all(RECV_LIMIT)
        if self.drop_in:
            return len(batch) >= RECV_LIMIT
        for ident, data, peer in batch:
            msg = bus_msg.decode(data, peer)
            if msg is None or ident.decode(errors="replace") != msg.sender:
                continue
            self.stats_received += 1
            self.process(msg)
        if self.dirty:
            self.save()
        return len(batch) >= RECV_LIMIT

    def process(self, msg):
        now = now_ms()
        sender = self.nodes.get(msg.sender)
        if msg.type == bus_msg.JOBS:
            # the hot path (thousands per second under load): job messages only come from
            # nodes we know; membership news travels in PING/PONG/MEET
            if sender is None or sender.flags & bus_msg.HANDSHAKE or sender is self.myself:
                return
            sender.last_seen = now
            sender.linked = True
            if (msg.node_flags & HEADER_FLAGS) != (sender.flags & HEADER_FLAGS):
                self.header_flags(sender, msg.node_flags)
            if self.on_job_messages is not None and msg.payload:
                self.on_job_messages(sender, msg.payload)
            return
        if msg.sender == self.myself.id:
            return
        if sender is None:
            if msg.type == bus_msg.MEET and not self.blacklisted(msg.sender):
                sender = Node(msg.sender, msg.ip or msg.peer_ip, msg.port, cport=msg.cport)
                self.nodes[sender.id] = sender
                self.link(sender)
                log.info("Node %s (%s) met us", sender.id[:8], sender.addr_text())
                self.changed()
            elif msg.type == bus_msg.PONG:
                sender = self.complete_handshake(msg)
            if sender is None:
                return
        sender.last_seen = now
        sender.linked = True
        self.drop_handshakes_to(sender)
        if (msg.node_flags & HEADER_FLAGS) != (sender.flags & HEADER_FLAGS):
            self.header_flags(sender, msg.node_flags)
        address = node_address(msg.ip or msg.peer_ip, msg.port, msg.cport)
        if (address is not None and sender.address != address
                and not sender.has(bus_msg.HANDSHAKE)):
            sender.ip, sender.port, sender.cport = address
            self.link(sender)
            self.changed()
        if msg.type in (bus_msg.PING, bus_msg.MEET):
            answered = self.send(sender, bus_msg.PONG, self.gossip(exclude=sender))
            if answered or not self.relink(sender):     # relink's PING carries the LINKS
                self.send_links(sender)
            self.process_gossip(sender, msg.payload)
        elif msg.type == bus_msg.PONG:
            sender.pong_received = now
            sender.ping_sent = 0
            if sender.failing:
                if sender.has(bus_msg.FAIL_FLAG):
                    log.info("Clear FAIL state for node %s: it is reachable again", sender.id[:8])
                sender.flags &= ~(bus_msg.PFAIL | bus_msg.FAIL_FLAG)
                self.changed()
            self.process_gossip(sender, msg.payload)
        elif msg.type == bus_msg.FAIL:
            target = self.nodes.get(msg.payload)
            if (target is not None and target is not self.myself
                    and not target.has(bus_msg.FAIL_FLAG)):
                target.flags = (target.flags | bus_msg.FAIL_FLAG) & ~bus_msg.PFAIL
                log.info("FAIL message received from %s about %s", sender.id[:8], target.id[:8])
                self.changed()
        elif msg.type == bus_msg.LINKS:
            ports = tuple(msg.payload)
            if ports != sender.job_ports and not sender.has(bus_msg.HANDSHAKE):
                sender.job_ports = ports
                self.changed()
        elif msg.type in (bus_msg.QUERY, bus_msg.ANSWER):
            if self.on_query is not None:
                self.on_query(sender, msg)
        elif msg.type in bus_msg.JOB_TYPES and self.on_job_messages is not None:
            self.on_job_messages(
                sender, [bus_msg.JobMessage.encode(msg.type, msg.flags, msg.payload)])

    def complete_handshake(self, msg):
        """A PONG from an unknown ID answers our MEET: rename the handshake node."""
        ip = msg.ip or msg.peer_ip
        for n in list(self.nodes.values()):
            if n.has(bus_msg.HANDSHAKE) and n.port == msg.port and (n.ip == ip or not ip):
                if msg.sender in self.nodes or self.blacklisted(msg.sender):
                    del self.nodes[n.id]
                    self.transport.disconnect(n.id)
                    return self.nodes.get(msg.sender)
                del self.nodes[n.id]
                self.transport.rename(n.id, msg.sender)
                n.id = msg.sender
                n.flags &= ~(bus_msg.HANDSHAKE | bus_msg.MEET_FLAG)
                self.nodes[n.id] = n
                log.info("Handshake with node %s (%s) completed", n.id[:8], n.addr_text())
                self.changed()
                # our job link ports at once, not with the next PING (up to a second away):
                # until they arrive its workers' copies for us go the slow way, by the bus
                self.send_links(n)
                return n
        return None

    def drop_handshakes_to(self, node):
        """A handshake to the address of a node we now know by ID is redundant."""
        for n in list(self.nodes.values()):
            if n.has(bus_msg.HANDSHAKE) and n.ip == node.ip and n.port == node.port:
                del self.nodes[n.id]
                self.transport.disconnect(n.id)

    def known_address(self, ip, port, cport=0):
        return any(n.ip == ip and n.port == port for n in self.nodes.values())

    def blacklisted(self, node_id):
        expire = self.blacklist.get(node_id)
        if expire is None:
            return False
        if expire < now_ms():
            del self.blacklist[node_id]
            return False
        return True

    def process_gossip(self, sender, entries):
        now = now_ms()
        for entry in entries:
            node_id, _ping, _pong, ip, port, flags = entry[:6]
            if node_id == self.myself.id:
                continue
            node = self.nodes.get(node_id)
            if node is not None:
                if flags & (bus_msg.PFAIL | bus_msg.FAIL_FLAG):
                    node.fail_reports[sender.id] = now
                else:
                    node.fail_reports.pop(sender.id, None)
            elif not flags & bus_msg.NOADDR and not self.blacklisted(node_id):
                address = node_address(ip, port, entry[6] if len(entry) > 6 else 0)
                if address is not None and not self.known_address(*address):
                    self.meet(*address)

    # ---- cron -------------------------------------------------------------------------

    def cron(self):
        self.transport.guard.cron()
        now = now_ms()
        self.crons += 1
        timeout = self.node_timeout
        handshake_timeout = max(timeout, 1000)
        for n in self.others():
            if n.has(bus_msg.HANDSHAKE):
                if now - n.created > handshake_timeout:
                    del self.nodes[n.id]
                    self.transport.disconnect(n.id)
                    log.warning("Handshake with %s timed out: the node is down, unreachable at "
                                "that address (behind NAT: docs/cluster.md, \"Announced "
                                "addresses\"), or does not share this node's cluster secret (%s)",
                                n.addr_text(),
                                "this bus is secured" if self.transport.keys else "this bus is open")
                else:
                    self.send(n, bus_msg.MEET, self.gossip())
                continue
            n.linked = now - n.last_seen < timeout if n.last_seen else False
        candidates = [n for n in self.others() if not n.has(bus_msg.HANDSHAKE)]
        if self.crons % PING_EVERY_CRONS == 0 and candidates:
            sample = random.sample(candidates, min(5, len(candidates)))
            sample = [n for n in sample if not n.ping_sent]
            if sample:
                self.ping(min(sample, key=lambda n: n.pong_received))
        resend = min(timeout // 2, 1000)
        for n in candidates:
            if (n.ping_sent and now - n.ping_sent > timeout // 2
                    and self.transport.renew(n.id, timeout)):
                # SPEC 10.5: a link waiting for its PONG is made again (a stalled TCP
                # connection recovers minutes after the path); the workers renew their
                # job links to that node with it (cluster_relay push: relinks)
                n.relinks += 1
                self.ping(n)
            elif not n.ping_sent and now - n.pong_received > timeout // 2:
                self.ping(n)
            elif n.ping_sent and (n.ping_dropped or now - n.ping_tx > resend):
                # ZeroMQ reconnects silently and drops what it could not deliver: keep
                # asking, so a node that comes back answers and clears its failure flags
                self.ping(n)
            if n.ping_sent and now - n.ping_sent > timeout and not n.failing:
                n.flags |= bus_msg.PFAIL
                log.info("Marking node %s as failing (quorum needed)", n.id[:8])
            if n.has(bus_msg.PFAIL):
                self.check_fail(n, now)
        if self.dirty:
            self.save()

    def ping(self, node):
        # a PING dropped for want of a live connection (ZMQ_IMMEDIATE: a node restarting,
        # our connection to it not made yet) is tried again at the next cron, not a resend
        # interval later; it still counts for failure detection
        node.ping_dropped = not self.send(node, bus_msg.PING, self.gossip(exclude=node))
        self.send_links(node)
        node.ping_tx = now_ms()
        if not node.ping_sent:
            node.ping_sent = node.ping_tx

    def relink(self, node):
        """A node we hear from but cannot answer: our link to it waits in ZeroMQ's reconnect
        back-off (up to a second after the node restarted) when it could send nothing for
        RELINK_AFTER_MS. Made again then, with a PING the cron sends again until it leaves:
        our job link ports go with it, and the restarted node's workers link to ours only
        once it has them. True when it PINGed."""
        if self.drop_out or node.has(bus_msg.HANDSHAKE):
            return False
        self.transport.relink_stuck(node.id, RELINK_AFTER_MS)
        self.ping(node)
        return True

    def send_links(self, node):
        """LINKS after each PING and PONG: a node learns our workers' ports within a
        second of meeting us, and again after we restart with new ones."""
        if self.job_ports is not None and not node.has(bus_msg.HANDSHAKE):
            self.send(node, bus_msg.LINKS, self.announce.job_link_ports(self.job_ports))

    def check_fail(self, node, now):
        valid = 2 * self.node_timeout
        for reporter, when in list(node.fail_reports.items()):
            if now - when > valid or reporter not in self.nodes:
                del node.fail_reports[reporter]
        if len(node.fail_reports) + 1 >= self.size // 2 + 1:
            node.flags = (node.flags | bus_msg.FAIL_FLAG) & ~bus_msg.PFAIL
            log.info("Marking node %s as failing (quorum reached)", node.id[:8])
            self.broadcast(bus_msg.FAIL, node.id)
            self.changed()

    def goodbye(self):
        """A graceful stop (SHUTDOWN, SIGTERM): every node hears it at once, instead of
        finding out a node timeout later while its copies wait on this one, and its
        clients' HELLO puts this node last. Sent as a PING with STOPPING in its header; this
        node's next start clears it with its first message. The messages leave while the
        node closes (close lingers GOODBYE_LINGER_MS for them)."""
        if not self.bus_open:
            return
        self.myself.flags |= bus_msg.STOPPING
        for n in self.others():
            if not n.has(bus_msg.HANDSHAKE):
                self.send(n, bus_msg.PING, self.gossip(exclude=n))
        self.linger_ms = GOODBYE_LINGER_MS

    def close(self):
        if self._transport is not None:
            self._transport.close(self.linger_ms)
        self.file.unlock()
        if self.own_ctx and self.ctx is not None:
            self.ctx.term()
