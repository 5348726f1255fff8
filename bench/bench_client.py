#!/usr/bin/env python3
"""The Python client and the worker runner, measured in one run on this machine.

  (a) producer: `Disque.add_job` against raw redis-py `execute_command("ADDJOB", ...)`, one
      connection, the same node (`--workers 2`), alternating rounds (target >= 0.9x raw);
  (b) consumer: the worker runner's fetch-ACK loop (`Worker`, a no-op function, one thread)
      against raw redis-py sending the same commands (GETJOB COUNT 1 TIMEOUT WITHCOUNTERS,
      ACKJOB) over a backlog (target >= 0.9x raw);
  (c) the whole system against RQ on Debian's redis-server: a no-op task enqueued N times
      while one worker process runs them, first enqueue to last job done (target >= 3x
      RQ's default worker; RQ's SimpleWorker, which does not fork per job, is shown too);
      CPU per job of the server and of the worker;
  (d) a moved consumer on 3 nodes (`--workers 2`): a backlog produced on node A
      (REPLICATE 2), consumed on node B by a consumer that never moves, then by one that
      moves to A after its first window: jobs/s and job messages between nodes per job.

    python bench/bench_client.py                   # full run (about 2 minutes)
    python bench/bench_client.py --quick           # smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import redis

from common.cluster import Proc, free_port, log, start_cluster, wait_for  # noqa: E402
from disque.harness import disque_argv, server_command  # noqa: E402
from disque.client import Disque  # noqa: E402
from disque.client.worker import Worker  # noqa: E402

BODY = b"x" * 100
TASKS = textwrap.dedent("""
    def noop(*args):
        return None
""")


def cpu_of(pids):
    """CPU seconds of the processes, with their waited-for children's (RQ forks a process per
    job: its CPU shows in the worker's children times)."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def tree(pid):
    try:
        proc = psutil.Process(pid)
        return [pid] + [c.pid for c in proc.children(recursive=True)]
    except psutil.Error:
        return [pid]


def start_node(tmp, name, workers=2, extra=()):
    port = free_port()
    d = os.path.join(tmp, name)
    os.makedirs(d)
    proc = Proc(disque_argv(port, workers, *extra, command=server_command()), d, port=port)
    proc.wait_ready(30)
    return port, proc, redis.Redis(port=port, protocol=2)


# -- (a) producer ---------------------------------------------------------------------------
def producer_rounds(port, jobs, rounds):
    raw = redis.Redis(port=port, protocol=2)
    client = Disque("127.0.0.1:%d" % port)
    client.ping()
    raw.ping()
    out = {"raw": [], "client": []}
    for _ in range(rounds):
        for name, add in (("raw", lambda: raw.execute_command("ADDJOB", "pq", BODY, 0)),
                          ("client", lambda: client.add_job("pq", BODY))):
            t0 = time.perf_counter()
            for _ in range(jobs):
                add()
            out[name].append(jobs / (time.perf_counter() - t0))
            raw.execute_command("DEBUG", "FLUSHALL")
    client.close()
    return {k: statistics.median(v) for k, v in out.items()}


# -- (b) consumer -----------------------------------------------------------------------------
def fill(port, queue, jobs):
    r = redis.Redis(port=port, protocol=2)
    pipe = r.pipeline(transaction=False)
    for i in range(jobs):
        pipe.execute_command("ADDJOB", queue, BODY, 0, "RETRY", 300)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def raw_consume(port, queue, jobs):
    r = redis.Redis(port=port, protocol=2)
    r.ping()
    t0 = time.perf_counter()
    done = 0
    while done < jobs:
        reply = r.execute_command("GETJOB", "TIMEOUT", 1000, "WITHCOUNTERS", "FROM", queue)
        if reply:
            r.execute_command("ACKJOB", reply[0][1])
            done += 1
    return jobs / (time.perf_counter() - t0)


def runner_consume(port, queue, jobs, concurrency=1):
    client = Disque("127.0.0.1:%d" % port)
    client.ping()
    worker = Worker(lambda job: None, [queue], client=client, concurrency=concurrency,
                    stats_interval=0)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t0 = time.perf_counter()
    thread.start()
    while worker.stats.snapshot().done < jobs:
        time.sleep(0.001)
    elapsed = time.perf_counter() - t0
    worker.stop()
    thread.join(10)
    client.close()
    return jobs / elapsed


def consumer_rounds(port, jobs, rounds):
    out = {"raw": [], "runner": [], "runner_c4": []}
    for _ in range(rounds):
        for name, consume in (("raw", raw_consume), ("runner", runner_consume),
                              ("runner_c4", lambda p, q, n: runner_consume(p, q, n, 4))):
            fill(port, "cq", jobs)
            out[name].append(consume(port, "cq", jobs))
    return {k: statistics.median(v) for k, v in out.items()}


