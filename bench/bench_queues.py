"""Many queues: 200,000 queues of one job each, ours against the original in the same run
(issue 47). For each node: the time to create them (one ADDJOB per queue, pipelined 1,000
per round trip over one connection, the commands encoded beforehand and the replies read
with hiredis, so that the client is not what is timed: redis-py's own pipeline spends
about 14 us a command, more than either server), the CPU the node's processes spent per
queue, the RSS growth per queue summed over them, and an 8 MB ADDJOB + GETJOB round trip
once they exist.

    python bench/bench_queues.py --disque-binary <original>/src/disque-server
    python bench/bench_queues.py --queues 50000 --workers 1,2 --rounds 3

With --rounds N the nodes run in turn N times and each figure is the median (the range of
the creation rate beside it): one round moves by 20% on this 2-core machine.
"""
import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

import hiredis
import redis

from common.nodes import leased_node, node_processes, node_rss, ours_then_original

PIPELINE = 1000
MB = 1 << 20


def run(label, argv_of, children, n, workdir):
    with leased_node(label, argv_of, children, workdir) as node:
        c = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=120, protocol=2)
        c.ping()
        time.sleep(1.0)
        rss0 = node_rss(node.pid)
        batches = [(b"".join(b"*4\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$16\r\n%s\r\n$1\r\n0\r\n"
                             % (len(q), q, b"x" * 16)
                             for q in (b"queue-%d" % i for i in range(lo, min(lo + PIPELINE, n)))),
                    min(PIPELINE, n - lo))
                   for lo in range(0, n, PIPELINE)]
        procs = node_processes(node.pid)
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
        with socket.create_connection(("127.0.0.1", node.port)) as sock:
            reader = hiredis.Reader()
            t0 = time.perf_counter()
            for data, count in batches:
                sock.sendall(data)
                while count:
                    reply = reader.gets()
                    if reply is False:
                        reader.feed(sock.recv(1 << 16))
                    elif isinstance(reply, hiredis.ReplyError):
                        raise SystemExit("%s: %s" % (label, reply))
                    else:
                        count -= 1
            add_s = time.perf_counter() - t0
        cpu_us = (sum(sum(p.cpu_times()[:2]) for p in procs) - cpu0) / n * 1e6
        time.sleep(1.0)
        rss1 = node_rss(node.pid)
        body = os.urandom(8 * MB)
        t0 = time.perf_counter()
        c.execute_command("ADDJOB", "big-after-queues", body, 0)
        got = c.execute_command("GETJOB", "FROM", "big-after-queues")
        big_ms = (time.perf_counter() - t0) * 1e3
        assert got[0][2] == body
        return {"label": label, "rate": n / add_s, "cpu_us": cpu_us,
                "per_queue": (rss1 - rss0) / n, "big_ms": big_ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="2")
    ap.add_argument("--queues", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-queues-")
    rounds = []
    try:
        for i in range(a.rounds):
            print("round %d of %d" % (i + 1, a.rounds), flush=True)
            rounds.append(ours_then_original(
                [int(x) for x in a.workers.split(",")], a.disque_binary, workdir,
                lambda label, argv_of, children: run(label, argv_of, children, a.queues, workdir)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [{"label": group[0]["label"],
             "rates": sorted(r["rate"] for r in group),
             "cpu_us": statistics.median(r["cpu_us"] for r in group),
             "per_queue": statistics.median(r["per_queue"] for r in group),
             "big_ms": statistics.median(r["big_ms"] for r in group)}
            for group in zip(*rounds)]
    for r in rows:
        r["rate"] = statistics.median(r["rates"])
    orig = rows[-1] if a.disque_binary else None
    print()
    print("| node | queues created per s | CPU per queue | RSS per queue | 8 MB ADDJOB + GETJOB after |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        ratio = (" (%.2fx)" % (r["rate"] / orig["rate"])) if orig and r is not orig else ""
        spread = " (%.0f-%.0f)" % (r["rates"][0], r["rates"][-1]) if len(r["rates"]) > 1 else ""
        print("| %s | %.0f%s%s | %.1f us | %.0f B | %.1f ms |" % (
            r["label"], r["rate"], ratio, spread, r["cpu_us"], r["per_queue"], r["big_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
