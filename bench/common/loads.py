"""The single-node loads, the same for every server kind: (a) redis-benchmark ADDJOB vs
LPUSH, (b) the produce/consume/ack cycle with redis-py, (c) memory per job; each with the
server CPU time per job (by process) and the machine's other load while it ran."""
from __future__ import annotations

import csv
import io
import subprocess
import time

import redis

from common.machine import OtherLoad, cpu_delta
from common.report import BenchError, log, make_body, percentile, warn
from common.servers import Server, kill_child, run_child


# --------------------------------------------------------------------------
# (a) redis-benchmark
# --------------------------------------------------------------------------

def run_redis_benchmark(args, srv: Server, n: int, pipeline: int, keyspace: int = 0,
                        tls=None) -> dict:
    """redis-benchmark ADDJOB (LPUSH for Redis) on queue q, or with keyspace > 0 spread over
    that many queues q:<n> (redis-benchmark's -r and __rand_int__). `tls`: (port, flags) of
    the server's TLS port (bench/bench_tls.py), instead of its plaintext port."""
    body = make_body(args.body_size).decode()
    queue = "q:__rand_int__" if keyspace else "q"
    if srv.kind == "redis":
        cmd = ["LPUSH", queue, body]
    else:
        cmd = ["ADDJOB", queue, body, "0"]
    port, flags = tls or (srv.port, [])
    argv = [args.redis_benchmark, "-h", "127.0.0.1", "-p", str(port), *flags,
            "-c", str(args.clients), "-n", str(n), "--csv"]
    if pipeline > 1:
        argv += ["-P", str(pipeline)]
    if keyspace:
        argv += ["-r", str(keyspace)]
    argv += cmd
    srv.flush()
    q_before = srv.qlen("q") or 0
    timeout = args.rb_timeout if args.rb_timeout else 60 + n / 5000.0
    cpu0 = srv.cpu_snapshot()
    other = OtherLoad()
    t0 = time.monotonic()
    p = run_child(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                out, err = p.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                # redis-benchmark spins forever if the server dies: watch both
                if not srv.alive() or time.monotonic() > deadline:
                    kill_child(p)
                    out, err = p.communicate()
                    srv.check_alive()
                    raise BenchError(f"redis-benchmark timed out after {timeout:.0f}s "
                                     f"(server alive, queue len now {srv.qlen('q')})\n"
                                     f"{err.decode('utf-8', 'replace')[-1000:]}")
    finally:
        if p.poll() is None:
            kill_child(p)
    elapsed = time.monotonic() - t0
    cpu1 = srv.cpu_snapshot()
    cpu_s, stable = cpu_delta(cpu0, cpu1)
    other_cores = other.finish(cpu_s)
    out_s = out.decode("utf-8", "replace")
    err_s = err.decode("utf-8", "replace")
    srv.check_alive()
    if p.returncode != 0 or "Error from server" in out_s + err_s:
        raise BenchError(f"redis-benchmark failed (rc={p.returncode}):\n"
                         f"{out_s[-2000:]}\n{err_s[-2000:]}")
    rows = [ln for ln in out_s.splitlines() if ln.startswith('"')]
    parsed = list(csv.DictReader(io.StringIO("\n".join(rows))))
    if not parsed:
        raise BenchError(f"cannot parse redis-benchmark output:\n{out_s[-2000:]}\n{err_s[-2000:]}")
    row = parsed[-1]
    q_after = srv.qlen("q")
    res = {
        "n": n, "pipeline": pipeline, "clients": args.clients,
        "rps": float(row["rps"]),
        "avg_ms": float(row["avg_latency_ms"]),
        "p50_ms": float(row["p50_latency_ms"]),
        "p95_ms": float(row["p95_latency_ms"]),
        "p99_ms": float(row["p99_latency_ms"]),
        "max_ms": float(row["max_latency_ms"]),
        "wall_s": round(elapsed, 3),
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_job": cpu_s / n * 1e6,
        "cpu_us_per_job_by_role": {k: round(v / n * 1e6, 3)
                                   for k, v in srv.cpu_by_role(cpu0, cpu1).items()},
        "queue_len_delta": None if q_after is None else q_after - q_before,
        "other_load_cores": round(other_cores, 3),
    }
    if not stable:
        res["note"] = "server process set changed during the run"
        warn(f"{srv.label}: server process set changed during the run (CPU figure approximate)")
    if keyspace:
        res["queue_len_delta"] = None      # spread over many queues: not counted
    elif res["queue_len_delta"] != n:
        warn(f"{srv.label}: queue length grew by {res['queue_len_delta']} but {n} jobs were sent")
    if "WARNING" in err_s:
        res["stderr"] = err_s.strip()[-500:]
    srv.flush()
    return res


# --------------------------------------------------------------------------
# (b) produce / consume / ack cycle with redis-py
# --------------------------------------------------------------------------

def _timed_adds(ex, command, seq0: int, batch: int, body_size: int, lat_add):
    """`batch` numbered bodies added one command at a time, each command's time kept."""
    pc = time.perf_counter_ns
    for i in range(batch):
        args = command(make_body(body_size, seq0 + i))
        t = pc()
        ex(*args)
        lat_add.append(pc() - t)


def _cycle_round_disque(c, seq0: int, batch: int, body_size: int, lat_add, lat_get, lat_ack, stats):
    pc = time.perf_counter_ns
    ex = c.execute_command
    _timed_adds(ex, lambda body: ("ADDJOB", "q", body, 0), seq0, batch, body_size, lat_add)
    ids = []
    t = pc()
    reply = ex("GETJOB", "COUNT", batch, "FROM", "q")
    lat_get.append(pc() - t)
    if reply:
        ids.extend(j[1] for j in reply)
    extra = 0
    while len(ids) < batch:
        extra += 1
        if extra > 50:
            raise BenchError(f"GETJOB returned only {len(ids)}/{batch} jobs after 50 extra calls")
        reply = ex("GETJOB", "TIMEOUT", 1000, "COUNT", batch - len(ids), "FROM", "q")
        if reply:
            ids.extend(j[1] for j in reply)
    stats["extra_getjob"] += extra
    t = pc()
    n = ex("ACKJOB", *ids)
    lat_ack.append(pc() - t)
    if int(n) != len(ids):
        stats["ack_mismatch"] += 1


def _cycle_round_redis(c, seq0: int, batch: int, body_size: int, lat_add, lat_get, lat_ack, stats):
    pc = time.perf_counter_ns
    ex = c.execute_command
    _timed_adds(ex, lambda body: ("LPUSH", "q", body), seq0, batch, body_size, lat_add)
    vals = []
    for _ in range(batch):
        t = pc()
        v = ex("LMOVE", "q", "processing", "RIGHT", "LEFT")
        lat_get.append(pc() - t)
        if v is None:
            raise BenchError("LMOVE returned nil: queue unexpectedly empty")
        vals.append(v)
    for v in vals:
        t = pc()
        n = ex("LREM", "processing", 1, v)
        lat_ack.append(pc() - t)
        if int(n) != 1:
            stats["ack_mismatch"] += 1


def run_cycle(args, srv: Server) -> dict:
    batch = args.batch
    rounds = args.rounds
    fn = _cycle_round_redis if srv.kind == "redis" else _cycle_round_disque
    srv.flush()
    c = srv.client()
    stats = {"extra_getjob": 0, "ack_mismatch": 0}
    try:
        # warm-up (connection, code paths); not measured
        for r in range(min(5, rounds)):
            fn(c, 10_000_000 + r * batch, batch, args.body_size, [], [], [], stats)
        stats = {"extra_getjob": 0, "ack_mismatch": 0}
        lat_add: list[int] = []
        lat_get: list[int] = []
        lat_ack: list[int] = []
        cpu0 = srv.cpu_snapshot()
        other = OtherLoad()
        t0 = time.perf_counter()
        for r in range(rounds):
            fn(c, r * batch, batch, args.body_size, lat_add, lat_get, lat_ack, stats)
        elapsed = time.perf_counter() - t0
        cpu1 = srv.cpu_snapshot()
        cpu_s, stable = cpu_delta(cpu0, cpu1)
        other_cores = other.finish(cpu_s)
    finally:
        c.close()
    srv.check_alive()
    jobs = rounds * batch
    for lst in (lat_add, lat_get, lat_ack):
        lst.sort()
    ms = lambda ns: None if ns is None else ns / 1e6  # noqa: E731
    res = {
        "rounds": rounds, "batch": batch, "jobs": jobs,
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": jobs / elapsed,
        "commands_per_round": (batch + 2) if srv.kind != "redis" else 3 * batch,
        "add_p50_ms": ms(percentile(lat_add, 50)),
        "add_p99_ms": ms(percentile(lat_add, 99)),
        "get_p50_ms": ms(percentile(lat_get, 50)),
        "get_p99_ms": ms(percentile(lat_get, 99)),
        "ack_p50_ms": ms(percentile(lat_ack, 50)),
        "ack_p99_ms": ms(percentile(lat_ack, 99)),
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_job": cpu_s / jobs * 1e6,
        "cpu_us_per_job_by_role": {k: round(v / jobs * 1e6, 3)
                                   for k, v in srv.cpu_by_role(cpu0, cpu1).items()},
        "extra_getjob_calls": stats["extra_getjob"],
        "ack_count_mismatches": stats["ack_mismatch"],
        "add_cmd": "LPUSH" if srv.kind == "redis" else "ADDJOB",
        "get_cmd": "LMOVE" if srv.kind == "redis" else "GETJOB COUNT %d" % batch,
        "ack_cmd": "LREM" if srv.kind == "redis" else "ACKJOB <%d ids>" % batch,
        "other_load_cores": round(other_cores, 3),
    }
    if not stable:
        res["note"] = "server process set changed during the run"
    if stats["extra_getjob"]:
        warn(f"{srv.label}: GETJOB COUNT {batch} returned fewer jobs than queued; "
             f"{stats['extra_getjob']} extra GETJOB calls were needed")
    if stats["ack_mismatch"]:
        warn(f"{srv.label}: {stats['ack_mismatch']} ack replies did not match the number of ids")
    srv.flush()
    return res


# --------------------------------------------------------------------------
# (c) memory per job
# --------------------------------------------------------------------------

def settle_rss(srv: Server, max_wait: float, interval: float = 0.5, tol: float = 0.002,
               stable_reads: int = 3) -> int:
    last = srv.rss()
    ok = 0
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        time.sleep(interval)
        cur = srv.rss()
        if last and abs(cur - last) <= tol * last:
            ok += 1
            if ok >= stable_reads:
                return cur
        else:
            ok = 0
        last = cur
    return last


def run_memory(args, srv: Server) -> dict:
    jobs = args.mem_jobs
    nq = args.mem_queues
    per_batch = args.mem_batch
    body = make_body(args.body_size)
    queues = [f"q{i}" for i in range(nq)]
    c = srv.client(timeout=120)
    # warm the connection & code paths with a throwaway queue, then remove it
    try:
        if srv.kind == "redis":
            c.lpush("warmup", body)
            c.delete("warmup")
        else:
            jid = c.execute_command("ADDJOB", "warmup", body, 0)
            jid = jid.decode() if isinstance(jid, bytes) else jid
            c.execute_command("DELJOB", jid)
    except redis.RedisError as exc:
        warn(f"{srv.label}: warm-up command failed: {exc}")
    rss0 = settle_rss(srv, args.settle)
    uss0 = srv.uss()
    cpu0 = srv.cpu_snapshot()
    other = OtherLoad()
    t0 = time.perf_counter()
    errors = 0
    first_err = None
    sent = 0
    qi = 0
    try:
        while sent < jobs:
            n = min(per_batch, jobs - sent)
            pipe = c.pipeline(transaction=False)
            for _ in range(n):
                q = queues[qi]
                qi = (qi + 1) % nq
                if srv.kind == "redis":
                    pipe.execute_command("LPUSH", q, body)
                else:
                    pipe.execute_command("ADDJOB", q, body, 0)
            replies = pipe.execute(raise_on_error=False)
            for r in replies:
                if isinstance(r, Exception):
                    errors += 1
                    if first_err is None:
                        first_err = repr(r)
            sent += n
            if sent % (jobs // 10 or 1) < per_batch:
                log(f"{srv.label}: (c) loaded {sent:,}/{jobs:,} jobs")
        load_s = time.perf_counter() - t0
        cpu1 = srv.cpu_snapshot()
        other_cores = other.finish(cpu_delta(cpu0, cpu1)[0])
        lens = []
        for q in queues:
            if srv.kind == "redis":
                lens.append(int(c.llen(q)))
            else:
                lens.append(int(c.execute_command("QLEN", q)))
    finally:
        c.close()
    srv.check_alive()
    log(f"{srv.label}: (c) waiting for RSS to settle")
    rss1 = settle_rss(srv, args.settle)
    uss1 = srv.uss()
    cpu_s, stable = cpu_delta(cpu0, cpu1)
    stored = sum(lens)
    res = {
        "jobs": jobs, "queues": nq, "batch": per_batch, "body_size": args.body_size,
        "errors": errors, "first_error": first_err, "stored_jobs": stored,
        "rss_before": rss0, "rss_after": rss1,
        "bytes_per_job": (rss1 - rss0) / jobs,
        "uss_bytes_per_job": None if (uss0 is None or uss1 is None) else (uss1 - uss0) / jobs,
        "processes": len(srv.procs()),
        "load_s": round(load_s, 3),
        "load_jobs_per_s": jobs / load_s,
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_job": cpu_s / jobs * 1e6,
        "other_load_cores": round(other_cores, 3),
    }
    if errors:
        warn(f"{srv.label}: {errors} errors while loading, first: {first_err}")
    if stored != jobs:
        warn(f"{srv.label}: {stored} jobs stored in the queues, {jobs} sent")
    if not stable:
        res["note"] = "server process set changed during the run"
    return res
