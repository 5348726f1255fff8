#!/usr/bin/env python3
"""A whole cluster (or one node of it) killed and started again on its files, under
producers (issue 46): ours against the original, setups alternating within a round.

Five nodes listen on 127.0.0.1 to 127.0.0.5 (one port for all, `appendonly yes`,
`appendfsync everysec`) and --producers threads send REPLICATE 2 or 3 ADDJOBs of 100 bytes,
each to a node of its own, waiting for each answer (a refused or closed connection is
tried again every 5 ms; -LOADING counts as no answer). After --seconds, every node
(`--restart all`) or the first (`--restart one`) is killed with SIGKILL, started again one
second later on the same files, and the acknowledged adds are counted per 100 ms from the
spawn. Printed per setup and round: the rate before the
kill, the seconds from the spawn until every node answers, until the first acknowledged
add, until the adds are back at 90% of the rate before the kill, and for ours until every
worker's direct job links are up again (INFO cluster, `cluster_job_links_up`).

    python bench/bench_cluster_restart.py --disque-binary <original>/src/disque-server
    python bench/bench_cluster_restart.py --server before=/tmp/old/bin/disque-server \\
        --server after=.venv/bin/disque-server --rounds 3 [--restart one]
"""
import argparse
import collections
import socket
import statistics
import threading
import time

import redis

from common.cluster import start_joined
from common.options import add_server_options, rows_by_setup, server_setups
from disque.harness.node import original_argv
from disque.harness.ports import lease_port

HOSTS = ["127.0.0.%d" % i for i in range(1, 6)]
AOF = ("--appendonly", "yes", "--appendfsync", "everysec")
BODY = b"x" * 100
BUCKET_S = 0.1
WATCH_S = 4.0               # after the spawn
RECOVERED = 0.9


def node_argv(head, host, port, workers, workdir, binary):
    if head is None:
        return original_argv(binary, port, workdir, *AOF, host=host)
    return head + ["--port", str(port), "--workers", str(workers), "--bind", host,
                   "--dir", workdir, *AOF]


def addjob_command(repl):
    return b"*6\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$100\r\n%s\r\n$4\r\n2000\r\n$9\r\nREPLICATE\r\n$1\r\n%d\r\n" % (
        BODY, repl)


class Producers:
    """Threads, each adding to one node and waiting for each answer; `acked` holds the
    monotonic time of every acknowledged add."""

    def __init__(self, count, port):
        self.acked = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(HOSTS[i % len(HOSTS)], port,
                                                                 addjob_command(2 + i % 2)),
                                         daemon=True) for i in range(count)]
        for t in self.threads:
            t.start()

    def run(self, host, port, command):
        sock = None
        while not self.stop.is_set():
            try:
                if sock is None:
                    sock = socket.create_connection((host, port), timeout=3)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.sendall(command)
                reply = b""
                while not reply.endswith(b"\r\n"):
                    chunk = sock.recv(256)
                    if not chunk:
                        raise ConnectionResetError("closed")
                    reply += chunk
                if reply.startswith(b"+D-"):
                    self.acked.append(time.monotonic())
                else:
                    time.sleep(0.005)       # -LOADING, -NOREPL: asked again shortly
            except OSError:
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.005)
        if sock is not None:
            sock.close()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)


def links_up(nodes, workers):
    """Every node's workers have their links to every worker of the others."""
    want = (len(nodes) - 1) * workers * workers
    for node in nodes:
        try:
            info = redis.Redis(host=node.host, port=node.port, protocol=2,
                               socket_timeout=0.5).execute_command("INFO", "cluster")
        except redis.RedisError:
            return False
        if int(info.get("cluster_job_links_up", 0)) < want:
            return False
    return True


def one_run(label, head, args, workdir):
    lease = lease_port()
    nodes = []
    producers = None
    try:
        start_joined(len(HOSTS), lambda i, d: (
            node_argv(head, HOSTS[i], lease.port, args.workers, d, args.disque_binary),
            lease.port, HOSTS[i]), workdir, label, nodes)
        producers = Producers(args.producers, lease.port)
        time.sleep(args.seconds)
        now = time.monotonic()
        before = sum(1 for t in producers.acked if t > now - 1.0)
        restarted = nodes if args.restart == "all" else nodes[:1]
        for node in restarted:
            node.kill()
        time.sleep(1.0)
        spawned = time.monotonic()
        for node in restarted:
            node.spawn()
        linked = None
        while time.monotonic() - spawned < WATCH_S:
            if linked is None and head is not None and links_up(nodes, args.workers):
                linked = time.monotonic() - spawned
            time.sleep(0.02)
        for node in restarted:
            node.wait_ready(30)         # answered long since
        after = [t - spawned for t in producers.acked if t >= spawned]
        buckets = collections.Counter(int(t / BUCKET_S) for t in after)
        per_bucket = [buckets[b] for b in range(int(WATCH_S / BUCKET_S))]
        target = RECOVERED * before * BUCKET_S
        recovered = next((b * BUCKET_S for b in range(len(per_bucket) - 2)
                          if min(per_bucket[b:b + 3]) >= target), None)
        row = {"rate_before": before, "first_ack_s": after[0] if after else None,
               "recovered_s": recovered}
        if linked is not None:
            row["links_up_s"] = linked
        row["per_100ms"] = " ".join(str(n) for n in per_bucket[:25])
        return row
    finally:
        if producers is not None:
            producers.close()
        for node in nodes:
            node.stop()
        lease.release()


def describe(row):
    return "  ".join("%s %s" % (k, ("%.2f" % v) if isinstance(v, float) else v)
                     for k, v in row.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(ap)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0, help="adds before the kill")
    ap.add_argument("--restart", choices=("all", "one"), default="all",
                    help="kill every node, or the first only")
    args = ap.parse_args()
    setups = server_setups(ap, args)
    rows = rows_by_setup(setups, args.rounds, "bench-cluster-restart-",
                         lambda name, head, workdir: one_run(name, head, args, workdir), describe)
    print("\n%s killed and started again, %d producers: medians of %d rounds "
          "(seconds from the spawn)" % ("5 nodes" if args.restart == "all" else "1 node of 5",
                                        args.producers, args.rounds))
    for label, runs in rows.items():
        med = {}
        for key in ("rate_before", "first_ack_s", "recovered_s", "links_up_s"):
            values = [r[key] for r in runs if r.get(key) is not None]
            if values:
                med[key] = statistics.median(values)
        missing = sum(1 for r in runs if r["recovered_s"] is None)
        print("  %-9s %s%s" % (label, describe(med),
                              "  (%d round(s) not recovered within %.0f s)" % (missing, WATCH_S)
                              if missing else ""))


if __name__ == "__main__":
    main()
