"""The workload, run inside the clients' namespace (`ip netns exec dqf-cli python -m
faults.workload ...`): producers ADDJOB with REPLICATE 2 or 3 and RETRY a few seconds to a
random node; consumers GETJOB + ACKJOB on random nodes. Everything is recorded.

The producers' acknowledged adds are counted per BUCKET seconds. The first --warmup
seconds (less the first, while connections open) give the fault-free rate; SIGUSR1 (the
faults are healed) starts the recovery clock: producing goes on until one second's adds
reach RECOVERED of that rate (or --recover-max passed). Then producing stops, consuming
goes on until nothing came for --quiet seconds (or --drain-max passed), and the record is
written as JSON.

With --groups N, half of the adds are jobs of N job groups (docs/job-groups.md) on their
own queue, GROUPS_QUEUE: each group belongs to one producer, which adds its jobs one after
another (each answered before the next is sent) through random nodes. Consumers record,
per group, the order of first deliveries and any delivery of another job of the group
while one is in flight (from the GETJOB reply to the ACKJOB, a part of the server's window
for it, so a violation seen here is one); faults/checker.py reads both.

For the soak (faults/soak.py): --rate caps the adds per second, --backlog makes consumers
take jobs only while more than that many acknowledged adds wait undelivered (the backlog
rises to it, then stays there: consumption follows production), and --status gets the
counters every second."""
import argparse
import json
import os
import random
import signal
import threading
import time
from collections import Counter

import redis

QUEUE = "faults"
GROUPS_QUEUE = "faults-groups"
BUCKET = 0.25           # seconds per count of acknowledged adds
RECOVERED = 0.8         # a second with this share of the fault-free rate: recovered
RECOVER_MAX = 30.0      # seconds after the heal at most
# --probes (faults/clocks.py): this share of the adds are timing probes, one kind each:
# DELAY (first delivery no earlier than DELAY after the ADDJOB was sent), RETRY (left
# unacknowledged once: delivered again no earlier than RETRY after it was sent), a TTL
# shorter than a clock step but longer than the run, with a DELAY (delivered all the same)
PROBE_KINDS = (b"d", b"r", b"t")