# -- (c) against RQ ---------------------------------------------------------------------------
def ours_end_to_end(tmp, port, server_pid, jobs, concurrency):
    env = dict(os.environ, PYTHONPATH=tmp)
    worker = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "disque-worker"), "bench_tasks:noop",
         "-q", "e2e", "-c", str(concurrency), "--servers", "127.0.0.1:%d" % port,
         "--stats-interval", "0", "--log-level", "warning"],
        cwd=tmp, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    client = Disque("127.0.0.1:%d" % port)
    wait_for(lambda: client.info("clients")["blocked_clients"] >= 1, 20, "disque-worker start")
    cpu0 = (cpu_of(tree(server_pid)), cpu_of([worker.pid]))
    t0 = time.perf_counter()
    for _ in range(jobs):
        client.add_job("e2e", BODY)
    wait_for(lambda: client.info("jobs")["registered_jobs"] == 0, 600, "the jobs to be done")
    elapsed = time.perf_counter() - t0
    cpu1 = (cpu_of(tree(server_pid)), cpu_of([worker.pid]))
    worker.terminate()
    worker.wait(30)
    client.close()
    return {"jobs_s": jobs / elapsed, "server_us": (cpu1[0] - cpu0[0]) / jobs * 1e6,
            "worker_us": (cpu1[1] - cpu0[1]) / jobs * 1e6}


