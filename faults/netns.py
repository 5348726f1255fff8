"""Network namespaces for the fault harness: one per node, one for the clients, one hub
holding the bridge. Addresses (10.77.0.0/24) exist only inside these namespaces; nothing
is configured in the root namespace. Every name starts with PREFIX so `cleanup()` can
remove leftovers of an interrupted run (processes in those namespaces by PID, then the
namespaces, which takes their veths and bridge with them)."""
import os
import signal
import subprocess
import time

PREFIX = "dqf-"
HUB = PREFIX + "hub"
CLIENT = PREFIX + "cli"
SUBNET = "10.77.0."
CLIENT_ADDR = SUBNET + "2"


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def in_ns(ns, *args, check=True):
    return sh("ip", "netns", "exec", ns, *args, check=check)


def node_ns(i):
    return "%sn%d" % (PREFIX, i)


def node_addr(i):
    return SUBNET + str(10 + i)


def existing():
    out = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def cleanup():
    """Kill every process left in our namespaces (by PID) and delete the namespaces."""
    names = existing()
    for ns in names:
        for pid in sh("ip", "netns", "pids", ns, check=False).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    time.sleep(0.2 if names else 0)
    for ns in names:
        sh("ip", "netns", "del", ns, check=False)


def _attach(ns, inner, outer, addr):
    """A veth pair: `inner` in namespace ns with `addr`, `outer` on the hub's bridge."""
    sh("ip", "link", "add", inner, "netns", ns, "type", "veth", "peer", "name", outer,
       "netns", HUB)
    in_ns(ns, "ip", "addr", "add", addr + "/24", "dev", inner)
    in_ns(ns, "ip", "link", "set", inner, "up")
    in_ns(HUB, "ip", "link", "set", outer, "master", "br0")
    in_ns(HUB, "ip", "link", "set", outer, "up")


def setup(n):
    cleanup()
    sh("ip", "netns", "add", HUB)
    in_ns(HUB, "ip", "link", "add", "br0", "type", "bridge")
    in_ns(HUB, "ip", "link", "set", "br0", "up")
    in_ns(HUB, "ip", "link", "set", "lo", "up")
    for i in range(n):
        ns = node_ns(i)
        sh("ip", "netns", "add", ns)
        in_ns(ns, "ip", "link", "set", "lo", "up")
        _attach(ns, "eth0", "h%d" % i, node_addr(i))
    sh("ip", "netns", "add", CLIENT)
    in_ns(CLIENT, "ip", "link", "set", "lo", "up")
    _attach(CLIENT, "eth0", "hc", CLIENT_ADDR)


# ---- partitions: real packet drops with iptables inside the node namespaces ----

def block(i, j):
    """Drop every packet between nodes i and j (both directions, both namespaces)."""
    for a, b in ((i, j), (j, i)):
        in_ns(node_ns(a), "iptables", "-A", "INPUT", "-s", node_addr(b), "-j", "DROP")
        in_ns(node_ns(a), "iptables", "-A", "OUTPUT", "-d", node_addr(b), "-j", "DROP")


def heal(n):
    for i in range(n):
        in_ns(node_ns(i), "iptables", "-F", check=False)


def partition(n, groups):
    """Nodes see only the nodes of their own group (the clients still see every node)."""
    heal(n)
    where = {i: g for g, members in enumerate(groups) for i in members}
    for i in range(n):
        for j in range(i + 1, n):
            if where.get(i) != where.get(j):
                block(i, j)


def cut_links(n, pairs):
    heal(n)
    for i, j in pairs:
        block(i, j)
