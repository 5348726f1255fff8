#!/usr/bin/env python3
"""Does scraping the metrics port hurt clients? (docs/metrics.md)

Starts one `disque-server --workers W --metrics-port P` and runs one redis-py client doing
ADDJOB one at a time (closed loop). Rounds alternate: without scrapes, then with a scraper
GETting /metrics (or the dashboard's /api/overview with --path) every --interval seconds,
and so on (--rounds pairs), so both conditions see the same machine load. Prints the
client's p50/p99/p99.9 per condition and the scrape response times.

    python bench/bench_metrics_scrape.py --seconds 5 --rounds 3
    python bench/bench_metrics_scrape.py --path /api/overview
    python bench/bench_metrics_scrape.py --exposition prometheus_client

--exposition prometheus_client has the node write /metrics with prometheus_client's
generate_latest instead of its own writer (same bytes, see disque/metrics/prom.py).
"""
import argparse
import http.client
import os
import statistics
import tempfile
import threading
import time

import redis

from common.cluster import Proc, free_port
from disque.harness import disque_argv


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1e6


def client_round(r, seconds, queues):
    lat = []
    end = time.perf_counter() + seconds
    i = 0
    while True:
        t0 = time.perf_counter()
        if t0 > end:
            return lat
        r.execute_command("ADDJOB", queues[i % len(queues)], b"x" * 100, 0)
        lat.append(time.perf_counter() - t0)
        i += 1


def scraper(port, path, interval, stop, times, sizes):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    nxt = time.monotonic()
    while not stop.is_set():
        t0 = time.perf_counter()
        conn.request("GET", path)
        body = conn.getresponse().read()
        times.append(time.perf_counter() - t0)
        sizes.append(len(body))
        nxt += interval
        stop.wait(max(0.0, nxt - time.monotonic()))
    conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of rounds (without, with)")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between scrapes")
    ap.add_argument("--path", default="/metrics")
    ap.add_argument("--queues", type=int, default=50, help="queues the client writes to")
    ap.add_argument("--exposition", choices=("ours", "prometheus_client"), default="ours")
    args = ap.parse_args()
    port, mport = free_port(), free_port()
    work = tempfile.mkdtemp(prefix="bench-metrics-")
    proc = Proc(disque_argv(port, args.workers, "--metrics-port", mport), work, port=port,
                env=dict(os.environ, DISQUE_METRICS_EXPOSITION=args.exposition))
    try:
        proc.wait_ready(30)
        r = redis.Redis(port=port)
        queues = ["bench-q%d" % i for i in range(args.queues)]
        client_round(r, 1.0, queues)              # warm-up
        results = {"without": [], "with": []}
        scrape_times, sizes = [], []
        for _ in range(args.rounds):
            results["without"] += client_round(r, args.seconds, queues)
            stop = threading.Event()
            t = threading.Thread(target=scraper, args=(mport, args.path, args.interval, stop,
                                                        scrape_times, sizes))
            t.start()
            results["with"] += client_round(r, args.seconds, queues)
            stop.set()
            t.join()
        print("ADDJOB latency, one client, %d workers, %s (%s writer) every %gs, %d x %gs rounds, "
              "load avg %.2f" % (args.workers, args.path, args.exposition, args.interval,
                                 args.rounds, args.seconds, os.getloadavg()[0]))
        print("%-8s %9s %9s %9s %9s %10s" % ("scrapes", "ops", "p50 us", "p99 us", "p99.9 us", "max us"))
        for name, lat in results.items():
            print("%-8s %9d %9.0f %9.0f %9.0f %10.0f" % (name, len(lat), pct(lat, .5), pct(lat, .99),
                                                       pct(lat, .999), max(lat) * 1e6))
        print("scrapes: %d, response p50 %.2f ms, p99 %.2f ms, body %d bytes" % (
            len(scrape_times), pct(scrape_times, .5) / 1000, pct(scrape_times, .99) / 1000,
            statistics.median(sizes)))
        p99 = pct(results["with"], .99) / pct(results["without"], .99)
        print("p99 with / without: %.2f" % p99)
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
