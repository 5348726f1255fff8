"""The fault harness' command line: N nodes in network namespaces, a recorded workload, one
scenario after another (faults, heal, drain, check: faults/runs.py), a results table. See
docs/faults.md.

    faults/run [--long] [--nodes 5] [--workers 2] [--scenarios a,b] [--json out.json]
               [--disque-binary /path/to/original/disque-server]
    faults/run --soak [--soak-minutes 30]       (docs/faults-soak.md)
"""
import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time

from faults import netns, soak
from faults.catalog import SCENARIOS
from faults.checker import group_table, table
from faults.runs import run_scenario

SHORT_SECONDS = 12.0
LONG_SECONDS = 120.0
# one run at a time per namespace prefix (faults/netns.py)
LOCK_PATH = "/tmp/%sharness.lock" % netns.PREFIX


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
    ap.add_argument("--groups", type=int, default=0,
                    help="half of the adds go to this many job groups, checked per group "
                    "(docs/faults.md, \"Job groups\"); 0: none")
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
    groups = group_table(results)
    if groups:
        print("\njob groups (docs/faults.md, \"Job groups\"):\n" + groups)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    bad = [r for r in results if r.get("error") or r.get("lost") or r.get("crashed")
           or not r.get("all_answer") or r.get("violations")
           # job groups may break under faults (docs/job-groups.md), never without one
           or (r.get("scenario") == "calm" and r.get("group_violations"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
