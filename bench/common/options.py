"""The options of the single-node loads (sizes, servers, binaries), shared by the scripts
that run those loads: bench_single_node.py's command line, and the defaults the others take
(`parse_args(["--quick"])`); and the `--server` option of the scripts that compare
installs."""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile


def parse_args(argv=None, description=None):
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes for a fast smoke run (~1 minute)")
    ap.add_argument("--workers", default="1,2",
                    help="comma-separated --workers values for our server (default 1,2)")
    ap.add_argument("--only-redis", action="store_true", help="benchmark only redis-server")
    ap.add_argument("--only-ours", action="store_true", help="benchmark only our server")
    ap.add_argument("--phases", default="abc", help="subset of 'abc' to run (default abc)")
    ap.add_argument("--json", metavar="PATH", help="dump all figures as JSON to PATH")
    ap.add_argument("--n-plain", type=int, help="requests for unpipelined redis-benchmark (200000)")
    ap.add_argument("--n-pipe", type=int, help="requests for pipelined redis-benchmark (1000000)")
    ap.add_argument("--clients", type=int, default=50, help="redis-benchmark connections (50)")
    ap.add_argument("--pipeline", type=int, default=16, help="redis-benchmark -P value (16)")
    ap.add_argument("--rounds", type=int, help="cycle rounds for (b) (400)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="repeat each (a)/(b) measurement N times and keep the best (1)")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each measurement wait up to SECONDS for other processes on the "
                         "machine to use < 0.15 cores (default 0 = don't wait)")
    ap.add_argument("--batch", type=int, default=100, help="jobs per cycle round (100)")
    ap.add_argument("--mem-jobs", type=int, help="jobs for the memory phase (1000000)")
    ap.add_argument("--mem-queues", type=int, default=16, help="queues for the memory phase (16)")
    ap.add_argument("--mem-batch", type=int, default=1000, help="pipeline batch for loading (1000)")
    ap.add_argument("--body-size", type=int, default=100, help="job body size in bytes (100)")
    ap.add_argument("--settle", type=float, default=15.0,
                    help="max seconds to wait for RSS to settle (15)")
    ap.add_argument("--start-timeout", type=float, default=30.0,
                    help="seconds to wait for a server to answer PING (30)")
    ap.add_argument("--rb-timeout", type=float, default=0,
                    help="redis-benchmark timeout in seconds (default 60 + n/5000)")
    ap.add_argument("--server-cmd", default=os.environ.get("DISQUE_SERVER_CMD"),
                    help="command for our server (default .venv/bin/disque-server, else "
                         "'.venv/bin/python -m disque'); --port/--workers/--bind are appended")
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"), metavar="PATH",
                    help="the original C disque-server, built by hand from antirez/disque: "
                         "measured in the same run, with ours/C ratios (also $DISQUE_C_BINARY)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    ap.add_argument("--redis-benchmark",
                    default=shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark")
    ap.add_argument("--keep-logs", action="store_true", help="keep server logs directory")
    args = ap.parse_args(argv)
    q = args.quick
    if args.n_plain is None:
        args.n_plain = 20_000 if q else 200_000
    if args.n_pipe is None:
        args.n_pipe = 100_000 if q else 1_000_000
    if args.rounds is None:
        args.rounds = 40 if q else 400
    if args.mem_jobs is None:
        args.mem_jobs = 100_000 if q else 1_000_000
    if q and args.settle == 15.0:
        args.settle = 5.0
    args.phases = set(args.phases.lower())
    if not args.phases <= set("abc") or not args.phases:
        ap.error("--phases must be a non-empty subset of 'abc'")
    try:
        args.workers_list = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        ap.error("--workers must be a comma-separated list of integers")
    if args.only_redis and args.only_ours:
        ap.error("--only-redis and --only-ours are exclusive")
    if args.only_redis:
        args.workers_list = []
    return args



def add_server_options(ap, workers=2):
    """`--server LABEL=COMMAND` (installs of ours side by side), `--workers` and
    `--disque-binary`: the options of the scripts that compare installs (bench_pong,
    bench_busy_cluster); `server_setups` reads them."""
    ap.add_argument("--server", action="append", default=[], metavar="LABEL=COMMAND",
                    help="a command of ours (default: ours=<this python> -m disque)")
    ap.add_argument("--workers", type=int, default=workers)
    ap.add_argument("--disque-binary", help="the original's disque-server, run too")


def alternating(setups, rounds):
    """(round, label, command head) for every setup in every round, the order reversed in
    every other round, so that no setup always runs first."""
    for rnd in range(rounds):
        for label, head in (setups if rnd % 2 == 0 else setups[::-1]):
            yield rnd, label, head


def rows_by_setup(setups, rounds, prefix, run, describe):
    """`run(name, head, workdir)` for every setup in every round (`alternating`), in a
    temporary directory removed after, each row printed by `describe(row)` as it comes:
    {label: [row of each round]}."""
    rows = collections.defaultdict(list)
    workdir = tempfile.mkdtemp(prefix=prefix)
    try:
        for rnd, label, head in alternating(setups, rounds):
            row = run("%s-r%d" % (label, rnd), head, workdir)
            rows[label].append(row)
            print("round %d %-9s %s" % (rnd + 1, label, describe(row)), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def server_setups(ap, args):
    """[(label, command head)] for every --server, then ("original", None) with
    --disque-binary. A command's path is made absolute: nodes run in directories of their
    own."""
    setups = []
    for spec in args.server or ["ours=%s -m disque" % sys.executable]:
        label, _, command = spec.partition("=")
        if not command:
            ap.error("--server takes LABEL=COMMAND")
        head = command.split()
        if os.sep in head[0]:
            head[0] = os.path.abspath(head[0])
        setups.append((label, head))
    if args.disque_binary:
        setups.append(("original", None))
    return setups
