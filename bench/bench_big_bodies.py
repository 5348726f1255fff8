#!/usr/bin/env python3
"""Big job bodies end to end: one ADDJOB, then one GETJOB of it, then ACKJOB, for bodies of
1, 8, 32 and 100 MB, ours (--workers 1 and 2) against the original C Disque in the same run
(issue 47, docs/benchmarks.md "Big bodies").

Each size runs `--rounds` times on each server, the servers alternating so that a slow
moment of the machine hits all alike; the median time of each command is shown, with the
ratio ours / original, on a new connection (`fresh`: its first command is the big ADDJOB)
and on one that has used the queue before (`served`: ours then serves it in the queue's
worker, as it does a producer's long-lived connection). The client is a plain socket that reads each reply into one
preallocated buffer: its own time is the same for every server and linear in the body.

    python bench/bench_big_bodies.py --disque-binary <original>/src/disque-server
    python bench/bench_big_bodies.py --sizes 1,100 --rounds 5 --workers 2 ...
    python bench/bench_big_bodies.py --tls ...          # ours over TLS too (ours-tls rows)
    python bench/bench_big_bodies.py --replicate 3 ...  # 3-node clusters, ADDJOB REPLICATE 3

With --tls, ours also runs with a TLS port and the same rounds go over TLS (the original
has no TLS: compare those rows with ours in plaintext). With --replicate N every server is a
cluster of N nodes joined with CLUSTER MEET (ours with its direct job links up), the client
talks to the first node and every ADDJOB asks for N copies.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import ssl
import statistics
import sys
import tempfile
import time

from common.cluster import wait_job_links
from common.options import parse_args
from common.report import log
from common.servers import cleanup_all, new_server
from disque.harness import join
from disque.harness.certs import Certs
from disque.harness.ports import lease_port

MB = 1 << 20


class RawClient:
    """One connection, one command at a time, replies read without copies beyond one."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        # as redis-py and hiredis do: else a command's last segment can wait for the
        # server's delayed ACK (40 ms), whichever server it is
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.buf = bytearray(1 << 16)
        self.view = memoryview(self.buf)
        self.have = 0

    def close(self):
        self.sock.close()

    def send(self, *args: bytes):
        head = [b"*%d\r\n" % len(args)]
        for a in args:
            head.append(b"$%d\r\n" % len(a))
            head.append(a)
            head.append(b"\r\n")
        self.sock.sendall(b"".join(head))

    def _fill(self, need: int):
        """At least `need` bytes in the buffer."""
        if need > len(self.buf):
            grown = bytearray(max(need, 2 * len(self.buf)))
            grown[:self.have] = self.view[:self.have]
            self.buf, self.view = grown, memoryview(grown)
        while self.have < need:
            n = self.sock.recv_into(self.view[self.have:], len(self.buf) - self.have)
            if not n:
                raise ConnectionError("the server closed the connection")
            self.have += n

    def _line(self, pos: int) -> int:
        while True:
            end = self.buf.find(b"\r\n", pos, self.have)
            if end >= 0:
                return end
            self._fill(self.have + 1)

    def reply(self):
        """The next reply, parsed; the buffer is then reset."""
        value, end = self._parse(0)
        rest = self.have - end
        self.buf[:rest] = self.view[end:self.have]
        self.have = rest
        return value

    def _parse(self, pos: int):
        self._fill(pos + 1)
        end = self._line(pos)
        kind, text = self.buf[pos:pos + 1], bytes(self.buf[pos + 1:end])
        if kind in (b"+", b":"):
            return text, end + 2
        if kind == b"-":
            raise RuntimeError(text.decode())
        if kind == b"$":
            n = int(text)
            if n < 0:
                return None, end + 2
            self._fill(end + 2 + n + 2)
            return n, end + 2 + n + 2           # the body's length: nothing is copied
        if kind == b"*":
            n, pos, items = int(text), end + 2, []
            for _ in range(max(n, 0)):
                item, pos = self._parse(pos)
                items.append(item)
            return items, pos
        raise RuntimeError(f"unexpected reply type {kind!r}")


def one_round(c: RawClient, body: bytes, copies: int = 1) -> tuple[float, float]:
    t0 = time.perf_counter()
    if copies > 1:
        c.send(b"ADDJOB", b"bigq", body, b"0", b"REPLICATE", b"%d" % copies)
    else:
        c.send(b"ADDJOB", b"bigq", body, b"0")
    jid = c.reply()
    t1 = time.perf_counter()
    c.send(b"GETJOB", b"FROM", b"bigq")
    got = c.reply()
    t2 = time.perf_counter()
    if not got or got[0][2] != len(body):
        raise RuntimeError(f"GETJOB gave {got!r}, not a body of {len(body)} bytes")
    c.send(b"ACKJOB", jid)
    c.reply()
    return t1 - t0, t2 - t1


