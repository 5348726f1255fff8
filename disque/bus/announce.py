"""Where this node tells the others it is (docs/cluster.md, "Announced addresses").

The one place that turns the configuration into "my address": the IP, client port and bus
port in every bus header (and so in the other nodes' CLUSTER NODES, HELLO and nodes.conf),
the myself line of this node's CLUSTER NODES and HELLO, and the job link ports of the LINKS
message. Behind NAT or in a container the addresses a node binds are not the ones the other
nodes reach it at; `cluster-announce-ip`, `cluster-announce-port`,
`cluster-announce-bus-port` (Redis Cluster's directives) and `cluster-announce-job-link-port`
say what to tell instead. Unset, a node tells what it binds, as before: its first specific
bind address (none when it binds every interface: the receiver then takes the address the
message came from), its port, port + 10000 and its job links' ports.
"""
from typing import NamedTuple

from disque.config.constants import BUS_PORT_OFFSET

ANY_ADDRESS = ("0.0.0.0", "::", "*")


class Announce(NamedTuple):
    ip: str             # "" : none to tell, the receivers use the address they see
    port: int           # the client port told
    bus_port: int       # the bus port told
    job_link_base: int  # 0: tell the ports the job links listen on; else worker w is base + w

    @property
    def cport(self):
        """The bus port as the header carries it: 0 when it is the implicit port + 10000,
        so that a node without these directives sends what it always sent."""
        return 0 if self.bus_port == self.port + BUS_PORT_OFFSET else self.bus_port

    def job_link_ports(self, listening):
        """The ports told in LINKS for the ports the workers listen on."""
        if not listening or not self.job_link_base:
            return list(listening or ())
        return [self.job_link_base + w for w in range(len(listening))]


def announce(port, bind_addrs, ip=None, announce_port=0, announce_bus_port=0,
             job_link_base=0):
    if not ip:
        ip = next((a for a in bind_addrs or () if a not in ANY_ADDRESS), "")
    return Announce(ip, announce_port or port, announce_bus_port or port + BUS_PORT_OFFSET,
                    job_link_base)


def from_config(cfg):
    """The Announce of a configuration (`port`, or `tls-port` on a TLS-only node, `bind` and
    the cluster-announce-* directives)."""
    return announce(cfg.node_port, cfg.bind or ["127.0.0.1"], cfg.cluster_announce_ip,
                    cfg.cluster_announce_port, cfg.cluster_announce_bus_port,
                    cfg.cluster_announce_job_link_port)