def connect(addr, port, timeout):
    # protocol=2: redis-py 8 would open with HELLO 3, which is Disque's HELLO (no arguments)
    return redis.Redis(host=addr, port=port, socket_timeout=timeout, protocol=2,
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
        self.started = time.monotonic()
        self.added = Counter()      # bucket index since `started` -> acknowledged adds
        self.id_reuse = 0           # an ID answered to two ADDJOBs
        self.probes = {}            # id -> [kind, monotonic send time, deliveries' times]
        self.order_pairs = 0        # pairs of one producer's jobs on one node in one GETJOB
        self.order_inverted = 0     # ... delivered in the opposite order of their adds
        self.first_deliveries = 0   # distinct jobs delivered (the backlog's other side)
        self.draining = False       # producers stopped: consumers take everything
        # job groups (--groups): per group, [job id, monotonic ack time] of its acknowledged
        # adds in order, [job id, monotonic time] of its deliveries, and the job delivered
        # and not acked yet; deliveries of a second job while one is in flight
        self.group_acked = {}
        self.group_deliveries = {}
        self.group_in_flight = {}
        self.group_two_in_flight = []

    def count_add(self):
        """Under the lock."""
        self.added[int((time.monotonic() - self.started) / BUCKET)] += 1

    def add_answered(self, jid, repl):
        """Under the lock: an ADDJOB answered with the ID `jid` (str)."""
        self.attempts += 1
        self.id_reuse += jid in self.acked
        self.acked[jid] = repl
        self.count_add()

    def add_failed(self, e):
        with self.lock:
            self.attempts += 1
            self.errors[error_type(e)] += 1

    def rate(self, t0, t1):
        """Acknowledged adds per second between t0 and t1 seconds after the start."""
        with self.lock:
            n = sum(self.added[b] for b in range(int(t0 / BUCKET), int(t1 / BUCKET)))
        return n / max(t1 - t0, BUCKET)


def error_type(e):
    if isinstance(e, redis.ResponseError):
        words = str(e).split() or ["ERR"]
        if not words[0].isupper():          # redis-py strips "ERR ": keep a hint
            return "ERR " + " ".join(words[:2])
        return words[0]
    return type(e).__name__


def pace(args, next_t):
    """With --rate: wait for this producer's next slot (no burst to catch up after a stall)."""
    if not args.rate:
        return 0.0
    now = time.monotonic()
    if next_t > now:
        time.sleep(next_t - now)
    return max(next_t, now) + args.producers / args.rate


def producer(args, rec, stop, index=0):
    rng = random.Random()
    conns = {}
    seq = 0
    next_t = 0.0
    own_groups = list(range(index, args.groups, args.producers))
    while not stop.is_set():
        next_t = pace(args, next_t)
        node = rng.choice(args.addrs)
        repl = rng.choice((2, 3))
        seq += 1
        if own_groups and rng.random() < 0.5:
            add_group_job(args, rec, conns, node, repl, rng.choice(own_groups), seq)
            continue
        kind = rng.choice(PROBE_KINDS) if rng.random() < args.probes else b"p"
        opts = {b"p": ("RETRY", args.retry, "TTL", 3600),
                b"d": ("DELAY", args.probe_delay, "RETRY", args.retry, "TTL", 3600),
                b"r": ("RETRY", args.probe_retry, "TTL", 3600),
                # delayed: it sits on its nodes for a while, where a clock step can cut it
                b"t": ("DELAY", args.probe_delay, "RETRY", args.retry,
                       "TTL", args.probe_ttl)}[kind]
        # kind, producer, node, sequence: what the consumers' checks read back
        body = b"%s%d:%s:%d" % (kind, index, node.encode(), seq)
        try:
            c = conns.get(node) or conns.setdefault(node, connect(node, args.port, 6))
            sent = time.monotonic()
            jid = c.execute_command("ADDJOB", QUEUE, body, args.addjob_timeout_ms,
                                    "REPLICATE", repl, *opts)
            with rec.lock:
                rec.add_answered(jid.decode(), repl)
                if kind != b"p":
                    rec.probes.setdefault(jid.decode(), [kind.decode(), sent, []])
        except Exception as e:          # noqa: BLE001 - every failure is recorded by type
            conns.pop(node, None)
            rec.add_failed(e)
            time.sleep(0.05)


def add_group_job(args, rec, conns, node, repl, group, seq):
    body = b"G%d:%d" % (group, seq)
    try:
        c = conns.get(node) or conns.setdefault(node, connect(node, args.port, 6))
        jid = c.execute_command("ADDJOB", GROUPS_QUEUE, body, args.addjob_timeout_ms,
                                "REPLICATE", repl, "RETRY", args.retry, "TTL", 3600,
                                "GROUP", "g%d" % group).decode()
        with rec.lock:
            rec.add_answered(jid, repl)
            rec.group_acked.setdefault(group, []).append([jid, time.monotonic()])
    except Exception as e:          # noqa: BLE001 - every failure is recorded by type
        conns.pop(node, None)
        rec.add_failed(e)
        time.sleep(0.05)


def group_of(body):
    """The group of a job group's body (b"G<group>:<seq>"), None for any other body."""
    return int(body[1:].split(b":")[0]) if body.startswith(b"G") else None


def group_delivered(rec, jobs, now):
    """Under the lock: the jobs of groups in one GETJOB reply, marked in flight."""
    for _queue, jid, body in jobs:
        group = group_of(body)
        if group is None:
            continue
        jid = jid.decode()
        other = rec.group_in_flight.get(group)
        if other is not None and other != jid:
            rec.group_two_in_flight.append([group, other, jid, now])
        rec.group_in_flight[group] = jid
        rec.group_deliveries.setdefault(group, []).append([jid, now])


def group_acking(rec, jobs):
    """Under the lock, before the ACKJOB leaves: its groups are no longer in flight."""
    for _queue, jid, body in jobs:
        group = group_of(body)
        if group is not None and rec.group_in_flight.get(group) == jid.decode():
            del rec.group_in_flight[group]


def consumer(args, rec, stop):
    rng = random.Random()
    conns = {}
    while not stop.is_set():
        if args.backlog and not rec.draining and backlog(rec) <= args.backlog:
            time.sleep(0.02)
            continue
        node = rng.choice(args.consumer_addrs or args.addrs)
        try:
            c = conns.get(node) or conns.setdefault(node, connect(node, args.port, 4))
            jobs = c.execute_command("GETJOB", "TIMEOUT", 300, "COUNT", 20, "FROM", *args.queues)
            if not jobs:
                continue
            ids = [j[1] for j in jobs]
            now = time.monotonic()
            with rec.lock:
                for jid in ids:
                    jid = jid.decode()
                    rec.first_deliveries += jid not in rec.deliveries
                    rec.deliveries[jid] += 1
                rec.last_delivery = now
                check_order(rec, jobs)
                keep = retry_probes_to_keep(rec, jobs, now)
                group_delivered(rec, jobs, now)
            ids = [jid for jid in ids if jid not in keep]
            if ids:
                with rec.lock:
                    group_acking(rec, jobs)
                c.execute_command("ACKJOB", *ids)
        except Exception as e:          # noqa: BLE001
            conns.pop(node, None)
            with rec.lock:
                rec.consumer_errors[error_type(e)] += 1
            time.sleep(0.05)


def check_order(rec, jobs):
    """Under the lock. One GETJOB's jobs come in their queue's order, by creation time: two
    jobs one producer added to one node one after the other must come in that order."""
    last = {}                           # (producer, node) -> sequence of the latest seen
    for _queue, _jid, body in jobs:
        if body.startswith(b"G"):
            continue                    # a job group's (group_delivered)
        try:
            who, node, seq = body[1:].split(b":")
            seq = int(seq)
        except ValueError:
            continue                    # not a body of this workload's producers
        if (who, node) in last:
            rec.order_pairs += 1
            rec.order_inverted += seq < last[(who, node)]
        last[(who, node)] = max(seq, last.get((who, node), seq))


def retry_probes_to_keep(rec, jobs, now):
    """Under the lock: the RETRY probes delivered for the first time, left unacknowledged
    so that they come back after their RETRY; every delivery's time is recorded."""
    keep = set()
    for _queue, jid, _body in jobs:
        probe = rec.probes.get(jid.decode())
        if probe is not None:
            probe[2].append(now)
            if probe[0] == "r" and len(probe[2]) == 1:
                keep.add(jid)
    return keep


def backlog(rec):
    """Acknowledged adds not delivered yet (jobs delivered without an acknowledged add make
    it a little smaller)."""
    return len(rec.acked) - rec.first_deliveries


def write_status(args, rec):
    """The counters, for the soak's sampler (replaced whole, never half written)."""
    with rec.lock:
        status = {"time": time.time(), "acked": len(rec.acked), "attempts": rec.attempts,
                  "delivered": rec.first_deliveries,
                  "deliveries": sum(rec.deliveries.values()), "backlog": backlog(rec),
                  "errors": sum(rec.errors.values()),
                  "consumer_errors": sum(rec.consumer_errors.values())}
    with open(args.status + ".tmp", "w") as f:
        json.dump(status, f)
    os.replace(args.status + ".tmp", args.status)


def reload_addrs(args):
    """Membership scenarios change the nodes to talk to; the threads read `args.addrs`,
    which is replaced whole, never changed in place. An optional second line names the
    consumers' nodes (a leaving node is still drained by consumers, not given jobs)."""
    if args.addrs_file:
        try:
            with open(args.addrs_file) as f:
                lines = f.read().split("\n")
        except OSError:
            return
        addrs = lines[0].split()
        if addrs:
            args.addrs = addrs
            args.consumer_addrs = (lines[1].split() if len(lines) > 1 else []) or None


def measure_recovery(args, rec):
    """After the heal: seconds until one second's acknowledged adds reach RECOVERED of the
    fault-free rate (None when not within --recover-max), and the rates themselves."""
    baseline = rec.rate(1.0, args.warmup)
    healed = time.monotonic() - rec.started
    recover_s = None
    while True:
        now = time.monotonic() - rec.started
        if now - healed >= 1.0 and rec.rate(now - 1.0, now) >= RECOVERED * baseline:
            recover_s = round(now - healed, 2)
            break
        if now - healed >= args.recover_max:
            break
        time.sleep(BUCKET)
    return {"baseline_rate": round(baseline, 1), "recover_seconds": recover_s,
            "fault_rate": round(rec.rate(args.warmup, healed), 1),
            "adds_per_second": [rec.added[b] / BUCKET
                                for b in range(int((time.monotonic() - rec.started) / BUCKET))]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addrs", required=True, help="comma separated node addresses")
    ap.add_argument("--addrs-file", help="read again every second: the nodes to talk to now")
    ap.add_argument("--port", type=int, default=7711)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--retry", type=int, default=2)
    ap.add_argument("--addjob-timeout-ms", type=int, default=2000)
    ap.add_argument("--quiet", type=float, default=8.0)
    ap.add_argument("--drain-max", type=float, default=40.0)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--warmup", type=float, default=4.0, help="fault-free seconds first")
    ap.add_argument("--recover-max", type=float, default=RECOVER_MAX)
    ap.add_argument("--probes", type=float, default=0.0, help="share of adds that are probes")
    ap.add_argument("--probe-delay", type=int, default=3)
    ap.add_argument("--probe-retry", type=int, default=3)
    ap.add_argument("--probe-ttl", type=int, default=3600)
    ap.add_argument("--rate", type=float, default=0, help="adds per second at most (0: no cap)")
    ap.add_argument("--backlog", type=int, default=0,
                    help="consumers take jobs only above this backlog (0: always)")
    ap.add_argument("--status", help="the counters, written every second")
    ap.add_argument("--groups", type=int, default=0,
                    help="job groups: half of the adds go to this many groups (0: none)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.addrs = args.addrs.split(",")
    args.consumer_addrs = None          # None: the producers' nodes
    args.queues = [QUEUE, GROUPS_QUEUE] if args.groups else [QUEUE]
    rec = Record()
    stop_p, stop_c = threading.Event(), threading.Event()
    draining = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *a: draining.set())
    threads = [threading.Thread(target=producer, args=(args, rec, stop_p, i), daemon=True)
               for i in range(args.producers)]
    threads += [threading.Thread(target=consumer, args=(args, rec, stop_c), daemon=True)
                for _ in range(args.consumers)]
    for t in threads:
        t.start()
    started = time.monotonic()
    started_unix = time.time()
    status_t = 0.0
    while not draining.wait(0.2):
        if time.monotonic() - started > args.max_seconds:
            break                       # bounded even if the harness never signals
        reload_addrs(args)
        if args.status and time.monotonic() - status_t >= 1.0:
            status_t = time.monotonic()
            write_status(args, rec)
    recovery = measure_recovery(args, rec)
    stop_p.set()
    rec.draining = True
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
               "drain_seconds": round(time.monotonic() - drain_start, 1), **recovery,
               "id_reuse": rec.id_reuse, "order_pairs": rec.order_pairs,
               "order_inverted": rec.order_inverted, "ended": time.monotonic(),
               "probes": rec.probes, "probe_options": {"d": args.probe_delay,
                                                       "r": args.probe_retry, "t": args.probe_ttl},
               # the wall-clock time of adds_per_second's first bucket
               "started_unix": started_unix - (started - rec.started),
               "retry": args.retry, "groups": args.groups,
               "group_acked": rec.group_acked, "group_deliveries": rec.group_deliveries,
               "group_two_in_flight": rec.group_two_in_flight}
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
