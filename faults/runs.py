"""One fault scenario run on the harness' cluster (faults/harness.py is its command line,
faults/soak.py its long form): the nodes in their namespaces, the recorded workload, the
schedule, the heal, the check. See docs/faults.md."""
import json
import os
import random
import signal
import subprocess
import sys
import time

from faults import netns
from faults import nodes as fault_nodes
from faults.catalog import SCENARIOS
from faults.checker import check


class Context:
    """What a schedule acts on: the cluster's nodes, the spares beside it, the network
    (`net`, faults/netns.py), the run's options and its random generator."""

    def __init__(self, name, scenario, args, sdir, rng, log):
        self.name = name
        self.scenario = scenario
        self.args = args
        self.dir = sdir
        self.rng = rng
        self.log = log
        self.net = netns.HARNESS
        self.nodes = []
        self.spares = []
        self.removed = []               # nodes taken out of the cluster: logs still checked
        self.extra = {}                 # a scenario's own counters, added to its result
        self.node_timeout_s = fault_nodes.NODE_TIMEOUT_MS / 1000.0
        self.worker_kills = 0
        self.worker_kill_times = {}     # node index -> times of its worker kills (crash-loop guard)
        self.unexpected_exits = 0       # nodes found dead that the harness did not kill
        self.extra = {}                 # a schedule's own figures, added to the result
        self.addrs_path = os.path.join(sdir, "addrs")
        self.t0 = time.monotonic()

    @property
    def all_nodes(self):
        return self.nodes + self.spares

    def make_node(self, i):
        sc = self.scenario
        return fault_nodes.Node(i, self.dir, self.args.workers, sc.aof, original=self.args.disque_binary,
                      extra_env=sc.node_env(self, i), extra_args=sc.node_args(self, i))

    def set_addrs(self, nodes, consumers=None):
        """The nodes the workload talks to from now on (it reads the file every second);
        `consumers`, when given, are the consumers' nodes (else the same)."""
        tmp = self.addrs_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(" ".join(netns.node_addr(n.i) for n in nodes))
            if consumers is not None:
                f.write("\n" + " ".join(netns.node_addr(n.i) for n in consumers))
        os.replace(tmp, self.addrs_path)

    def note(self, what):
        self.log("    %6.1fs %s" % (time.monotonic() - self.t0, what))


def heal_all(ctx):
    ctx.scenario.heal(ctx)
    netns.heal(len(ctx.all_nodes))
    for node in ctx.all_nodes:
        node.resume()
    for node in ctx.all_nodes:
        if not node.alive():
            if not node.down_by_harness:
                ctx.unexpected_exits += 1
                ctx.note("node %d had exited on its own" % node.i)
            node.start()
    for node in ctx.all_nodes:
        node.wait_ready()


def start_nodes(ctx):
    for node in ctx.all_nodes:
        node.start()
    if not all(node.wait_ready() for node in ctx.all_nodes):
        bad = next(node for node in ctx.all_nodes
                   if not node.alive() or fault_nodes.cli(node.i, "PING") != "PONG")
        tail = (bad.log_text().strip().splitlines() or ["(empty log)"])[-1]
        raise RuntimeError("node %d did not start: %s" % (bad.i, tail[-200:]))
    if not fault_nodes.join(ctx.nodes):
        raise RuntimeError("the cluster did not form")


def run_scenario(name, args, root, log):
    scenario = SCENARIOS[name]
    sdir = os.path.join(root, name)
    os.makedirs(sdir, exist_ok=True)
    ctx = Context(name, scenario, args, sdir, random.Random("%s-%s" % (args.seed, name)), log)
    workload = None
    try:
        scenario.prepare(ctx)
        ctx.nodes = [ctx.make_node(i) for i in range(args.nodes)]
        ctx.spares = [ctx.make_node(args.nodes + k) for k in range(scenario.spares)]
        start_nodes(ctx)
        ctx.set_addrs(ctx.nodes)
        out = os.path.join(sdir, "record.json")
        workload = subprocess.Popen(
            ["ip", "netns", "exec", netns.CLIENT, sys.executable, "-m", "faults.workload",
             "--addrs", ",".join(netns.node_addr(n.i) for n in ctx.nodes),
             "--addrs-file", ctx.addrs_path, "--out", out, "--warmup", str(args.warmup),
             "--max-seconds", str(args.duration + args.warmup + 150),
             *(["--groups", str(args.groups)] if args.groups else []),
             *map(str, scenario.workload_args(ctx))],
            cwd=fault_nodes.REPO, env=fault_nodes.env())
        time.sleep(args.warmup)         # fault-free: the workload's rate to recover to
        ctx.t0 = time.monotonic()
        schedule_until = ctx.t0 + args.duration
        scenario.schedule(ctx, schedule_until)
        ctx.note("heal")
        heal_all(ctx)
        workload.send_signal(signal.SIGUSR1)
        workload.wait(timeout=240)
        scenario.settled(ctx)
        with open(out) as f:
            record = json.load(f)
        return {**check(name, scenario.aof, record, ctx), **ctx.extra}
    finally:
        if workload is not None and workload.poll() is None:
            workload.kill()
            workload.wait()
        for node in ctx.all_nodes:
            node.stop()
        scenario.finish(ctx)