def rq_end_to_end(tmp, jobs, worker_class):
    from rq import Queue
    from rq.registry import FinishedJobRegistry
    port = free_port()
    server = Proc(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no"], tmp, port=port)
    try:
        server.wait_ready(20)
        r = redis.Redis(port=port)
        sys.path.insert(0, tmp)
        import bench_tasks
        queue = Queue("e2e", connection=r)
        argv = ["rq", "worker", "-u", "redis://127.0.0.1:%d" % port, "e2e", "-q",
                "--results-ttl", "600"]
        if worker_class:
            argv += ["-w", worker_class]
        worker = subprocess.Popen(argv, cwd=tmp, env=dict(os.environ, PYTHONPATH=tmp),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  start_new_session=True)
        wait_for(lambda: r.scard("rq:workers") >= 1, 30, "rq worker start")
        registry = FinishedJobRegistry("e2e", connection=r)
        cpu0 = (cpu_of([server.pid]), cpu_of(tree(worker.pid)))
        t0 = time.perf_counter()
        for _ in range(jobs):
            queue.enqueue(bench_tasks.noop, BODY)
        wait_for(lambda: registry.count >= jobs, 1200, "rq to finish")
        elapsed = time.perf_counter() - t0
        cpu1 = (cpu_of([server.pid]), cpu_of(tree(worker.pid)))
        worker.terminate()
        worker.wait(30)
        return {"jobs_s": jobs / elapsed, "server_us": (cpu1[0] - cpu0[0]) / jobs * 1e6,
                "worker_us": (cpu1[1] - cpu0[1]) / jobs * 1e6}
    finally:
        server.stop()


# -- (d) the moved consumer ---------------------------------------------------------------------
def job_messages(metrics_ports):
    """Job messages between nodes (every type), summed over the nodes' /metrics."""
    import urllib.request
    count = 0
    for port in metrics_ports:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
        for line in text.decode().splitlines():
            if line.startswith("disque_bus_messages_total{") and 'direction="out"' in line:
                count += float(line.rsplit(" ", 1)[1])
    return count


def consume_phase(port, jobs, switch_window, metrics_ports):
    client = Disque("127.0.0.1:%d" % port, switch_window=switch_window)
    client.ping()
    marks = []
    done = 0
    t0 = time.perf_counter()
    while done < jobs:
        for job in client.get_jobs("moved", timeout=2):
            client.ack_job(job)
            done += 1
            if client.moves and not marks:
                marks.append((done, time.perf_counter(), job_messages(metrics_ports)))
    end = (done, time.perf_counter(), job_messages(metrics_ports))
    client.close()
    return t0, marks, end


def moved_consumer(tmp, jobs, window):
    metrics = [free_port() for _ in range(3)]
    nodes, raws = start_cluster(3, 2, tmp, extra=lambda i: ["--metrics-port", str(metrics[i])])
    try:
        a_port, b_port = nodes[0][0], nodes[1][0]
        producer = Disque("127.0.0.1:%d" % a_port, switch_window=0)
        for _ in range(2 * jobs):
            producer.add_job("moved", BODY, replicate=2, retry=300)
        producer.close()
        m0 = job_messages(metrics)
        t0, _, (done, t1, m1) = consume_phase(b_port, jobs, 0, metrics)
        on_b = {"jobs_s": done / (t1 - t0), "msgs_per_job": (m1 - m0) / done}
        t0, marks, (done, t2, m2) = consume_phase(b_port, jobs, window, metrics)
        moved_at, t_move, m_move = marks[0]
        after = {"jobs_s": (done - moved_at) / (t2 - t_move),
                 "msgs_per_job": (m2 - m_move) / (done - moved_at), "moved_after": moved_at}
        return on_b, after
    finally:
        for _, proc in nodes:
            proc.stop()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=20000, help="per round of (a) and (b)")
    p.add_argument("--e2e-jobs", type=int, default=5000, help="jobs of (c), ours and RQ's")
    p.add_argument("--moved-jobs", type=int, default=20000, help="jobs per phase of (d)")
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.jobs, args.e2e_jobs, args.moved_jobs = 1, 2000, 300, 3000
    tmp = tempfile.mkdtemp(prefix="bench-client-")
    with open(os.path.join(tmp, "bench_tasks.py"), "w") as f:
        f.write(TASKS)
    results = {}
    port, proc, _ = start_node(tmp, "single")
    try:
        log("(a) producer: %d ADDJOB per round, %d rounds" % (args.jobs, args.rounds))
        results["producer"] = producer_rounds(port, args.jobs, args.rounds)
        log("(b) consumer: %d GETJOB + ACKJOB per round" % args.jobs)
        results["consumer"] = consumer_rounds(port, args.jobs, args.rounds)
        log("(c) whole system: %d no-op jobs through disque-worker" % args.e2e_jobs)
        results["ours_e2e"] = ours_end_to_end(tmp, port, proc.p.pid, args.e2e_jobs, 4)
    finally:
        proc.stop()
    if shutil.which("rq") and shutil.which("redis-server"):
        log("(c) the same through RQ's default worker and its SimpleWorker")
        results["rq_e2e"] = rq_end_to_end(tmp, args.e2e_jobs, None)
        results["rq_simple_e2e"] = rq_end_to_end(tmp, args.e2e_jobs, "rq.worker.SimpleWorker")
    log("(d) a consumer moving to the producing node, 3 nodes")
    results["moved"] = moved_consumer(tmp, args.moved_jobs, 1000)
    shutil.rmtree(tmp, ignore_errors=True)
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def report(r):
    pr, co = r["producer"], r["consumer"]
    print()
    print("| load | jobs/s | ratio |")
    print("|---|---:|---:|")
    print("| raw redis-py ADDJOB | %.0f | |" % pr["raw"])
    print("| Disque.add_job | %.0f | %.2fx raw |" % (pr["client"], pr["client"] / pr["raw"]))
    print("| raw redis-py GETJOB + ACKJOB | %.0f | |" % co["raw"])
    print("| worker runner, 1 thread | %.0f | %.2fx raw |" % (co["runner"], co["runner"] / co["raw"]))
    print("| worker runner, 4 threads | %.0f | %.2fx raw |" % (co["runner_c4"], co["runner_c4"] / co["raw"]))
    ours = r["ours_e2e"]
    print()
    print("| whole system, no-op task | jobs/s | server CPU µs/job | worker CPU µs/job |")
    print("|---|---:|---:|---:|")
    print("| Disque + disque-worker -c 4 | %.0f | %.1f | %.1f |" % (
        ours["jobs_s"], ours["server_us"], ours["worker_us"]))
    for key, name in (("rq_e2e", "RQ (redis-server 7, default worker)"),
                      ("rq_simple_e2e", "RQ (redis-server 7, SimpleWorker)")):
        if key in r:
            rq = r[key]
            print("| %s | %.0f (ours %.1fx) | %.1f | %.1f |" % (
                name, rq["jobs_s"], ours["jobs_s"] / rq["jobs_s"], rq["server_us"],
                rq["worker_us"]))
    on_b, after = r["moved"]
    print()
    print("| consumer on 3 nodes, backlog produced on A | jobs/s | job messages per job |")
    print("|---|---:|---:|")
    print("| on node B, never moves | %.0f | %.2f |" % (on_b["jobs_s"], on_b["msgs_per_job"]))
    print("| moved to A (after %d jobs) | %.0f | %.2f |" % (
        after["moved_after"], after["jobs_s"], after["msgs_per_job"]))


if __name__ == "__main__":
    sys.exit(main())
