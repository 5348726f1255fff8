"""The soak (docs/faults-soak.md): one long run of the mixed workload on AOF everysec
nodes, with a fault every period (a minute) drawn with the seed from the catalogue's
schedule-only scenarios, held 25-33 % of the period, then healed. A sampler records every
process's RSS (by PID: restarts show as new PIDs), each node's INFO used_memory, jobs and
queued counts and QLEN, and the workload's counters. At the end: the checker's figures
for the whole run, the memory growth verdict (faults/soak_memory.py) and a picture.

    faults/run --soak [--soak-minutes 30] [--soak-out DIR] [--soak-picture PNG]
"""
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from faults import netns, runs
from faults import nodes as fault_nodes
from faults.catalog import SCENARIOS
from faults.checker import check, table
from faults.scenario import Scenario
from faults.soak_memory import picture, recoveries, recovery_summary, verdict, verdict_table

BACKLOG = 2000          # jobs waiting undelivered once steady (the workload's --backlog)
RATE = 200.0            # adds per second, all producers together
HOLD = (0.25, 0.33)     # share of the period a fault is held
AOF = "everysec"
# schedule-only scenarios that are left out, and why
LEFT_OUT = {"kill-all-always": "restarts every process at once, the same as kill-node x5",
            "kill-all-everysec": "restarts every process at once, the same as kill-node x5",
            "kill-node-always": "the soak's nodes run everysec: the same as kill-node-everysec"}


def add_arguments(ap):
    ap.add_argument("--soak", action="store_true",
                    help="one long run with a fault every --soak-period (docs/faults-soak.md)")
    ap.add_argument("--soak-minutes", type=float, default=30.0)
    ap.add_argument("--soak-seconds", type=float, help="the soak's length, instead of minutes")
    ap.add_argument("--soak-period", type=float, default=60.0, help="seconds between faults")
    ap.add_argument("--soak-every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--soak-out", help="where the samples go (default /tmp/dqf-soak-*)")
    ap.add_argument("--soak-picture", help="the memory picture (default SOAK_OUT/memory.png)")
    ap.add_argument("--soak-backlog", type=int, default=BACKLOG)
    ap.add_argument("--soak-rate", type=float, default=RATE)


def schedule_only(sc):
    """A scenario that is only a schedule: no node setup at start, no spares."""
    plain = Scenario(sc.schedule)
    return (sc.spares == 0 and sc.aof in (None, AOF)
            and all(getattr(sc, f) is getattr(plain, f)
                    for f in ("node_env", "node_args", "prepare", "finish")))


def fault_pool(original):
    """One name per schedule (kill-worker and kill-worker-aof differ only by their AOF,
    and the soak's nodes have theirs), in the catalogue's order."""
    names, schedules = [], set()
    for name, sc in SCENARIOS.items():
        if (schedule_only(sc) and name not in LEFT_OUT and not (original and sc.ours_only)
                and sc.schedule not in schedules):
            names.append(name)
            schedules.add(sc.schedule)
    return names


# ---- the sampler ----

