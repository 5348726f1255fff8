"""The workload, run inside the clients' namespace (`ip netns exec dqf-cli python -m
faults.workload ...`): producers ADDJOB with REPLICATE 2 or 3 and RETRY a few seconds to a
random node; consumers GETJOB + ACKJOB on random nodes. Everything is recorded.

SIGUSR1 (the faults are healed): stop producing, keep consuming until nothing came for
--quiet seconds (or --drain-max passed), then write the record as JSON and exit."""
import argparse
import json
import random
import signal
import threading
import time
from collections import Counter

import redis

QUEUE = "faults"


def connect(addr, port, timeout):
    return redis.Redis(host=addr, port=port, socket_timeout=timeout,
                       socket_connect_timeout=timeout, decode_responses=False)


class Record:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}             # job id -> REPLICATE (ADDJOB answered with the id)
        self.attempts = 0
        self.errors = Counter()     # producer errors by type
        self.deliveries = Counter()  # job id -> times delivered by GETJOB
        self.consumer_errors = Counter()
        self.last_delivery = time.monotonic()


def error_type(e):
    if isinstance(e, redis.ResponseError):
        words = str(e).split() or ["ERR"]
        if not words[0].isupper():          # redis-py strips "ERR ": keep a hint
            return "ERR " + " ".join(words[:2])
        return words[0]
    return type(e).__name__


def producer(args, rec, stop):
    rng = random.Random()
    conns = {}
    seq = 0
    while not stop.is_set():
        node = rng.choice(args.addrs)
        repl = rng.choice((2, 3))
        seq += 1
        try:
            c = conns.get(node) or conns.setdefault(node, connect(node, args.port, 6))
            jid = c.execute_command("ADDJOB", QUEUE, b"p%d" % seq, args.addjob_timeout_ms,
                                    "REPLICATE", repl, "RETRY", args.retry, "TTL", 3600)
            with rec.lock:
                rec.attempts += 1
                rec.acked[jid.decode()] = repl
        except Exception as e:          # noqa: BLE001 - every failure is recorded by type
            conns.pop(node, None)
            with rec.lock:
                rec.attempts += 1
                rec.errors[error_type(e)] += 1
            time.sleep(0.05)


def consumer(args, rec, stop):
    rng = random.Random()
    conns = {}
    while not stop.is_set():
        node = rng.choice(args.addrs)
        try:
            c = conns.get(node) or conns.setdefault(node, connect(node, args.port, 4))
            jobs = c.execute_command("GETJOB", "TIMEOUT", 300, "COUNT", 20, "FROM", QUEUE)
            if not jobs:
                continue
            ids = [j[1] for j in jobs]
            with rec.lock:
                for jid in ids:
                    rec.deliveries[jid.decode()] += 1
                rec.last_delivery = time.monotonic()
            c.execute_command("ACKJOB", *ids)
        except Exception as e:          # noqa: BLE001
            conns.pop(node, None)
            with rec.lock:
                rec.consumer_errors[error_type(e)] += 1
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addrs", required=True, help="comma separated node addresses")
    ap.add_argument("--port", type=int, default=7711)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--retry", type=int, default=2)
    ap.add_argument("--addjob-timeout-ms", type=int, default=2000)
    ap.add_argument("--quiet", type=float, default=8.0)
    ap.add_argument("--drain-max", type=float, default=40.0)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.addrs = args.addrs.split(",")
    rec = Record()
    stop_p, stop_c = threading.Event(), threading.Event()
    draining = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *a: draining.set())
    threads = [threading.Thread(target=producer, args=(args, rec, stop_p), daemon=True)
               for _ in range(args.producers)]
    threads += [threading.Thread(target=consumer, args=(args, rec, stop_c), daemon=True)
                for _ in range(args.consumers)]
    for t in threads:
        t.start()
    started = time.monotonic()
    while not draining.wait(0.2):
        if time.monotonic() - started > args.max_seconds:
            break                       # bounded even if the harness never signals
    stop_p.set()
    drain_start = time.monotonic()
    rec.last_delivery = drain_start
    while True:
        time.sleep(0.2)
        now = time.monotonic()
        with rec.lock:
            quiet = now - rec.last_delivery
        if quiet >= args.quiet or now - drain_start >= args.drain_max:
            break
    stop_c.set()
    for t in threads:
        t.join(10)
    with rec.lock:
        out = {"acked": rec.acked, "attempts": rec.attempts, "errors": dict(rec.errors),
               "deliveries": dict(rec.deliveries), "consumer_errors": dict(rec.consumer_errors),
               "drain_seconds": round(time.monotonic() - drain_start, 1)}
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
