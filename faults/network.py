"""A bad network (docs/faults-network.md): random loss on chosen links, links that drop one
direction only, slow (rate-shaped) nodes. Each fault is held while the workload runs,
changed every PERIOD seconds with the run's rng, then healed.

The kernel has no netem qdisc, so:
- loss is iptables' `statistic --mode random --probability p -j DROP`, applied once per
  direction at the sender's OUTPUT (a packet a->b meets one draw, not two);
- a one-way cut is a DROP at one side only: a's OUTPUT to b, or a node's INPUT from every
  peer (it can send, it hears nothing);
- slowness is a `tbf` qdisc (rate, burst, latency = queue limit) on the node's eth0 (its
  egress) and on its veth end in the hub (its ingress): queueing delay, tail drops when
  the queue passes the latency limit.

Every change replaces a namespace's filter table whole (`iptables-restore`, one call per
namespace); `clear` flushes the tables and deletes the qdiscs, and is both the scenarios'
heal hook and their finish hook (a schedule that raised still leaves a clean network)."""
import subprocess
import sys
import time

from faults import netns
from faults.nodes import PORT
from faults.scenario import Scenario

PERIOD = 3.0            # seconds between two changes of the faults
LOSS = (0.05, 0.40)     # loss probability per direction of a lossy link
RATES_KBIT = (256, 512, 1024, 2048)
QUEUE_MS = (100, 400)   # tbf latency: how long a packet may wait before a tail drop

HEADER = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"


def _sleep_until(t, until):
    time.sleep(max(0.0, min(t, until) - time.monotonic()))


def drop(chain, peer, p=None):
    """One rule: drop the packets to (OUTPUT) or from (INPUT) `peer`, all or a share p."""
    flag = "-d" if chain == "OUTPUT" else "-s"
    rnd = "" if p is None else " -m statistic --mode random --probability %.3f" % p
    return "-A %s %s %s/32%s -j DROP" % (chain, flag, peer, rnd)


