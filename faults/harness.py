"""The fault harness: N nodes in network namespaces, a recorded workload, one scenario
after another (faults, heal, drain, check), a results table. See docs/faults.md.

    faults/run [--long] [--nodes 5] [--workers 2] [--scenarios a,b] [--json out.json]
               [--disque-binary /path/to/original/disque-server]
    faults/run --soak [--soak-minutes 30]       (docs/faults-soak.md)
"""
import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from faults import netns, nodes as N, soak
from faults.checker import check, table
from faults.catalog import SCENARIOS

SHORT_SECONDS = 12.0
LONG_SECONDS = 120.0
# one run at a time per namespace prefix (faults/netns.py)
LOCK_PATH = "/tmp/%sharness.lock" % netns.PREFIX


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
        self.node_timeout_s = N.NODE_TIMEOUT_MS / 1000.0
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
        return N.Node(i, self.dir, self.args.workers, sc.aof, original=self.args.disque_binary,
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
                   if not node.alive() or N.cli(node.i, "PING") != "PONG")
        tail = (bad.log_text().strip().splitlines() or ["(empty log)"])[-1]
        raise RuntimeError("node %d did not start: %s" % (bad.i, tail[-200:]))
    if not N.join(ctx.nodes):
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
             *map(str, scenario.workload_args(ctx))],
            cwd=N.REPO, env=N.env())
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


def main(argv=None):
    ap = argparse.ArgumentParser(prog="faults/run")
    ap.add_argument("--long", action="store_true", help="every scenario for %ds" % LONG_SECONDS)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration", type=float, help="seconds of faults per scenario")
    ap.add_argument("--scenarios", help="comma separated, default all: " + ",".join(SCENARIOS))
    ap.add_argument("--seed", default="1")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the nodes' directories")
    ap.add_argument("--warmup", type=float, default=4.0,
                    help="fault-free seconds before the faults (the rate to recover to)")
    ap.add_argument("--disque-binary", help="run the original C disque-server instead of ours "
                    "(scenarios that need worker processes are skipped)")
    soak.add_arguments(ap)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("faults/run: needs root (network namespaces, iptables)")
    if args.duration is None:
        args.duration = LONG_SECONDS if args.long else SHORT_SECONDS
    names = args.scenarios.split(",") if args.scenarios else list(SCENARIOS)
    for name in names:
        if name not in SCENARIOS:
            sys.exit("faults/run: unknown scenario %r" % name)
    if args.disque_binary:
        if not os.access(args.disque_binary, os.X_OK):
            sys.exit("faults/run: %s is not an executable" % args.disque_binary)
        args.disque_binary = os.path.abspath(args.disque_binary)
        names = [n for n in names if not SCENARIOS[n].ours_only]
    lock = open(LOCK_PATH, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit("faults/run: another run holds %s (the namespaces are shared)" % LOCK_PATH)
    if args.soak:                       # one long run, a fault every minute: faults/soak.py
        return soak.main(args)
    root = tempfile.mkdtemp(prefix="dqf-run-")
    results = []

    def log(line):
        print(line, flush=True)
    try:
        netns.setup(args.nodes + max(SCENARIOS[n].spares for n in names))
        for name in names:
            log("== %s (%d nodes, %s, %.0fs of faults)" % (
                name, args.nodes, "original " + args.disque_binary if args.disque_binary
                else "--workers %d" % args.workers, args.duration))
            t0 = time.monotonic()
            try:
                res = run_scenario(name, args, root, log)
            except Exception as e:      # noqa: BLE001 - a failed scenario is a result too
                res = {"scenario": name, "error": "%s: %s" % (type(e).__name__, e)}
            res["seconds"] = round(time.monotonic() - t0, 1)
            results.append(res)
            log("   %s" % json.dumps({k: v for k, v in res.items() if k != "adds_per_second"}))
    finally:
        netns.cleanup()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    bad = [r for r in results if r.get("error") or r.get("lost") or r.get("crashed")
           or not r.get("all_answer") or r.get("violations")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
