"""An idle node: CPU per second and memory (PSS, RSS, USS per process) with nothing
connected, ours against the original in the same run (issue 47).

Each node starts on a free loopback port, rests --settle seconds, then its processes' CPU
time (user + system, summed over the front-end and the workers, threads included) is read
over --seconds. The figures are read from /proc by psutil, from outside, so the measure
itself wakes nothing.

    python bench/bench_idle.py --disque-binary <original>/src/disque-server
    python bench/bench_idle.py --workers 1,2 --seconds 60
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

from common.nodes import leased_node, node_processes, ours_then_original

MB = 1 << 20


def measure(label, argv_of, children, workdir, settle, seconds):
    with leased_node(label, argv_of, children, workdir) as node:
        time.sleep(settle)
        procs = node_processes(node.pid)

        def cpu():
            return sum(sum(p.cpu_times()[:2]) for p in procs)
        c0, t0 = cpu(), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu(), time.monotonic()
        full = [p.memory_full_info() for p in procs]
        return {"label": label, "cpu_ms_per_s": (c1 - c0) / (t1 - t0) * 1e3,
                "pss": sum(f.pss for f in full), "rss": sum(f.rss for f in full),
                "uss": [f.uss for f in full]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="2")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=3.0)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-idle-")
    try:
        rows = ours_then_original(
            [int(x) for x in a.workers.split(",")], a.disque_binary, workdir,
            lambda label, argv_of, children: measure(label, argv_of, children, workdir,
                                                     a.settle, a.seconds))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("| node | CPU per second idle | PSS | RSS | USS per process |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print("| %s | %.2f ms | %.1f MB | %.1f MB | %s |" % (
            r["label"], r["cpu_ms_per_s"], r["pss"] / MB, r["rss"] / MB,
            " + ".join("%.1f" % (u / MB) for u in r["uss"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
