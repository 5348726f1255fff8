"""INFO latency and throughput: our node vs the original Disque, in the same run.

Starts `disque-server --workers N` and, with --disque-binary, the original's binary, each on
a free loopback port, and
runs redis-benchmark against each, one after the other, for every load:

* `redis-benchmark -c 1 -n N INFO`  (one client in a loop: latency)
* `redis-benchmark -c 20 -n N INFO` (20 clients: throughput)
* the same two with PING: the floor of each server's request path, for reference
* the same with ADDJOB traffic from another redis-benchmark (`-c 10 ADDJOB q body 0`)
  running meanwhile, to see that INFO does not hold job commands back (ADDJOB req/s
  printed alongside).

    python bench/bench_info.py --disque-binary <original>/src/disque-server   # about a minute
    python bench/bench_info.py --n 20000 --repeat 3 --workers 2               # ours alone

Figures: requests/s and the average latency in ms as redis-benchmark reports them (--csv),
best of --repeat. The machine's load matters: compare the two servers within one run.
"""
import argparse
import csv
import io
import os
import shutil
import subprocess
import tempfile

from common.cluster import Proc, free_port
from disque.harness import disque_argv, original_argv, server_command


def benchmark(rb, port, clients, n, *command):
    out = subprocess.run([rb, "-p", str(port), "-c", str(clients), "-n", str(n), "--csv",
                          *command], capture_output=True, text=True, timeout=600).stdout
    rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"]
    rps = float(rows[-1][1])
    avg = float(rows[-1][2]) if len(rows[-1]) > 2 else 1000.0 * clients / rps
    return rps, avg


def run_side(name, argv_of, rb, n, repeat, port):
    """`argv_of(port, workdir)`: the server's command line."""
    d = tempfile.mkdtemp(prefix="dq-info-")
    proc = Proc(argv_of(port, d), d, port=port)
    results = {}
    try:
        proc.wait_ready(60)
        for label, clients in (("c1", 1), ("c20", 20)):
            results[label] = max((benchmark(rb, port, clients, n, "INFO") for _ in range(repeat)),
                                 key=lambda r: r[0])
            # the same load with PING: the floor of each server's request path
            results["ping-" + label] = max((benchmark(rb, port, clients, n, "PING")
                                            for _ in range(repeat)), key=lambda r: r[0])
        # INFO while ADDJOB traffic runs: INFO must not hold the job commands back
        adders = subprocess.Popen([rb, "-p", str(port), "-c", "10", "-n", str(n * 5), "--csv",
                                   "ADDJOB", "q", "body", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        results["c20+addjob"] = benchmark(rb, port, 20, n, "INFO")
        out = adders.communicate(timeout=600)[0]
        rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"]
        results["addjob"] = (float(rows[-1][1]), float(rows[-1][2]) if len(rows[-1]) > 2 else 0.0)
    finally:
        proc.stop(timeout=20)
        shutil.rmtree(d, ignore_errors=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="INFO requests per measurement")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--disque-binary", default=None,
                    help="the original disque-server, built by hand outside the repository")
    ap.add_argument("--redis-benchmark", default=shutil.which("redis-benchmark"))
    args = ap.parse_args()
    sides = [("ours (--workers %d)" % args.workers,
              lambda port, d: disque_argv(port, args.workers, command=server_command()))]
    if args.disque_binary:
        if not os.path.exists(args.disque_binary):
            raise SystemExit("no such file: %s" % args.disque_binary)
        sides.append(("original", lambda port, d: original_argv(args.disque_binary, port, d)))
    table = {}
    for name, cmd in sides:
        table[name] = run_side(name, cmd, args.redis_benchmark, args.n, args.repeat, free_port())
    print("| server | INFO -c 1 req/s | avg ms | INFO -c 20 req/s | avg ms "
          "| PING -c 1 req/s | PING -c 20 req/s "
          "| INFO -c 20 with ADDJOB -c 10 running: INFO req/s | ADDJOB req/s meanwhile |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in table.items():
        print("| %s | %.0f | %.3f | %.0f | %.3f | %.0f | %.0f | %.0f | %.0f |" % (
            name, r["c1"][0], r["c1"][1], r["c20"][0], r["c20"][1], r["ping-c1"][0],
            r["ping-c20"][0], r["c20+addjob"][0], r["addjob"][0]))
    if len(table) == 2:
        a, b = table.values()
        print("\nours/original: -c 1 %.2fx req/s, -c 20 %.2fx req/s" % (
            a["c1"][0] / b["c1"][0], a["c20"][0] / b["c20"][0]))


if __name__ == "__main__":
    main()
