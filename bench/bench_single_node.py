#!/usr/bin/env python3
"""Single-node benchmark: our Python Disque vs a real redis-server.

Starts a real ``redis-server`` and our ``disque-server`` (for each requested
``--workers`` value), applies the SAME client load to both and prints a table
with the figures and the ratio ours/Redis:

  (a) redis-benchmark (C client), 50 connections: ADDJOB vs LPUSH with the same
      body, unpipelined and with ``-P 16``  -> req/s, p50/p99 latency.
  (b) produce/consume/ack cycle with one redis-py (hiredis, RESP2) client, one
      command at a time: 100x ADDJOB + GETJOB COUNT 100 + ACKJOB <100 ids>
      vs the Redis reliable-queue pattern 100x LPUSH + 100x LMOVE + 100x LREM
      -> jobs/s, client-side per-command p50/p99 of ADDJOB vs LPUSH.
  (c) memory per job: 1M jobs (100-byte bodies, 16 queues) loaded with
      pipelined redis-py on a FRESH server -> RSS delta / jobs.

For every phase the server CPU time per job (user+sys of all server processes,
i.e. the front-end plus all its descendants) is reported too.

Run (from the repo root):
    .venv/bin/python bench/bench_single_node.py            # full run
    .venv/bin/python bench/bench_single_node.py --quick    # smoke run
    .venv/bin/python bench/bench_single_node.py --json /tmp/bench.json

Note: the machine has 2 cores and the load generator runs on the same
machine, so client and server compete for CPU; the ratios are what matter.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback

try:
    import redis
except ImportError as exc:  # pragma: no cover - environment problem
    sys.stderr.write(
        f"missing dependency ({exc}); run with the project venv: "
        ".venv/bin/python bench/bench_single_node.py\n")
    sys.exit(2)

from common.loads import run_cycle, run_memory, run_redis_benchmark
from common.machine import NOISY_CORES, best_of, other_note, set_wait_quiet, wait_quiet
from common.options import parse_args
from common.report import BenchError, StartError, log, warn
from common.servers import cleanup_all, new_server

# Reference figures of the original C Disque measured on this machine.
TARGETS = {
    "a_plain_rps": ("~1.0x", 1.0),
    "a_pipe_rps": ("~0.17x", 0.17),
    "b_cycle_jobs_s": ("~2.7x", 2.7),
    "c_bytes_per_job": ("~560 B/job", None),
}


def bench_target(args, kind: str, label: str, workers: int = 1) -> dict:
    """Run phases (a), (b) on one server instance and (c) on a fresh one."""
    results: dict = {"label": label, "kind": kind, "workers": workers, "errors": {}}
    phases = args.phases
    start_failed = False
    if "a" in phases or "b" in phases:
        srv = new_server(args, kind, label, workers)
        try:
            srv.start(args.start_timeout)
            results["server_cmd"] = srv.argv
            results["processes"] = len(srv.procs())
            if "a" in phases:
                for key, n, pl in (("a_plain", args.n_plain, 1), ("a_pipe", args.n_pipe, args.pipeline)):
                    what = ("LPUSH" if kind == "redis" else "ADDJOB")
                    log(f"{label}: (a) redis-benchmark {what} c={args.clients} "
                        f"{'-P ' + str(pl) if pl > 1 else 'unpipelined'} n={n:,}")
                    try:
                        r = best_of(args.repeat, lambda: run_redis_benchmark(args, srv, n, pl), "rps", srv)
                        results[key] = r
                        log(f"{label}:     -> {r['rps']:,.0f} req/s  p50 {r['p50_ms']:.3f} ms  "
                            f"p99 {r['p99_ms']:.3f} ms  server CPU {r['cpu_us_per_job']:.2f} us/job"
                            + other_note(r))
                    except BenchError as exc:
                        results["errors"][key] = str(exc)
                        warn(f"{label}: (a) failed: {exc}")
                        if not srv.alive():
                            raise
            if "b" in phases:
                log(f"{label}: (b) redis-py cycle, {args.rounds} rounds x {args.batch} jobs "
                    f"({'LPUSH/LMOVE/LREM' if kind == 'redis' else 'ADDJOB/GETJOB/ACKJOB'})")
                try:
                    r = best_of(args.repeat, lambda: run_cycle(args, srv), "jobs_per_s", srv)
                    results["b_cycle"] = r
                    log(f"{label}:     -> {r['jobs_per_s']:,.0f} jobs/s  {r['add_cmd']} p50 "
                        f"{r['add_p50_ms']:.3f} ms p99 {r['add_p99_ms']:.3f} ms  "
                        f"server CPU {r['cpu_us_per_job']:.2f} us/job" + other_note(r))
                except (BenchError, redis.RedisError) as exc:
                    results["errors"]["b_cycle"] = f"{type(exc).__name__}: {exc}"
                    warn(f"{label}: (b) failed: {type(exc).__name__}: {exc}")
                    if not srv.alive():
                        raise BenchError(str(exc))
        except BenchError as exc:
            results["errors"]["server"] = str(exc)
            warn(str(exc))
            start_failed = isinstance(exc, StartError)
        finally:
            srv.stop()
    if "c" in phases and start_failed:
        warn(f"{label}: skipping (c) because the server did not start")
    elif "c" in phases:
        srv = new_server(args, kind, label, workers)
        try:
            srv.start(args.start_timeout)
            log(f"{label}: (c) memory: loading {args.mem_jobs:,} jobs into {args.mem_queues} "
                f"queues ({'LPUSH' if kind == 'redis' else 'ADDJOB'}, pipelined x{args.mem_batch}) "
                f"on a fresh server")
            wait_quiet(srv)
            r = run_memory(args, srv)
            results["c_mem"] = r
            log(f"{label}:     -> {r['bytes_per_job']:,.1f} bytes/job RSS "
                f"({r['rss_before'] / 2**20:.1f} -> {r['rss_after'] / 2**20:.1f} MiB), "
                f"load {r['load_jobs_per_s']:,.0f} jobs/s, server CPU {r['cpu_us_per_job']:.2f} us/job"
                + other_note(r))
        except (BenchError, redis.RedisError) as exc:
            results["errors"]["c_mem"] = f"{type(exc).__name__}: {exc}"
            warn(f"{label}: (c) failed: {type(exc).__name__}: {exc}")
        finally:
            srv.stop()
    if not results["errors"]:
        del results["errors"]
    return results


SUMMARY_ROWS = [
    # (metric label, phase key, field, fmt, target key)
    ("(a) c50 unpipelined  req/s", "a_plain", "rps", "{:,.0f}", "a_plain_rps"),
    ("(a) c50 unpipelined  p50 ms", "a_plain", "p50_ms", "{:.3f}", None),
    ("(a) c50 unpipelined  p99 ms", "a_plain", "p99_ms", "{:.3f}", None),
    ("(a) c50 unpipelined  CPU us/job", "a_plain", "cpu_us_per_job", "{:.2f}", None),
    ("(a) c50 -P16  req/s", "a_pipe", "rps", "{:,.0f}", "a_pipe_rps"),
    ("(a) c50 -P16  p50 ms", "a_pipe", "p50_ms", "{:.3f}", None),
    ("(a) c50 -P16  p99 ms", "a_pipe", "p99_ms", "{:.3f}", None),
    ("(a) c50 -P16  CPU us/job", "a_pipe", "cpu_us_per_job", "{:.2f}", None),
    ("(b) cycle  jobs/s", "b_cycle", "jobs_per_s", "{:,.0f}", "b_cycle_jobs_s"),
    ("(b) ADDJOB|LPUSH client p50 ms", "b_cycle", "add_p50_ms", "{:.3f}", None),
    ("(b) ADDJOB|LPUSH client p99 ms", "b_cycle", "add_p99_ms", "{:.3f}", None),
    ("(b) GETJOB(100)|LMOVE p50 ms/call", "b_cycle", "get_p50_ms", "{:.3f}", "-"),
    ("(b) ACKJOB(100)|LREM p50 ms/call", "b_cycle", "ack_p50_ms", "{:.3f}", "-"),
    ("(b) cycle  CPU us/job", "b_cycle", "cpu_us_per_job", "{:.2f}", None),
    ("(c) memory bytes/job (RSS)", "c_mem", "bytes_per_job", "{:,.1f}", "c_bytes_per_job"),
    ("(c) load jobs/s (pipelined x1000)", "c_mem", "load_jobs_per_s", "{:,.0f}", None),
    ("(c) load CPU us/job", "c_mem", "cpu_us_per_job", "{:.2f}", None),
]


def _get(res: dict | None, phase: str, field: str):
    if not res:
        return None
    ph = res.get(phase)
    if not ph:
        return None
    return ph.get(field)


def build_summary(all_results: dict, workers_list: list[int]) -> list[dict]:
    rows = []
    red = all_results.get("redis")
    for label, phase, field, fmt, tkey in SUMMARY_ROWS:
        row = {"metric": label, "phase": phase, "field": field, "fmt": fmt,
               "redis": _get(red, phase, field),
               "cdisque": _get(all_results.get("cdisque"), phase, field)}
        for w in workers_list:
            v = _get(all_results.get(f"ours_w{w}"), phase, field)
            row[f"ours_w{w}"] = v
            rv = row["redis"]
            # "-" target = not comparable call-for-call (1 call per 100 jobs vs 1 per job)
            row[f"ratio_w{w}"] = (v / rv) if (v is not None and rv and tkey != "-") else None
            cv = row["cdisque"]
            row[f"vs_c_w{w}"] = (v / cv) if (v is not None and cv) else None
        row["target"] = TARGETS[tkey][0] if tkey and tkey != "-" else ""
        rows.append(row)
    return rows


def print_cpu_by_role(all_results: dict) -> None:
    """Server CPU per job of every process (front-end, each worker), per target and load."""
    print("\nServer CPU us/job by process:")
    for key, res in all_results.items():
        for phase in ("a_plain", "a_pipe", "b_cycle"):
            roles = (res.get(phase) or {}).get("cpu_us_per_job_by_role")
            if roles:
                parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(roles.items()))
                print(f"  {res.get('label', key):<14} {phase:<8} {parts}")


def print_summary(rows: list[dict], workers_list: list[int]) -> None:
    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    with_c = any(r.get("cdisque") is not None for r in rows)
    headers = ["metric", "Redis"] + (["C Disque"] if with_c else [])
    for w in workers_list:
        headers += [f"ours(workers={w})", "/Redis"] + (["/C"] if with_c else [])
    headers += ["C-Disque ref"]
    table = []
    for r in rows:
        line = [r["metric"], f(r["redis"], r["fmt"])] + ([f(r["cdisque"], r["fmt"])] if with_c else [])
        for w in workers_list:
            line += [f(r[f"ours_w{w}"], r["fmt"]), f(r[f"ratio_w{w}"], "{:.2f}x")]
            if with_c:
                line += [f(r[f"vs_c_w{w}"], "{:.2f}x")]
        line += [r["target"]]
        table.append(line)
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    sep = "+".join("-" * (w + 2) for w in widths)
    title = ("SUMMARY  (ratio = ours / Redis; higher is better for req/s and jobs/s, "
             "lower is better for latency, CPU and memory)")
    print()
    print("=" * max(len(sep), len(title)))
    print(title)
    print("=" * max(len(sep), len(title)))
    print(" | ".join(h.ljust(widths[i]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(headers)))
    print(sep)
    for t in table:
        print(" | ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(t)))
    print(sep)
    print("Targets (original C Disque measured on this machine): ADDJOB ~1.0x LPUSH unpipelined c50, "
          "~0.17x with -P 16,\n  ~2.7x the Redis reliable-queue cycle (jobs/s), ~560 bytes/job RSS.")
    print("Notes: (b) uses one redis-py+hiredis RESP2 client, one command at a time: ours = 100 ADDJOB + "
          "1 GETJOB COUNT 100 + 1 ACKJOB(100 ids)\n  per 100 jobs; Redis = 100 LPUSH + 100 LMOVE + 100 LREM. "
          "CPU us/job = user+sys CPU of all server processes / jobs.\n  (c) runs on a freshly started "
          "server; client and servers share the machine's cores.")



def main(argv=None) -> int:
    args = parse_args(argv, description=__doc__.split("\n\n")[0])
    set_wait_quiet(args.wait_quiet)
    args.logdir = tempfile.mkdtemp(prefix="disque-bench-")
    for tool in (args.redis_benchmark, args.redis_server):
        if not os.path.exists(tool):
            print(f"missing {tool}", file=sys.stderr)
            return 2
    log(f"bench_single_node: phases={''.join(sorted(args.phases))} "
        f"workers={args.workers_list} quick={args.quick} logs in {args.logdir}")
    log(f"sizes: (a) n={args.n_plain:,} unpipelined / n={args.n_pipe:,} -P {args.pipeline}, "
        f"c={args.clients}; (b) {args.rounds} rounds x {args.batch}; (c) {args.mem_jobs:,} jobs; "
        f"body {args.body_size} B")
    all_results: dict = {}
    rc = 0
    try:
        if not args.only_ours:
            all_results["redis"] = bench_target(args, "redis", "redis")
        if args.disque_binary:
            all_results["cdisque"] = bench_target(args, "cdisque", "C-disque")
        for w in args.workers_list:
            all_results[f"ours_w{w}"] = bench_target(args, "disque", f"ours(w={w})", w)
    except KeyboardInterrupt:
        warn("interrupted; cleaning up")
        rc = 130
    finally:
        cleanup_all()

    workers_shown = [w for w in args.workers_list if f"ours_w{w}" in all_results]
    rows = build_summary(all_results, workers_shown)
    print_summary(rows, workers_shown)
    print_cpu_by_role(all_results)
    noisy = []
    for k, v in all_results.items():
        for ph in ("a_plain", "a_pipe", "b_cycle", "c_mem"):
            o = (v.get(ph) or {}).get("other_load_cores")
            if o is not None and o > NOISY_CORES:
                noisy.append(f"{k}/{ph}: {o:.2f} cores")
    if noisy:
        print("NOISE: other processes on the machine used CPU during these measurements "
              "(throughput/latency figures are disturbed; CPU-per-job and memory much less):\n  "
              + ", ".join(noisy))
    errs = {k: v.get("errors") for k, v in all_results.items() if v.get("errors")}
    if errs:
        rc = rc or 1
        print("\nERRORS:")
        for k, e in errs.items():
            for ph, msg in e.items():
                first = msg.strip().splitlines()
                print(f"  {k} [{ph}]: " + ("\n      ".join(first[:25])))
    if args.json:
        doc = {
            "meta": {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "host": platform.node(), "cpus": os.cpu_count(),
                "python": sys.version.split()[0], "redis_py": redis.__version__,
                "quick": args.quick, "phases": "".join(sorted(args.phases)),
                "n_plain": args.n_plain, "n_pipe": args.n_pipe, "clients": args.clients,
                "pipeline": args.pipeline, "rounds": args.rounds, "batch": args.batch,
                "mem_jobs": args.mem_jobs, "mem_queues": args.mem_queues,
                "body_size": args.body_size,
            },
            "targets": {k: v[0] for k, v in TARGETS.items()},
            "results": all_results,
            "summary": [{k: v for k, v in r.items() if k != "fmt"} for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        log(f"figures written to {args.json}")
    if args.keep_logs or errs:
        log(f"server logs kept in {args.logdir}")
    else:
        shutil.rmtree(args.logdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