class Target:
    """One server, or a cluster of `copies` nodes, and where its client connects."""

    def __init__(self, args, kind: str, label: str, workers: int, copies: int, certs=None):
        self.label, self.copies, self.tls = label, copies, None
        extra = []
        if certs is not None:
            self.tls_lease = lease_port()
            extra = ["--tls-port", str(self.tls_lease.port)] + certs.server_args()
            self.tls = certs.client_context()
        self.nodes = [new_server(args, kind, f"{label}-n{i}" if copies > 1 else label,
                                 max(workers, 1), extra=extra if i == 0 else ())
                      for i in range(copies)]
        for srv in self.nodes:
            srv.start(args.start_timeout)
        if copies > 1:
            deadline = time.monotonic() + 30
            if not join(self.nodes, timeout=30):
                raise RuntimeError(f"{label}: the {copies} nodes did not form a cluster")
            wait_job_links([srv.client() for srv in self.nodes], max(workers, 1), deadline)
        self.port = self.tls_lease.port if certs is not None else self.nodes[0].port

    def client(self) -> RawClient:
        return RawClient(self.port, self.tls)

    def fresh_round(self, body: bytes) -> tuple[float, float]:
        """On a new connection: its first command is the big ADDJOB."""
        c = self.client()
        try:
            return one_round(c, body, self.copies)
        finally:
            c.close()

    def served_client(self) -> RawClient:
        """A connection that has used the queue already (ours: served by the queue's worker)."""
        c = self.client()
        one_round(c, b"x", self.copies)
        return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--disque-binary", default=os.environ.get("DISQUE_C_BINARY"))
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--sizes", default="1,8,32,100", help="body sizes in MB (1,8,32,100)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per size; the median is shown")
    ap.add_argument("--tls", action="store_true", help="ours over TLS too (ours-tls rows)")
    ap.add_argument("--replicate", type=int, default=1, metavar="N",
                    help="clusters of N nodes, ADDJOB ... REPLICATE N (1: single nodes)")
    mine = ap.parse_args(argv)
    args = parse_args([])
    args.disque_binary = mine.disque_binary
    args.logdir = tempfile.mkdtemp(prefix="disque-bench-bodies-")
    certs = Certs(os.path.join(args.logdir, "certs")) if mine.tls else None
    targets = [(f"ours(w={w})", "disque", int(w), None) for w in mine.workers.split(",")]
    if mine.tls:
        targets += [(f"ours-tls(w={w})", "disque", int(w), certs) for w in mine.workers.split(",")]
    if args.disque_binary:
        targets.insert(0, ("original", "cdisque", 0, None))
    sizes = [float(x) for x in mine.sizes.split(",")]
    modes = ("fresh", "served")
    times = {(label, m, s): ([], []) for label, *_ in targets for m in modes for s in sizes}
    servers, served = [], {}
    try:
        for label, kind, w, tls in targets:
            target = Target(args, kind, label, w, mine.replicate, tls)
            servers.append((label, target))
            served[label] = target.served_client()
        for s in sizes:
            body = os.urandom(int(s * MB))
            for n in range(mine.rounds):
                for label, target in servers:
                    for m in modes:
                        add, get = (target.fresh_round(body) if m == "fresh"
                                    else one_round(served[label], body, mine.replicate))
                        times[label, m, s][0].append(add)
                        times[label, m, s][1].append(get)
                        log(f"{s:g} MB round {n + 1}/{mine.rounds} {label} {m}: "
                            f"ADDJOB {add * 1e3:.1f} ms, GETJOB {get * 1e3:.1f} ms")
    finally:
        for c in served.values():
            c.close()
        cleanup_all()
        shutil.rmtree(args.logdir, ignore_errors=True)
    med = {k: (statistics.median(a), statistics.median(g)) for k, (a, g) in times.items()}
    labels = [label for label, *_ in targets]
    if mine.replicate > 1:
        print(f"\nADDJOB ... REPLICATE {mine.replicate} on clusters of {mine.replicate} nodes")
    for m in modes:
        print(f"\n{m} connection, median of {mine.rounds}:")
        print("| body | " + " | ".join(f"{lb} ADDJOB / GETJOB (ms)" for lb in labels) + " |")
        print("|---|" + "---|" * len(labels))
        for s in sizes:
            cells = [f"{med[lb, m, s][0] * 1e3:.1f} / {med[lb, m, s][1] * 1e3:.1f}" for lb in labels]
            print(f"| {s:g} MB | " + " | ".join(cells) + " |")
        if args.disque_binary:
            print("ours / original (time; below 1.0 is faster):")
            for s in sizes:
                o = med["original", m, s]
                parts = [f"{lb}: ADDJOB {med[lb, m, s][0] / o[0]:.2f}x, "
                         f"GETJOB {med[lb, m, s][1] / o[1]:.2f}x" for lb in labels[1:]]
                print(f"  {s:g} MB: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
