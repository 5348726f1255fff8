#!/usr/bin/env python3
"""Instructions per ADDJOB while spilling and in memory, under callgrind (issue 47): what a
spilled job costs the node on top of a kept one, counted where the machine's swing (the
same command's rate moves by a fifth between runs here) does not move the count.

One node (`--workers 1`) runs under `valgrind --tool=callgrind --instr-atstart=no`. One
connection, served by the worker, pipelines `ADDJOB q <--body bytes> 0` (`--pipeline` per
round trip). Spilling: `maxmemory --maxmemory`; the producer adds until jobs are on the
spill disk and `--warmup` more, then instrumentation is on for `--jobs` more. In memory:
the same with room for every job. Each install's instructions per job by process, the
spilling worker's costliest functions, and the ratio of the two runs' totals.

    python bench/bench_spill_instructions.py --server before=/tmp/old/.venv/bin/disque-server \\
        --server after=.venv/bin/disque-server
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import redis

from bench_repl_instructions import callgrind, counted, process_counts, report, stop_process
from common.options import add_server_options, server_setups
from disque.harness.node import ping
from disque.harness.ports import lease_port


def add_jobs(conn, n, body, pipeline):
    pipe = conn.pipeline(transaction=False)
    for i in range(n):
        pipe.execute_command("ADDJOB", "q", body, 0)
        if i % pipeline == pipeline - 1 or i == n - 1:
            for reply in pipe.execute(raise_on_error=False):
                if isinstance(reply, Exception):
                    raise SystemExit("ADDJOB refused: %s" % reply)


def one_run(label, head, maxmemory, args, workdir):
    lease = lease_port()
    cg_dir = os.path.join(workdir, label + "-cg")
    node_dir = os.path.join(workdir, label)
    os.makedirs(cg_dir)
    os.makedirs(node_dir)
    argv = head + ["--port", str(lease.port), "--workers", "1", "--bind", "127.0.0.1",
                   "--dir", node_dir, "--maxmemory", maxmemory]
    proc = subprocess.Popen(callgrind(cg_dir, argv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ping("127.0.0.1", lease.port):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("%s did not answer PING under valgrind" % label)
            time.sleep(0.2)
        conn = redis.Redis(port=lease.port, socket_timeout=600)
        body = os.urandom(args.body)
        added = 0
        if maxmemory == args.maxmemory:         # spilling: past the threshold first
            while conn.info("memory")["spilled_jobs"] == 0:
                add_jobs(conn, args.pipeline * 10, body, args.pipeline)
                added += args.pipeline * 10
                if added > 10 * args.jobs + 1_000_000:
                    raise RuntimeError("%s: nothing spilled after %d jobs" % (label, added))
        add_jobs(conn, args.warmup, body, args.pipeline)
        _, elapsed = counted(lambda: add_jobs(conn, args.jobs, body, args.pipeline))
        spilled = conn.info("memory")["spilled_jobs"]
        print("  %s: %d jobs before, %d spilled at the end" % (label, added + args.warmup,
                                                              spilled), flush=True)
        return {"rate": args.jobs / elapsed, "jobs": args.jobs,
                "procs": process_counts(cg_dir, True, args.jobs)}
    finally:
        stop_process(proc, timeout=60)
        lease.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap, workers=1)
    ap.add_argument("--jobs", type=int, default=20_000, help="jobs measured")
    ap.add_argument("--warmup", type=int, default=10_000,
                    help="jobs added (spilling) before the measured ones")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--pipeline", type=int, default=1000)
    ap.add_argument("--maxmemory", default="64mb", help="the spilling run's")
    ap.add_argument("--top", type=int, default=14, help="the worker's functions shown")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        ap.error("needs valgrind (apt-get install valgrind)")
    if args.disque_binary:
        ap.error("the original does not spill: --disque-binary has nothing to compare")
    workdir = tempfile.mkdtemp(prefix="bench-spill-instructions-")
    try:
        results = []
        for label, head in server_setups(ap, args):
            for kind, maxmemory in (("spill", args.maxmemory), ("inmem", "8gb")):
                results.append(("%s/%s" % (label, kind),
                                one_run("%s-%s" % (label, kind), head, maxmemory, args,
                                        workdir)))
        report("one node, %d pipelined ADDJOBs of %d bytes: instructions per job (callgrind)"
               % (args.jobs, args.body), results, args.top)
        print()
        for (spill_label, spill), (_, inmem) in zip(results[::2], results[1::2]):
            s, m = (sum(ir for _, ir, _ in r["procs"]) for r in (spill, inmem))
            print("  %-16s spilling %.0f, in memory %.0f instructions per job: %.2fx"
                  % (spill_label.split("/")[0], s, m, s / m))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