def parse_info(text):
    fields, workers = {}, {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.startswith("worker") and key[6:].isdigit() and "pid=" in value:
            kv = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
            workers[int(kv["pid"])] = {"role": "w" + key[6:], "queued": int(kv.get("queued", 0))}
        elif value:
            fields[key] = value.strip()
    return fields, workers


class Sampler(threading.Thread):
    """Every `every` seconds: each process's RSS, each node's INFO figures and QLEN, the
    workload's counters. Rows are kept (for the verdict and the picture) and appended to
    CSV files in `out`."""

    def __init__(self, ctx, out, every, status_path, t0):
        super().__init__(daemon=True)
        self.ctx, self.every, self.status_path, self.t0 = ctx, every, status_path, t0
        self.stop_ev = threading.Event()
        self.procs, self.nodes, self.load = [], [], []
        self.errors = 0
        self.files = {}
        for name, head in (("processes", ("t", "node", "pid", "role", "rss_mb")),
                           ("nodes", ("t", "node", "alive", "rss_mb", "used_memory_mb",
                                      "jobs", "queued", "qlen")),
                           ("workload", ("t", "acked", "delivered", "backlog", "adds_per_s",
                                         "deliveries_per_s", "errors", "consumer_errors"))):
            f = open(os.path.join(out, name + ".csv"), "w", newline="")
            w = csv.writer(f)
            w.writerow(head)
            self.files[name] = (f, w)
        self.last_status = None
        self.roles = {}                 # pid -> front / wK, kept while INFO does not answer

    def row(self, name, rows, values):
        rows.append(values)
        self.files[name][1].writerow(values)

    def run(self):
        nxt = time.monotonic()
        while not self.stop_ev.is_set():
            try:
                self.sample(round(time.monotonic() - self.t0, 1))
            except Exception as e:      # noqa: BLE001 - a bad sample must not end the soak
                self.errors += 1
                self.ctx.note("sampler: %s: %s" % (type(e).__name__, e))
            for f, _ in self.files.values():
                f.flush()
            nxt += self.every
            self.stop_ev.wait(max(0.0, nxt - time.monotonic()))

    def sample(self, t):
        for node in self.ctx.nodes:
            info = fault_nodes.cli(node.i, "INFO", "all", timeout=2) if node.alive() else None
            fields, workers = parse_info(info)
            qlen = fault_nodes.cli(node.i, "QLEN", "faults", timeout=2) if info else None
            total = 0.0
            for p in node.procs():
                try:
                    rss = p.memory_info().rss / 1e6
                except psutil.Error:
                    continue            # gone between the listing and the reading
                if rss == 0:
                    continue            # a zombie: killed, not reaped yet
                role = "front" if p.pid == node.pid else workers.get(p.pid, {}).get("role")
                role = self.roles.setdefault(p.pid, role or "proc") if role is None else role
                self.roles[p.pid] = role
                total += rss
                self.row("processes", self.procs, (t, node.i, p.pid, role, round(rss, 2)))
            used = fields.get("used_memory")
            jobs = fields.get("registered_jobs")
            queued = sum(w["queued"] for w in workers.values()) if workers else ""
            self.row("nodes", self.nodes, (
                t, node.i, int(info is not None), round(total, 2),
                round(int(used) / 1e6, 3) if used and used.isdigit() else "",
                int(jobs) if jobs and jobs.isdigit() else "", queued,
                int(qlen) if qlen and qlen.lstrip("-").isdigit() else ""))
        try:
            with open(self.status_path) as f:
                st = json.load(f)
        except (OSError, ValueError):
            return
        prev, self.last_status = self.last_status, st
        dt = st["time"] - prev["time"] if prev else 0
        self.row("workload", self.load, (
            t, st["acked"], st["delivered"], st["backlog"],
            round((st["acked"] - prev["acked"]) / dt, 1) if dt > 0 else "",
            round((st["deliveries"] - prev["deliveries"]) / dt, 1) if dt > 0 else "",
            st["errors"], st["consumer_errors"]))

    def finish(self):
        self.stop_ev.set()
        self.join(30)
        for f, _ in self.files.values():
            f.close()


# ---- the run ----

def inject(ctx, name, hold, faults, t0, out):
    """One fault of the pool, held `hold` seconds, then everything healed."""
    sc = SCENARIOS[name]
    start = time.monotonic()
    ctx.scenario = sc                   # heal_all calls its heal hook
    ctx.note("fault %s for %.0fs" % (name, hold))
    try:
        sc.schedule(ctx, start + hold)
    finally:
        ctx.note("heal %s" % name)
        runs.heal_all(ctx)
        faults.append({"name": name, "start": round(start - t0, 1),
                       "end": round(time.monotonic() - t0, 1), "heal_unix": time.time()})
        with open(os.path.join(out, "faults.json"), "w") as f:
            json.dump(faults, f, indent=1)      # for a look at a run still going


def soak_seconds(args):
    return args.soak_seconds if args.soak_seconds else 60.0 * args.soak_minutes


def run(args, root, out, log):
    total = soak_seconds(args)
    base = Scenario(lambda ctx, until: None, AOF)
    rng = random.Random("%s-soak" % args.seed)
    ctx = runs.Context("soak", base, args, os.path.join(root, "soak"), rng, log)
    os.makedirs(ctx.dir, exist_ok=True)
    pool = fault_pool(args.disque_binary)
    log("   fault pool: %s" % ", ".join(pool))
    workload = sampler = None
    faults = []
    try:
        ctx.nodes = [ctx.make_node(i) for i in range(args.nodes)]
        runs.start_nodes(ctx)
        ctx.set_addrs(ctx.nodes)
        record_path = os.path.join(ctx.dir, "record.json")
        status = os.path.join(out, "workload-status.json")
        workload = subprocess.Popen(
            ["ip", "netns", "exec", netns.CLIENT, sys.executable, "-m", "faults.workload",
             "--addrs", ",".join(netns.node_addr(n.i) for n in ctx.nodes),
             "--addrs-file", ctx.addrs_path, "--out", record_path, "--warmup", str(args.warmup),
             "--rate", str(args.soak_rate), "--backlog", str(args.soak_backlog),
             "--status", status, "--max-seconds", str(total + args.warmup + 300)],
            cwd=fault_nodes.REPO, env=fault_nodes.env())
        t0 = time.monotonic()
        sampler = Sampler(ctx, out, args.soak_every, status, t0)
        sampler.start()
        time.sleep(args.warmup)
        ctx.t0 = t0
        deck = []
        period_start = time.monotonic()
        while period_start + args.soak_period <= t0 + args.warmup + total + 0.5:
            if not deck:                # every fault of the pool once, in a seeded order
                deck = list(pool)
                rng.shuffle(deck)
            inject(ctx, deck.pop(), rng.uniform(*HOLD) * args.soak_period, faults, t0, out)
            period_start += args.soak_period
            time.sleep(max(0.0, period_start - time.monotonic()))
        ctx.note("end of the soak")
        ctx.scenario = base
        runs.heal_all(ctx)
        sampler.finish()
        workload.send_signal(signal.SIGUSR1)
        workload.wait(timeout=300)
        with open(record_path) as f:
            record = json.load(f)
        res = check("soak", AOF, record, ctx)
        res["fault_recoveries"] = recoveries(record, faults)
        res["fault_recovery"] = recovery_summary(res["fault_recoveries"])
        res["faults"] = faults
        res["soak_seconds"] = total
        res["sampler_errors"] = sampler.errors
        res["memory"] = verdict(sampler, total, args.warmup)
        return res, sampler, faults
    finally:
        if sampler is not None and sampler.is_alive():
            sampler.finish()
        if workload is not None and workload.poll() is None:
            workload.kill()
            workload.wait()
        for node in ctx.nodes:
            node.stop()


def main(args):
    """faults/run --soak: the harness's lock is held; returns the exit code."""
    out = args.soak_out or tempfile.mkdtemp(prefix="dqf-soak-")
    os.makedirs(out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="dqf-run-")

    def log(line):
        print(line, flush=True)
    log("== soak: %d nodes, %s, %.0f s, a fault every %.0f s; samples in %s" % (
        args.nodes, "original " + args.disque_binary if args.disque_binary
        else "--workers %d" % args.workers, soak_seconds(args), args.soak_period, out))
    t_start = time.monotonic()
    try:
        netns.setup(args.nodes)
        try:
            res, sampler, faults = run(args, root, out, log)
        except Exception as e:          # noqa: BLE001 - a failed run is a result too
            res, sampler = {"scenario": "soak", "error": "%s: %s" % (type(e).__name__, e)}, None
    finally:
        netns.cleanup()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    res["seconds"] = round(time.monotonic() - t_start, 1)
    res["out"] = out
    if sampler is not None and "memory" in res:
        try:
            res["picture"] = picture(sampler, faults, res["memory"],
                                     args.soak_picture or os.path.join(out, "memory.png"),
                                     "original" if args.disque_binary else "ours")
        except ImportError:             # matplotlib comes with the spark extra
            log("   no picture: matplotlib is not installed (pip install -e '.[spark]')")
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(table([res]))
    if "memory" in res:
        print("recovery after each fault: %s" % json.dumps(res["fault_recovery"]))
        print(verdict_table(res["memory"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([res], f, indent=1)
    bad = res.get("error") or res.get("lost") or res.get("crashed") or not res.get("all_answer")
    return 1 if bad else 0