def load_rules(net, n, rules):
    """rules: node index -> rule lines. Every node's filter table is replaced by its own
    lines (none: empty), one iptables-restore per namespace."""
    for i in range(n):
        text = HEADER + "".join(r + "\n" for r in rules.get(i, ())) + "COMMIT\n"
        r = subprocess.run(["ip", "netns", "exec", net.node_ns(i), "iptables-restore"],
                           input=text, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("iptables-restore in %s: %s" % (net.node_ns(i), r.stderr.strip()))


def shape(net, i, kbit, queue_ms):
    """Node i's both directions limited to `kbit`: tbf on its eth0 and on its hub end."""
    tbf = ["tbf", "rate", "%dkbit" % kbit, "burst", "4kb", "latency", "%dms" % queue_ms]
    netns.in_ns(net.node_ns(i), "tc", "qdisc", "replace", "dev", "eth0", "root", *tbf)
    netns.in_ns(net.hub, "tc", "qdisc", "replace", "dev", "h%d" % i, "root", *tbf)


def unshape(net, n):
    for i in range(n):
        netns.in_ns(net.node_ns(i), "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        netns.in_ns(net.hub, "tc", "qdisc", "del", "dev", "h%d" % i, "root", check=False)


def clear(ctx):
    n = len(ctx.all_nodes)
    ctx.net.heal(n)
    unshape(ctx.net, n)


PROBE = """
import socket, sys, time
addrs, port = sys.argv[1].split(","), int(sys.argv[2])
conns = {}
while True:
    for i, addr in enumerate(addrs):
        t = time.monotonic()
        try:
            c = conns.get(i) or conns.setdefault(i, socket.create_connection((addr, port), 2.0))
            c.sendall(b"*1\\r\\n$4\\r\\nPING\\r\\n")
            if not c.recv(64):
                raise OSError
        except OSError:
            conns.pop(i, None)
        print("%.3f %d %.1f" % (t, i, 1000 * (time.monotonic() - t)), flush=True)
    time.sleep(0.1)
"""


def start_probe(ctx):
    """PING round trips from the clients' namespace to every node, over one connection
    each, in turn, for the whole schedule: one line `monotonic-start node ms` each (a lost
    or late answer: about 2000 ms, and a new connection)."""
    path = ctx.dir + "/round_trips"
    with open(path, "w") as out:
        proc = subprocess.Popen(["ip", "netns", "exec", ctx.net.client, sys.executable, "-c", PROBE,
                                 ",".join(ctx.net.node_addr(n.i) for n in ctx.nodes), str(PORT)],
                                stdout=out, stderr=subprocess.DEVNULL)
    return proc, path


def stop_probe(proc, path, periods):
    """periods: [(from, to, node, what)]: each one's round trips to that node, and to the
    others, in ms."""
    proc.kill()
    proc.wait()
    with open(path) as f:
        rows = [line.split() for line in f if line.count(" ") == 2]
    out = []
    for t0, t1, node, what in periods:
        inside = [(int(i), float(ms)) for t, i, ms in rows if t0 <= float(t) < t1]
        out.append({"shaped": what, "to_it": [ms for i, ms in inside if i == node],
                    "to_others": [ms for i, ms in inside if i != node]})
    return out


# ---- the schedules ----

def lossy(clients):
    """Each period: every node-to-node link is lossy with probability 1/2 (at least one),
    each at its own rate in LOSS; with `clients`, the clients' links to one or two nodes
    are lossy too (both directions)."""
    def run(ctx, until):
        n, net, rng = len(ctx.nodes), ctx.net, ctx.rng
        while time.monotonic() < until:
            pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
            chosen = [pq for pq in pairs if rng.random() < 0.5] or [rng.choice(pairs)]
            rules, what = {}, []
            for a, b in chosen:
                p = rng.uniform(*LOSS)
                rules.setdefault(a, []).append(drop("OUTPUT", net.node_addr(b), p))
                rules.setdefault(b, []).append(drop("OUTPUT", net.node_addr(a), p))
                what.append("%d-%d %.0f%%" % (a, b, 100 * p))
            if clients:
                for i in rng.sample(range(n), rng.choice((1, 2))):
                    p = rng.uniform(*LOSS)
                    rules.setdefault(i, []).extend([drop("OUTPUT", net.client_addr, p),
                                                    drop("INPUT", net.client_addr, p)])
                    what.append("clients-%d %.0f%%" % (i, 100 * p))
            ctx.note("loss " + ", ".join(what))
            load_rules(net, n, rules)
            _sleep_until(time.monotonic() + PERIOD, until)
    return run


def one_way(ctx, until):
    """Each period: 1 to n random ordered pairs a->b dropped at a (b->a still delivered)."""
    n, net, rng = len(ctx.nodes), ctx.net, ctx.rng
    while time.monotonic() < until:
        pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        cut = rng.sample(pairs, rng.randint(1, n))
        rules = {}
        for a, b in cut:
            rules.setdefault(a, []).append(drop("OUTPUT", net.node_addr(b)))
        ctx.note("one-way cuts %s" % " ".join("%d->%d" % ab for ab in sorted(cut)))
        load_rules(net, n, rules)
        _sleep_until(time.monotonic() + PERIOD, until)


def one_way_held(ctx, until):
    """Two random one-way cuts a->b held for the whole run: TCP connections stalled that
    long back off for as long (docs/faults-network.md, "Bugs found")."""
    n, net, rng = len(ctx.nodes), ctx.net, ctx.rng
    cut = rng.sample([(a, b) for a in range(n) for b in range(n) if a != b], 2)
    rules = {}
    for a, b in cut:
        rules.setdefault(a, []).append(drop("OUTPUT", net.node_addr(b)))
    ctx.note("one-way cuts held %s" % " ".join("%d->%d" % ab for ab in sorted(cut)))
    load_rules(net, n, rules)
    _sleep_until(until, until)


def deaf_node(ctx, until):
    """Each period: one node hears nothing from its peers; what it sends is delivered
    (the clients still reach it both ways)."""
    n, net, rng = len(ctx.nodes), ctx.net, ctx.rng
    while time.monotonic() < until:
        deaf = rng.randrange(n)
        ctx.note("node %d deaf to its peers" % deaf)
        load_rules(net, n, {deaf: [drop("INPUT", net.node_addr(j)) for j in range(n)
                                   if j != deaf]})
        _sleep_until(time.monotonic() + PERIOD, until)


def slow_nodes(ctx, until):
    """Each period: one or two nodes rate-limited both ways (tbf), every other period with
    5-20 % loss on their links too. PING round trips from the clients to every node are
    timed throughout, under the workload, and split by period (ctx.extra)."""
    n, net, rng = len(ctx.nodes), ctx.net, ctx.rng
    probe, path = start_probe(ctx)
    periods = []
    lossy_period = False
    try:
        while time.monotonic() < until:
            t_end = time.monotonic() + PERIOD
            unshape(net, n)
            slow = rng.sample(range(n), rng.choice((1, 2)))
            rules, what = {}, []
            for i in slow:
                kbit, queue_ms = rng.choice(RATES_KBIT), rng.randint(*QUEUE_MS)
                shape(net, i, kbit, queue_ms)
                what.append("%d at %dkbit queue %dms" % (i, kbit, queue_ms))
                if lossy_period:
                    p = rng.uniform(0.05, 0.20)
                    rules[i] = [drop("OUTPUT", net.node_addr(j), p) for j in range(n) if j != i]
                    what[-1] += " loss %.0f%%" % (100 * p)
            load_rules(net, n, rules)
            ctx.note("slow " + ", ".join(what))
            shaped = time.monotonic()
            lossy_period = not lossy_period
            _sleep_until(t_end, until)
            periods.append((shaped, time.monotonic(), slow[0], what[0]))
    finally:
        ctx.extra["round_trips_ms"] = stop_probe(probe, path, periods)


def _scenario(schedule, summary):
    return Scenario(schedule, heal=clear, finish=clear, summary=summary)


# docs/faults-network.md, "Scenarios"
SCENARIOS = {
    "lossy-links": _scenario(lossy(False), "5-40 % loss on random node links"),
    "lossy-clients": _scenario(lossy(True), "lossy node links and lossy client links"),
    "one-way": _scenario(one_way, "random links dropping one direction"),
    "one-way-held": _scenario(one_way_held, "two one-way cuts held for the whole run"),
    "deaf-node": _scenario(deaf_node, "a node that sends but hears no peer"),
    "slow-nodes": _scenario(slow_nodes, "tbf rate-limited nodes, with loss every other period"),
}
