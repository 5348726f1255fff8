"""Many queues: 200,000 queues of one job each, ours against the original in the same run
(issue 47). For each node: the time to create them (one ADDJOB per queue, pipelined 1,000
per round trip by one redis-py client), the RSS growth per queue summed over the node's
processes, and an 8 MB ADDJOB + GETJOB round trip once they exist.

    python bench/bench_queues.py --disque-binary <original>/src/disque-server
    python bench/bench_queues.py --queues 50000 --workers 1,2
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import redis

from common.nodes import leased_node, node_rss, ours_then_original

PIPELINE = 1000
MB = 1 << 20


def run(label, argv_of, children, n, workdir):
    with leased_node(label, argv_of, children, workdir) as node:
        c = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=120, protocol=2)
        c.ping()
        time.sleep(1.0)
        rss0 = node_rss(node.pid)
        pipe = c.pipeline(transaction=False)
        t0 = time.perf_counter()
        for i in range(n):
            pipe.execute_command("ADDJOB", "queue-%d" % i, b"x" * 16, 0)
            if i % PIPELINE == PIPELINE - 1 or i == n - 1:
                for reply in pipe.execute(raise_on_error=False):
                    if isinstance(reply, Exception):
                        raise SystemExit("%s: %s" % (label, reply))
        add_s = time.perf_counter() - t0
        time.sleep(1.0)
        rss1 = node_rss(node.pid)
        body = os.urandom(8 * MB)
        t0 = time.perf_counter()
        c.execute_command("ADDJOB", "big-after-queues", body, 0)
        got = c.execute_command("GETJOB", "FROM", "big-after-queues")
        big_ms = (time.perf_counter() - t0) * 1e3
        assert got[0][2] == body
        return {"label": label, "rate": n / add_s, "per_queue": (rss1 - rss0) / n,
                "big_ms": big_ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="2")
    ap.add_argument("--queues", type=int, default=200_000)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-queues-")
    try:
        rows = ours_then_original(
            [int(x) for x in a.workers.split(",")], a.disque_binary, workdir,
            lambda label, argv_of, children: run(label, argv_of, children, a.queues, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    orig = rows[-1] if a.disque_binary else None
    print()
    print("| node | queues created per s | RSS per queue | 8 MB ADDJOB + GETJOB after |")
    print("|---|---:|---:|---:|")
    for r in rows:
        ratio = (" (%.2fx)" % (r["rate"] / orig["rate"])) if orig and r is not orig else ""
        print("| %s | %.0f%s | %.0f B | %.1f ms |" % (r["label"], r["rate"], ratio,
                                                      r["per_queue"], r["big_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
