"""Known nodes and the cluster config file (SPEC 10.1, 10.6).

nodes.conf holds one line per node (handshake nodes excluded):
    <id> <ip>:<port>[@<bus port>] <flags> <ping_sent_ms> <pong_received_ms> <connected|disconnected>
with exactly one `myself` (the bus port only when it is not port + 10000, as Redis Cluster
writes it: docs/cluster.md, "Announced addresses"). It is rewritten atomically (temp file + rename) whenever
membership, addresses or FAIL/LEAVING change; because a rename replaces the inode, the
lock that stops two nodes from sharing it is held on a sidecar `<file>.lock`.
"""
import fcntl
import os

from disque import nodeclock
from disque.config.constants import BUS_PORT_OFFSET
from disque.contracts import bus_messages as bus_msg

FLAG_ORDER = ((bus_msg.MYSELF, "myself"), (bus_msg.PFAIL, "fail?"),
              (bus_msg.FAIL_FLAG, "fail"), (bus_msg.HANDSHAKE, "handshake"),
              (bus_msg.NOADDR, "noaddr"), (bus_msg.LEAVING, "leaving"))
FILE_FLAGS = {"myself": bus_msg.MYSELF, "fail?": bus_msg.PFAIL, "fail": bus_msg.FAIL_FLAG,
              "noaddr": bus_msg.NOADDR, "leaving": bus_msg.LEAVING, "noflags": 0}


MAX_NODE_PORT = 65535 - BUS_PORT_OFFSET     # its bus listens on port + 10000 (SPEC 10)


def now_ms():
    return nodeclock.now_ms()     # a wall-clock step must not fail or revive nodes


def node_address(ip, port, cport=0):
    """The address a node can be met at, in its canonical form ("127.0.0.1", 7711, 0), or
    None: an IP literal, a port and a bus port that exist (`cport`, 0: port + 10000).
    CLUSTER MEET, gossip and a peer's own claim about its address all go through here, so
    what nodes.conf and the links get is always an address."""
    if type(port) is not int or not isinstance(ip, str) or type(cport) is not int:
        return None
    if not 0 < port < 65536 or not 0 <= cport < 65536 or (not cport and port > MAX_NODE_PORT):
        return None
    if cport == port + BUS_PORT_OFFSET:
        cport = 0
    import ipaddress            # the first node met pays for it, not every start
    try:
        return str(ipaddress.ip_address(ip)), port, cport
    except ValueError:
        return None


def random_id():
    return os.urandom(20).hex()


class Node:
    __slots__ = ("id", "ip", "port", "flags", "ping_sent", "pong_received", "created",
                 "fail_reports", "last_seen", "linked", "ping_tx", "ping_dropped", "job_ports",
                 "cport", "relinks")

    def __init__(self, node_id, ip="", port=0, flags=0, cport=0):
        self.id = node_id
        self.ip = ip
        self.port = port
        self.cport = cport          # its bus port when not port + 10000 (announced), else 0
        self.flags = flags
        self.ping_sent = 0          # ms when the pending PING was sent, 0 = none pending
        self.pong_received = 0
        self.created = now_ms()
        self.fail_reports = {}      # reporter id -> ms of its latest PFAIL/FAIL gossip
        self.last_seen = 0          # ms of the last message received from it
        self.linked = False
        self.ping_tx = 0            # ms of the last PING actually sent (resends included)
        self.ping_dropped = False   # the last PING found no live connection (tried again)
        self.job_ports = ()         # its workers' direct job link ports (LINKS), if any
        self.relinks = 0            # our links to it made again (stalled): workers follow

    @property
    def bus_port(self):
        return self.cport or self.port + BUS_PORT_OFFSET

    @property
    def address(self):
        return self.ip, self.port, self.cport

    def addr_text(self):
        """ip:port, and @bus port when it is not port + 10000 (Redis Cluster's form)."""
        text = "%s:%d" % (self.ip, self.port)
        return text + "@%d" % self.cport if self.cport else text

    def has(self, flag):
        return bool(self.flags & flag)

    @property
    def failing(self):
        return bool(self.flags & (bus_msg.PFAIL | bus_msg.FAIL_FLAG))

    def flag_names(self):
        names = [name for bit, name in FLAG_ORDER if self.flags & bit]
        return ",".join(names) if names else "noflags"

    def line(self, myself):
        connected = "connected" if (self is myself or self.linked) else "disconnected"
        return "%s %s %s %d %d %s" % (self.id, self.addr_text(), self.flag_names(),
                                      self.ping_sent, self.pong_received, connected)

    def __repr__(self):
        return "<Node %s %s %s>" % (self.id[:8], self.addr_text(), self.flag_names())


class ConfigFileError(Exception):
    pass


class NodesFile:
    """The locked cluster config file."""

    def __init__(self, path):
        self.path = path
        self.lock_fd = None

    def lock(self):
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigFileError(
                "Sorry, the cluster configuration file %s is already used by a different "
                "Disque node. Please make sure that different nodes use different cluster "
                "configuration files." % self.path)
        self.lock_fd = fd

    def unlock(self):
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def load(self):
        """(myself, [other nodes]) from the file, or (None, []) when it is empty."""
        try:
            with open(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            return None, []
        myself = None
        others = []
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("vars "):
                continue
            parts = line.split(" ")
            if len(parts) != 6:
                raise ConfigFileError("Unrecoverable error: corrupted cluster config file "
                                      "%s at line %d: %r" % (self.path, lineno, raw))
            node_id, addr, flags_text, ping_sent, pong_received, _link = parts
            ip, _, port = addr.rpartition(":")
            port, _, cport = port.partition("@")
            try:
                port = int(port)
                cport = int(cport) if cport else 0
                flags = 0
                for name in flags_text.split(","):
                    flags |= FILE_FLAGS[name]
            except (ValueError, KeyError):
                raise ConfigFileError("Unrecoverable error: corrupted cluster config file "
                                      "%s at line %d: %r" % (self.path, lineno, raw))
            if len(node_id) != 40:
                raise ConfigFileError("Unrecoverable error: bad node id in %s at line %d"
                                      % (self.path, lineno))
            node = Node(node_id, ip, port, flags, cport)
            stamp = now_ms()
            node.ping_sent = stamp if ping_sent != "0" else 0
            node.pong_received = stamp if pong_received != "0" else 0
            if flags & bus_msg.MYSELF:
                if myself is not None:
                    raise ConfigFileError("Unrecoverable error: more than one 'myself' "
                                          "node in %s" % self.path)
                myself = node
            else:
                others.append(node)
        if others and myself is None:
            raise ConfigFileError("Unrecoverable error: no 'myself' node in %s" % self.path)
        return myself, others

    def save(self, myself, nodes):
        lines = [n.line(myself) for n in nodes if not n.has(bus_msg.HANDSHAKE)]
        tmp = self.path + ".tmp-%d" % os.getpid()
        try:
            with open(tmp, "w") as f:
                f.write("\n".join(lines) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)      # a half-written file would hold the space it lacks
            except OSError:
                pass
            raise
