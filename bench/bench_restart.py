#!/usr/bin/env python3
"""A restart with an AOF, and a fresh start: ours against the original in one run (issue 46).

For each setup (ours with each --workers count, then the original when its binary is given)
a node with `appendonly yes`, `appendfsync no` gets --jobs ADDJOBs (100-byte bodies, 16
queues, pipelined) and is stopped with SIGTERM; then it is started again --repeat times on
the same files, and each start is timed from the process start to the first +PONG (PING
every millisecond, a new connection each time; both nodes answer -LOADING or nothing until
their files are loaded). Every start must show all the jobs (INFO registered_jobs). A start
in an empty directory (no file) gives the process's own start time.

    python bench/bench_restart.py --disque-binary <original>/src/disque-server
    python bench/bench_restart.py --jobs 20000 --repeat 1          # quick
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

import redis

from common.nodes import timed_start
from disque.harness.node import Node, disque_argv, original_argv
from disque.harness.ports import lease_port

QUEUES = 16
AOF = ("--appendonly", "yes", "--appendfsync", "no")


def restart_timed(argv_of, port, workdir, label):
    """(seconds to the first +PONG, registered jobs) of one start in `workdir` on `port`
    (the AOF files are named by the port)."""
    with timed_start(argv_of(port, workdir), port, workdir, label) as seconds:
        return seconds, int(redis.Redis(port=port, protocol=2).info("jobs")["registered_jobs"])


def fill(argv_of, port, workdir, label, children, njobs):
    """A node of `argv_of` in `workdir` with njobs jobs in its AOF, stopped."""
    node = Node(argv_of(port, workdir), port=port, cwd=workdir,
                log_path=os.path.join(workdir, "%s.log" % label))
    try:
        node.start(children=children)
        c = redis.Redis(port=port, protocol=2)
        pipe = c.pipeline(transaction=False)
        for i in range(njobs):
            pipe.execute_command("ADDJOB", "q%d" % (i % QUEUES), "x" * 100, 0)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
    finally:
        node.stop()


def setups(args):
    out = []
    for w in args.workers:
        out.append(("ours-w%d" % w, w, lambda port, d, w=w: disque_argv(port, w, "--dir", d, *AOF)))
    if args.disque_binary:
        # its "--appendonly no" is overridden by the later "--appendonly yes"
        out.append(("original", 0, lambda port, d: original_argv(args.disque_binary, port, d, *AOF)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--jobs", type=int, default=200000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")]
    root = tempfile.mkdtemp(prefix="bench-restart-")
    rows = {}
    leases = []
    try:
        plan = setups(args)
        dirs, ports = {}, {}
        for label, children, argv_of in plan:
            dirs[label] = d = os.path.join(root, label)
            os.makedirs(d)
            leases.append(lease_port())
            ports[label] = leases[-1].port
            print("%s: %d jobs into its AOF ..." % (label, args.jobs), flush=True)
            fill(argv_of, ports[label], d, label, children, args.jobs)
        for rnd in range(args.repeat):
            for label, children, argv_of in (plan if rnd % 2 == 0 else plan[::-1]):
                empty = os.path.join(root, "%s-empty-%d" % (label, rnd))
                os.makedirs(empty)
                fresh, _ = restart_timed(argv_of, ports[label], empty, label)
                restart, jobs = restart_timed(argv_of, ports[label], dirs[label], label)
                if jobs != args.jobs:
                    sys.exit("%s: %d jobs after the restart, %d before" % (label, jobs, args.jobs))
                rows.setdefault(label, []).append((fresh, restart))
                print("round %d %-9s fresh start %.3f s, restart with %d jobs %.3f s"
                      % (rnd + 1, label, fresh, args.jobs, restart), flush=True)
    finally:
        for lease in leases:
            lease.release()
        shutil.rmtree(root, ignore_errors=True)
    ref = rows.get("original")
    ref_restart = statistics.median(r for _, r in ref) if ref else None
    print("\nmedian of %d starts (process start -> first +PONG):" % args.repeat)
    for label, rs in rows.items():
        fresh = statistics.median(f for f, _ in rs)
        restart = statistics.median(r for _, r in rs)
        ratio = " (%.2fx the original's time)" % (restart / ref_restart) if ref_restart else ""
        print("  %-9s fresh start %.3f s   restart with %d jobs %.3f s%s"
              % (label, fresh, args.jobs, restart, ratio))


if __name__ == "__main__":
    main()
