"""The fault harness: N nodes in network namespaces, a recorded workload, one scenario
after another (faults, heal, drain, check), a results table. See docs/faults.md.

    faults/run [--long] [--nodes 5] [--workers 2] [--scenarios a,b] [--json out.json]
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

from faults import netns, nodes as N
from faults.checker import check, table
from faults.scenarios import SCENARIOS

SHORT_SECONDS = 12.0
LONG_SECONDS = 120.0
LOCK_PATH = "/tmp/dqf-harness.lock"     # one run at a time: namespace names are fixed


class Context:
    def __init__(self, nodes, rng, log):
        self.nodes = nodes
        self.rng = rng
        self.node_timeout_s = N.NODE_TIMEOUT_MS / 1000.0
        self.worker_kills = 0
        self.log = log

    def note(self, what):
        self.log("    %6.1fs %s" % (time.monotonic() - self.t0, what))


def heal_all(ctx):
    netns.heal(len(ctx.nodes))
    for node in ctx.nodes:
        node.resume()
    for node in ctx.nodes:
        if not node.alive():
            node.start()
    for node in ctx.nodes:
        node.wait_ready()


def run_scenario(name, args, root, log):
    schedule, aof = SCENARIOS[name]
    rng = random.Random("%s-%s" % (args.seed, name))
    sdir = os.path.join(root, name)
    nodes = [N.Node(i, sdir, args.workers, aof) for i in range(args.nodes)]
    ctx = Context(nodes, rng, log)
    workload = None
    try:
        for node in nodes:
            node.start()
        if not all(node.wait_ready() for node in nodes):
            bad = next(node for node in nodes if not node.alive() or N.cli(node.i, "PING") != "PONG")
            tail = (bad.log_text().strip().splitlines() or ["(empty log)"])[-1]
            raise RuntimeError("node %d did not start: %s" % (bad.i, tail[-200:]))
        if not N.join(nodes):
            raise RuntimeError("the cluster did not form")
        out = os.path.join(sdir, "record.json")
        workload = subprocess.Popen(
            ["ip", "netns", "exec", netns.CLIENT, sys.executable, "-m", "faults.workload",
             "--addrs", ",".join(netns.node_addr(n.i) for n in nodes), "--out", out,
             "--max-seconds", str(args.duration + 120)],
            cwd=N.REPO, env=N.env())
        time.sleep(2.0)                 # a fault-free start
        ctx.t0 = time.monotonic()
        schedule(ctx, ctx.t0 + args.duration)
        ctx.note("heal")
        heal_all(ctx)
        workload.send_signal(signal.SIGUSR1)
        workload.wait(timeout=180)
        with open(out) as f:
            record = json.load(f)
        return check(name, aof, record, nodes, ctx.worker_kills)
    finally:
        if workload is not None and workload.poll() is None:
            workload.kill()
            workload.wait()
        for node in nodes:
            node.stop()


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
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("faults/run: needs root (network namespaces, iptables)")
    if args.duration is None:
        args.duration = LONG_SECONDS if args.long else SHORT_SECONDS
    names = args.scenarios.split(",") if args.scenarios else list(SCENARIOS)
    for name in names:
        if name not in SCENARIOS:
            sys.exit("faults/run: unknown scenario %r" % name)
    lock = open(LOCK_PATH, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit("faults/run: another run holds %s (the namespaces are shared)" % LOCK_PATH)
    root = tempfile.mkdtemp(prefix="dqf-run-")
    results = []

    def log(line):
        print(line, flush=True)
    try:
        netns.setup(args.nodes)
        for name in names:
            log("== %s (%d nodes, --workers %d, %.0fs of faults)" % (
                name, args.nodes, args.workers, args.duration))
            t0 = time.monotonic()
            try:
                res = run_scenario(name, args, root, log)
            except Exception as e:      # noqa: BLE001 - a failed scenario is a result too
                res = {"scenario": name, "error": "%s: %s" % (type(e).__name__, e)}
            res["seconds"] = round(time.monotonic() - t0, 1)
            results.append(res)
            log("   %s" % json.dumps(res))
    finally:
        netns.cleanup()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    bad = [r for r in results if r.get("error") or r.get("lost") or r.get("crashed")
           or not r.get("all_answer")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
