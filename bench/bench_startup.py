"""Start time of a node with AOF on: process start -> first +PONG, for files of N jobs.

For each size the script writes the node's AOF files directly (LOADJOB records of queued
jobs with 20-byte bodies, spread over the workers' files as the node itself would write
them), starts `disque-server --appendonly yes`, polls PING every millisecond and reports:

* pong_s: process start -> the first +PONG (clients are served once the load is done);
* show_ok: a job of the file answers SHOW right after that PONG (must always be yes);
* loaded_s: the load itself as the node logs it ("DB loaded from append only file");
* the same start with an empty dir (no file), as the baseline of process start-up.

    python bench/bench_startup.py                      # 1, 10k and 1M jobs, 2 workers
    python bench/bench_startup.py --jobs 1,10000 --workers 1,2 --repeat 3

Run it from the repo root with the project's virtualenv active.
"""
import argparse
import os
import re
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common.cluster import Proc, free_port  # noqa: E402
from disque.harness import disque_argv, server_command  # noqa: E402
from disque._fast.job import QUEUED, Job  # noqa: E402
from disque._fast.jobid import queue_slot  # noqa: E402
from disque.contracts import job_codec as codec  # noqa: E402
from disque.contracts.aof_format import LOADJOB, record  # noqa: E402

NODE = b"0badc0de" + b"0" * 32
QUEUES = [b"startup-q%d" % i for i in range(16)]


def write_aof(dirname, port, nworkers, njobs):
    """Worker k's file holds the jobs of the queues whose slot it owns (slot mod N)."""
    now = int(time.time())
    files = [open(os.path.join(dirname, "disque.%d.w%d.aof" % (port, k)), "wb")
             for k in range(nworkers)]
    first = None
    try:
        chunks = [[] for _ in range(nworkers)]
        for i in range(njobs):
            q = QUEUES[i % len(QUEUES)]
            slot = queue_slot(q)
            # the slot is in the first two characters of the 24-char part (README: Job IDs)
            alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            jid = b"D-%s-%c%c%022d-05a1" % (NODE[:8], alphabet[slot >> 6], alphabet[slot & 63], i)
            job = Job(jid, q, b"b" * 20)
            job.state = QUEUED
            job.etime = now + 3600
            job.ctime = (now * 1000 + i) * 1000000
            job.retry = 300
            job.repl = 1
            job.nodes_delivered = (NODE,)
            w = slot % nworkers
            chunks[w].append(record(LOADJOB, codec.serialize(job, True, now)))
            if first is None:
                first = jid
            if len(chunks[w]) >= 10000:
                files[w].write(b"".join(chunks[w]))
                chunks[w] = []
        for w in range(nworkers):
            files[w].write(b"".join(chunks[w]))
    finally:
        for f in files:
            f.close()
    return first


def call(port, *args, timeout=2.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]))
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def start_once(command, nworkers, njobs):
    d = tempfile.mkdtemp(prefix="dq-start-")
    port = free_port()
    try:
        jid = write_aof(d, port, nworkers, njobs) if njobs else None
        log_path = os.path.join(d, "server.log")
        cmd = disque_argv(port, nworkers, "--appendonly", "yes", "--dir", d, command=command)
        t0 = time.monotonic()
        proc = Proc(cmd, d, port=port)
        proc.poll_interval = 0.001      # the time to the first PONG is the figure
        try:
            proc.wait_ready(600)
            pong = time.monotonic() - t0
            show_ok = jid is None or call(port, b"SHOW", jid).startswith(b"*")
        finally:
            proc.stop(timeout=60)
        text = open(log_path).read()
        m = re.search(r"DB loaded from append only file: ([0-9.]+) seconds", text)
        return pong, show_ok, float(m.group(1)) if m else None
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", default="1,10000,1000000", help="comma-separated AOF sizes (jobs)")
    ap.add_argument("--workers", default="2", help="comma-separated --workers values")
    ap.add_argument("--repeat", type=int, default=3, help="starts per size; the median is shown")
    ap.add_argument("--server-cmd", default=None,
                    help="how to start the server (default: disque-server next to this python)")
    args = ap.parse_args()
    server_cmd = server_command(args.server_cmd)
    print("| workers | jobs in the AOF | process start -> PONG (s) | load logged (s) | SHOW ok after PONG |")
    print("|---|---|---|---|---|")
    for nworkers in [int(x) for x in args.workers.split(",")]:
        for njobs in [0] + [int(x) for x in args.jobs.split(",")]:
            runs = sorted(start_once(server_cmd, nworkers, njobs) for _ in range(args.repeat))
            pong, _, loaded = runs[len(runs) // 2]
            ok = all(r[1] for r in runs)
            print("| %d | %s | %.3f | %s | %s |" % (
                nworkers, njobs or "none (no file)", pong,
                "%.3f" % loaded if loaded is not None else "-", "yes" if ok else "NO"),
                flush=True)


if __name__ == "__main__":
    main()
