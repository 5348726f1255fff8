"""Network namespaces for the fault harness: one per node, one for the clients, one hub
holding the bridge. Addresses (10.77.0.0/24) exist only inside these namespaces; nothing
is configured in the root namespace. Every name starts with PREFIX so `cleanup()` can
remove leftovers of an interrupted run (processes in those namespaces by PID, then the
namespaces, which takes their veths and bridge with them).

`Net` is the same with another prefix and subnet, so a test (tests/test_cluster_announce.py)
can have its own namespaces beside a fault run; the module's functions are those of the
harness' own `Net`. `Net.nat` puts a node behind a NAT: reachable from the other namespaces
only at a public address and public ports, translated to what it binds (iptables DNAT)."""
import os
import signal
import subprocess
import time

# another prefix and subnet (DQF_PREFIX=dqg- DQF_SUBNET=10.78.0.) let a second run go on
# beside the first, each in its own namespaces
PREFIX = os.environ.get("DQF_PREFIX", "dqf-")
SUBNET = os.environ.get("DQF_SUBNET", "10.77.0.")


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def in_ns(ns, *args, check=True):
    return sh("ip", "netns", "exec", ns, *args, check=check)


class Net:
    def __init__(self, prefix, subnet):
        self.prefix = prefix
        self.subnet = subnet                # "10.77.0.": addresses are subnet + n
        self.hub = prefix + "hub"
        self.client = prefix + "cli"
        self.client_addr = subnet + "2"

    def node_ns(self, i):
        return "%sn%d" % (self.prefix, i)

    def node_addr(self, i):
        return self.subnet + str(10 + i)

    def existing(self):
        out = sh("ip", "netns", "list", check=False)
        return [line.split()[0] for line in out.splitlines() if line.startswith(self.prefix)]

    def cleanup(self):
        """Kill every process left in our namespaces (by PID) and delete the namespaces."""
        names = self.existing()
        for ns in names:
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(0.2 if names else 0)
        for ns in names:
            sh("ip", "netns", "del", ns, check=False)

    def _attach(self, ns, inner, outer, addr):
        """A veth pair: `inner` in namespace ns with `addr`, `outer` on the hub's bridge."""
        sh("ip", "link", "add", inner, "netns", ns, "type", "veth", "peer", "name", outer,
           "netns", self.hub)
        in_ns(ns, "ip", "addr", "add", addr + "/24", "dev", inner)
        in_ns(ns, "ip", "link", "set", inner, "up")
        in_ns(self.hub, "ip", "link", "set", outer, "master", "br0")
        in_ns(self.hub, "ip", "link", "set", outer, "up")

    def setup(self, n):
        self.cleanup()
        sh("ip", "netns", "add", self.hub)
        in_ns(self.hub, "ip", "link", "add", "br0", "type", "bridge")
        in_ns(self.hub, "ip", "link", "set", "br0", "up")
        in_ns(self.hub, "ip", "link", "set", "lo", "up")
        for i in range(n):
            ns = self.node_ns(i)
            sh("ip", "netns", "add", ns)
            in_ns(ns, "ip", "link", "set", "lo", "up")
            self._attach(ns, "eth0", "h%d" % i, self.node_addr(i))
        sh("ip", "netns", "add", self.client)
        in_ns(self.client, "ip", "link", "set", "lo", "up")
        self._attach(self.client, "eth0", "hc", self.client_addr)

    # ---- partitions: real packet drops with iptables inside the node namespaces ----

    def block(self, i, j):
        """Drop every packet between nodes i and j (both directions, both namespaces)."""
        for a, b in ((i, j), (j, i)):
            in_ns(self.node_ns(a), "iptables", "-A", "INPUT", "-s", self.node_addr(b), "-j", "DROP")
            in_ns(self.node_ns(a), "iptables", "-A", "OUTPUT", "-d", self.node_addr(b), "-j", "DROP")

    def heal(self, n):
        for i in range(n):
            in_ns(self.node_ns(i), "iptables", "-F", check=False)

    def partition(self, n, groups):
        """Nodes see only the nodes of their own group (the clients still see every node)."""
        self.heal(n)
        where = {i: g for g, members in enumerate(groups) for i in members}
        for i in range(n):
            for j in range(i + 1, n):
                if where.get(i) != where.get(j):
                    self.block(i, j)

    def cut_links(self, n, pairs):
        self.heal(n)
        for i, j in pairs:
            self.block(i, j)

    # ---- NAT: a node reachable only at a public address and ports ----

    def nat(self, n, i, public_ip, ports):
        """Node i (of n) behind a NAT: the other nodes' namespaces and the clients' route
        `public_ip` to it, where iptables translates (DNAT) each public port of `ports`
        ({public port: port node i binds}) to its own address and that port; a connection
        from the bridge straight to a bound port is dropped, so only the public address and
        ports reach it."""
        ns, addr = self.node_ns(i), self.node_addr(i)
        for other in [self.node_ns(j) for j in range(n) if j != i] + [self.client]:
            in_ns(other, "ip", "route", "add", public_ip + "/32", "via", addr, "dev", "eth0")
        for public, bound in ports.items():
            in_ns(ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", public_ip, "-p", "tcp",
                  "--dport", str(public), "-j", "DNAT", "--to-destination", "%s:%d" % (addr, bound))
            in_ns(ns, "iptables", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(bound),
                  "-m", "conntrack", "!", "--ctstate", "DNAT", "-j", "DROP")


HARNESS = Net(PREFIX, SUBNET)
HUB, CLIENT, CLIENT_ADDR = HARNESS.hub, HARNESS.client, HARNESS.client_addr
node_ns, node_addr, existing, cleanup = (HARNESS.node_ns, HARNESS.node_addr, HARNESS.existing,
                                         HARNESS.cleanup)
setup, block, heal, partition, cut_links = (HARNESS.setup, HARNESS.block, HARNESS.heal,
                                            HARNESS.partition, HARNESS.cut_links)
