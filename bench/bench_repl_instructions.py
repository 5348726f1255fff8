#!/usr/bin/env python3
"""Instructions per replicated job at one connection, under callgrind (issue 46): the
count the machine's swing does not move.

Three nodes on 127.0.0.1 joined with CLUSTER MEET; the node measured (`--node 0`, the one
the benchmark talks to, which sends the copies; `--node 1`, a replica) runs under
`valgrind --tool=callgrind --instr-atstart=no`, the others natively. After 300 jobs to warm
up, instrumentation is switched on for `--jobs` `ADDJOB q <100 bytes> 0 REPLICATE 3` from
one connection (`--clients`: more; with `--groups N`, each in one of N job groups), then dumped: instructions
per job of each process of that node (for ours
the front-end and the worker), and the worker's top functions, inclusive. Needs valgrind
(`apt-get install valgrind`). Two runs of one build agree within about 1%.

    python bench/bench_repl_instructions.py --server after=.venv/bin/disque-server \\
        --server before=/tmp/old/.venv/bin/disque-server --disque-binary <original>/src/disque-server
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from common.cluster import redis_benchmark, start_joined
from common.options import add_server_options, server_setups
from disque.harness.node import original_argv
from disque.harness.ports import lease_port

NODES = 3
WARMUP = 300
BODY = "x" * 100


def node_argv(head, port, workdir, binary):
    if head is None:
        return original_argv(binary, port, workdir)
    return head + ["--port", str(port), "--workers", "1", "--bind", "127.0.0.1",
                   "--dir", workdir]


def callgrind(pid_dir, argv):
    return ["valgrind", "--tool=callgrind", "--trace-children=yes", "--instr-atstart=no",
            "--callgrind-out-file=%s/cg.%%p" % pid_dir] + argv


def counted(run):
    """run() with callgrind's instrumentation on and its counts dumped after: what run()
    returned, and the seconds it took."""
    subprocess.run(["callgrind_control", "-i", "on"], capture_output=True, check=True)
    t0 = time.monotonic()
    out = run()
    elapsed = time.monotonic() - t0
    subprocess.run(["callgrind_control", "-d"], capture_output=True, check=True)
    subprocess.run(["callgrind_control", "-i", "off"], capture_output=True)
    return out, elapsed


def stop_process(proc, timeout=30):
    """A server started under valgrind, ended (killed if it outlives `timeout`)."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def totals(path):
    with open(path) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    return 0


def demangle(symbol):
    """Cython's C name of one of our functions as module.Class.method (or module.function):
    __pyx_f_6disque_5_fast_10servedloop_10ServedLoop_serve -> servedloop.ServedLoop.serve."""
    m = re.search(r"__pyx_(?:f|pw|pf)_6disque_5_fast_(\d+)(.*)", symbol)
    if not m:
        return None
    n, rest = int(m.group(1)), m.group(2)
    parts = [rest[:n]]
    rest = rest[n:]
    c = re.match(r"_(\d+)([A-Z].*)", rest)
    if c and len(c.group(2)) >= int(c.group(1)):
        k = int(c.group(1))
        parts.append(c.group(2)[:k])
        rest = c.group(2)[k:]
    parts.append(re.sub(r"^_\d*", "", rest))
    return ".".join(p for p in parts if p)


def top_functions(path, jobs, n):
    """The worker's n costliest functions of ours, inclusive, per job."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", path],
                         capture_output=True, text=True).stdout
    seen, top = set(), []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S+?:(\S+)", line)
        name = demangle(m.group(2)) if m else None
        if name and name not in seen:
            seen.add(name)
            top.append((int(m.group(1).replace(",", "")) / jobs, name))
    return top[:n]


def process_counts(cg_dir, ours, jobs):
    """(role, instructions per job, its dump) of each process of the node measured, from
    the callgrind dumps in `cg_dir`: for ours the front-end then its workers."""
    dumps = sorted(glob.glob(os.path.join(cg_dir, "cg.*.1")),
                   key=lambda p: int(p.split(".")[-2]))
    return [("front-end" if ours and k == 0 else "worker" if ours else "server",
             totals(p) / jobs, p) for k, p in enumerate(dumps)]


def report(title, results, top):
    """Each setup's instructions per job by process, then its worker's `top` functions;
    `results`: [(label, {"rate", "jobs", "procs"})]."""
    print("\n" + title)
    for label, r in results:
        print("  %-9s %s  (%.0f jobs/s under valgrind)" % (label, "  ".join(
            "%s %.0f" % (role, ir) for role, ir, _ in r["procs"]), r["rate"]))
    for label, r in results:
        workers = [p for role, _, p in r["procs"] if role == "worker"]
        if workers:
            print("\n  %s, the worker's functions (inclusive, per job):" % label)
            for ir, name in top_functions(workers[0], r["jobs"], top):
                print("    %7.0f  %s" % (ir, name))


def one_setup(label, head, args, workdir):
    leases = [lease_port() for _ in range(NODES)]
    nodes = []
    cg_dir = os.path.join(workdir, label + "-cg")
    os.makedirs(cg_dir)
    try:
        def node_of(i, d):
            argv = node_argv(head, leases[i].port, d, args.disque_binary)
            return (callgrind(cg_dir, argv) if i == args.node else argv), leases[i].port, "127.0.0.1"
        start_joined(NODES, node_of, workdir, label, nodes, timeout=120)
        cmd = ["ADDJOB", "q", BODY, "0", "REPLICATE", str(NODES)]
        if args.groups:
            cmd = ["-r", str(args.groups)] + cmd + ["GROUP", "g:__rand_int__"]
        deadline = time.monotonic() + 60
        while True:
            try:
                redis_benchmark(nodes[0].port, WARMUP, 1, cmd)
                break
            except (IndexError, subprocess.SubprocessError):
                if time.monotonic() > deadline:
                    raise RuntimeError("no replicated ADDJOB was acknowledged")
                time.sleep(0.5)
        r, _ = counted(lambda: redis_benchmark(nodes[0].port, args.jobs, args.clients, cmd))
        return {"rate": r["rps"], "jobs": args.jobs,
                "procs": process_counts(cg_dir, head is not None, args.jobs)}
    finally:
        for node in nodes:
            node.stop()
        for lease in leases:
            lease.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap, workers=1)
    ap.add_argument("--node", type=int, default=0, choices=range(NODES),
                    help="the node measured: 0 sends the copies, 1 and 2 take them")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--top", type=int, default=12, help="the worker's functions shown")
    ap.add_argument("--clients", type=int, default=1,
                    help="the benchmark's connections (unpipelined) while counting")
    ap.add_argument("--groups", type=int, default=0, metavar="N",
                    help="jobs of N groups (ADDJOB ... GROUP g:<random>; ours only)")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        ap.error("needs valgrind (apt-get install valgrind)")
    setups = server_setups(ap, args)
    if args.groups and args.disque_binary:
        ap.error("--groups: the original has no job groups")
    workdir = tempfile.mkdtemp(prefix="bench-repl-instructions-")
    try:
        results = [(label, one_setup(label, head, args, workdir)) for label, head in setups]
        report("node %d of 3, %d REPLICATE 3 ADDJOBs at %d connection(s): instructions per "
               "job (callgrind)" % (args.node, args.jobs, args.clients), results, args.top)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
