#!/usr/bin/env python3
"""Fresh start until the first +PONG: installs of ours against each other and the original,
starts alternating, in one run (issue 46).

Each start is in an empty directory: the process is spawned, then a PING is written every
millisecond on a new connection until one answers +PONG (`common.nodes.timed_start`, as
in bench_restart.py). `--server` names a command of ours (any install: `label=command`,
the command split on spaces, `--port` and `--workers` added), several times for several.

    python bench/bench_pong.py --disque-binary <original>/src/disque-server
    python bench/bench_pong.py --server before=/tmp/old/.venv/bin/disque-server \\
        --server after=.venv/bin/disque-server --starts 15
"""
import argparse
import shutil
import statistics
import tempfile

from common.nodes import timed_start
from common.options import add_server_options, server_setups
from disque.harness.node import original_argv
from disque.harness.ports import lease_port


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap)
    ap.add_argument("--starts", type=int, default=11, help="starts of each, alternating")
    args = ap.parse_args()
    setups = server_setups(ap, args)
    times = {label: [] for label, _ in setups}
    lease = lease_port()
    try:
        for k in range(args.starts):
            for label, head in setups:
                workdir = tempfile.mkdtemp(prefix="bench-pong-")
                try:
                    if head is None:
                        argv = original_argv(args.disque_binary, lease.port, workdir)
                    else:
                        argv = head + ["--port", str(lease.port), "--workers", str(args.workers),
                                       "--bind", "127.0.0.1", "--dir", workdir]
                    with timed_start(argv, lease.port, workdir, label) as seconds:
                        times[label].append(seconds)
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
            print("start %d/%d: %s" % (k + 1, args.starts, ", ".join(
                "%s %.3f s" % (label, t[-1]) for label, t in times.items())), flush=True)
    finally:
        lease.release()
    print("\nfresh start until +PONG, median of %d starts (min-max):" % args.starts)
    for label, t in times.items():
        print("  %-10s %.3f s (%.3f-%.3f)" % (label, statistics.median(t), min(t), max(t)))


if __name__ == "__main__":
    main()
