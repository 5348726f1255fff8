#!/usr/bin/env python3
"""Instructions per job handed to a waiting consumer, under callgrind (issue 46): the
consumer side of a job's life on one node, counted where the machine's swing does not move
the count.

One node (`--workers 1`; for the original its one process) runs under `valgrind
--tool=callgrind --instr-atstart=no`. Two connections, each first served by the worker: a
consumer sends `GETJOB TIMEOUT 60000 FROM q` and blocks; the producer's PING makes sure the
GETJOB was read, its `ADDJOB q <100 bytes> 0` hands the job to the consumer, which reads
it. After 50 such cycles to warm up, instrumentation is on for `--cycles` more: the
instructions per job of each process, and the worker's top functions, inclusive. The
10 ms tick runs meanwhile, so a run varies by a few percent with the machine's speed.
`--load cycle`: the README's cycle instead (100 ADDJOBs one by one, GETJOB COUNT 100,
ACKJOB of the 100), `--cycles` of them.

    python bench/bench_getjob_instructions.py --server before=/tmp/old/.venv/bin/disque-server \\
        --server after=.venv/bin/disque-server [--disque-binary <original>/src/disque-server]
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
from disque.harness.node import original_argv, ping
from disque.harness.ports import lease_port

WARMUP = 50
BODY = b"x" * 100


def node_argv(head, port, workdir, binary):
    if head is None:
        return original_argv(binary, port, workdir)
    return head + ["--port", str(port), "--workers", "1", "--bind", "127.0.0.1",
                   "--dir", workdir]


def call(conn, *argv):
    conn.send_command(*argv)
    return conn.read_response()


def cycle(consumer, producer):
    consumer.send_command("GETJOB", "TIMEOUT", 60000, "FROM", "q")
    call(producer, "PING")              # its reply leaves after the turn that read the GETJOB
    jid = call(producer, "ADDJOB", "q", BODY, 0)
    job = consumer.read_response()
    if job[0][1] != jid:
        raise RuntimeError("the consumer got %r, not %r" % (job, jid))


def batch_cycle(producer, consumer, n=100):
    """The README's cycle load: n ADDJOBs one by one, GETJOB COUNT n, ACKJOB of the n."""
    for _ in range(n):
        call(producer, "ADDJOB", "q", BODY, 0)
    jobs = call(consumer, "GETJOB", "COUNT", n, "FROM", "q")
    if len(jobs) != n:
        raise RuntimeError("GETJOB COUNT %d took %d jobs" % (n, len(jobs)))
    call(consumer, "ACKJOB", *[j[1] for j in jobs])


LOADS = {"blocked": (cycle, 1), "cycle": (batch_cycle, 100)}


def one_setup(label, head, args, workdir):
    lease = lease_port()
    cg_dir = os.path.join(workdir, label + "-cg")
    os.makedirs(cg_dir)
    node_dir = os.path.join(workdir, label)
    os.makedirs(node_dir)
    proc = subprocess.Popen(callgrind(cg_dir, node_argv(head, lease.port, node_dir,
                                                        args.disque_binary)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ping("127.0.0.1", lease.port):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("%s did not answer PING under valgrind" % label)
            time.sleep(0.2)
        consumer = redis.Connection(port=lease.port, socket_timeout=60, protocol=2)
        producer = redis.Connection(port=lease.port, socket_timeout=60, protocol=2)
        # an ADDJOB, a GETJOB and an ACKJOB: both connections go to the queue's worker
        jid = call(producer, "ADDJOB", "q", BODY, 0)
        call(consumer, "GETJOB", "FROM", "q")
        call(consumer, "ACKJOB", jid)
        run, per = LOADS[args.load]
        for _ in range(WARMUP // per or 1):
            run(consumer, producer)
        _, elapsed = counted(lambda: [run(consumer, producer) for _ in range(args.cycles)])
        consumer.disconnect()
        producer.disconnect()
        jobs = args.cycles * per
        return {"rate": jobs / elapsed, "jobs": jobs,
                "procs": process_counts(cg_dir, head is not None, jobs)}
    finally:
        stop_process(proc)
        lease.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap, workers=1)
    ap.add_argument("--load", choices=sorted(LOADS), default="blocked",
                    help="blocked: a job per consumer blocked in GETJOB; cycle: 100 ADDJOBs, "
                         "GETJOB COUNT 100, ACKJOB of the 100 (the README's cycle)")
    ap.add_argument("--cycles", type=int, default=300,
                    help="cycles measured (of 100 jobs for cycle)")
    ap.add_argument("--top", type=int, default=12, help="the worker's functions shown")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        ap.error("needs valgrind (apt-get install valgrind)")
    setups = server_setups(ap, args)
    workdir = tempfile.mkdtemp(prefix="bench-getjob-instructions-")
    try:
        results = []
        for label, head in setups:
            results.append((label, one_setup(label, head, args, workdir)))
            print("%-9s done" % label, flush=True)
        report("one node, load %s, %d jobs: instructions per job (callgrind)"
               % (args.load, results[0][1]["jobs"]), results, args.top)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
