#!/usr/bin/env python3
"""Celery and Dramatiq on Disque, against the same frameworks on Debian's redis-server and on
RabbitMQ (Debian's rabbitmq-server, when installed), in one run on this machine.

For each framework and broker: a no-op task, the same worker command line, the same settings:
  enqueue: tasks/s of the producer's calls (`task.delay()`, `actor.send()`), one thread;
  drain:   a backlog of N tasks, then one worker process started: tasks/s from the first
           task run to the last (the worker's start-up is not counted);
  CPU:     broker server CPU and worker CPU (with its children) per task over the drain.
Each task appends one line to a file, which tells when the last one ran and that each ran
once.

    python bench/bench_frameworks.py                  # full run (a few minutes)
    python bench/bench_frameworks.py --quick          # smoke run
    python bench/bench_frameworks.py --only celery    # one framework
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap

import psutil

from common.cluster import Proc, free_port, log, wait_for  # noqa: E402
from disque.harness import disque_argv, server_command  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)

CELERY_APP = textwrap.dedent("""
    import os, time
    from celery import Celery
    if os.environ["BROKER_KIND"] == "disque":
        import disque.integrations.kombu  # noqa: F401  (registers disque://)

    app = Celery("bench", broker=os.environ["BROKER_URL"])
    app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True)
    OUT = os.environ["BENCH_OUT"]

    @app.task
    def noop(i):
        with open(OUT, "a") as f:
            f.write("%d %f\\n" % (i, time.time()))
""")

DRAMATIQ_APP = textwrap.dedent("""
    import os, time
    import dramatiq

    KIND, URL = os.environ["BROKER_KIND"], os.environ["BROKER_URL"]
    if KIND == "disque":
        from disque.integrations.dramatiq import DisqueBroker
        broker = DisqueBroker(URL)
    elif KIND == "redis":
        from dramatiq.brokers.redis import RedisBroker
        broker = RedisBroker(url=URL)
    else:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker
        broker = RabbitmqBroker(url=URL)
    dramatiq.set_broker(broker)
    OUT = os.environ["BENCH_OUT"]

    @dramatiq.actor(max_retries=0)
    def noop(i):
        with open(OUT, "a") as f:
            f.write("%d %f\\n" % (i, time.time()))
""")


def cpu_of(pid):
    try:
        proc = psutil.Process(pid)
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


class Broker:
    """One broker server in a directory of its own: `url` for the frameworks, `pid` for CPU."""

    def __init__(self, kind, tmp):
        self.kind = kind
        self.dir = os.path.join(tmp, kind)
        os.makedirs(self.dir, exist_ok=True)
        port = free_port()
        if kind == "disque":
            self.proc = Proc(disque_argv(port, 2, command=server_command()), self.dir)
            self.url = "disque://127.0.0.1:%d" % port
            self._ready = lambda: _ping(port)
        elif kind == "redis":
            self.proc = Proc(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"], self.dir)
            self.url = "redis://127.0.0.1:%d/0" % port
            self._ready = lambda: _ping(port)
        else:
            dist = free_port()
            for parent in (os.path.dirname(tmp), tmp):     # the server script drops root for
                os.chmod(parent, 0o755)                     # its own user, who must reach

            os.chmod(self.dir, 0o755)                       # its directories
            for sub in ("mnesia", "log"):
                os.makedirs(os.path.join(self.dir, sub))
                if os.geteuid() == 0:
                    shutil.chown(os.path.join(self.dir, sub), "rabbitmq", "rabbitmq")
            env = dict(os.environ, RABBITMQ_NODE_PORT=str(port), RABBITMQ_DIST_PORT=str(dist),
                       RABBITMQ_NODENAME="bench%d@localhost" % port,
                       RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"),
                       RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"))
            # Erlang starts a port-mapper daemon (epmd) outside the tree; stop it at the end
            # unless one was running before
            self.own_epmd = not any(p.info["name"] == "epmd"
                                    for p in psutil.process_iter(["name"]))
            self.proc = Proc(["rabbitmq-server"], self.dir, env=env)
            self.url = "amqp://guest:guest@127.0.0.1:%d/%%2F" % port
            self._ready = lambda: _amqp_ready(port)
        wait_for(self._ready, 90, "%s to start" % kind)

    @property
    def pid(self):
        return self.proc.p.pid

    def stop(self):
        """SIGTERM to the whole process tree, by PID: rabbitmq-server's script hands over to
        an Erlang VM under its own user, out of the script's process group."""
        try:
            tree = [psutil.Process(self.proc.p.pid)]
            tree += tree[0].children(recursive=True)
        except psutil.Error:
            tree = []
        for proc in tree:
            try:
                proc.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(tree, timeout=30)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=10)
        if getattr(self, "own_epmd", False) and shutil.which("epmd"):
            subprocess.run(["epmd", "-kill"], capture_output=True, timeout=10)


def _ping(port):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")


def _amqp_ready(port):
    import pika
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    except pika.exceptions.AMQPError:
        return False
    conn.close()
    return True


def celery_url(broker):
    return broker.url.replace("%2F", "/") if broker.kind == "rabbitmq" else broker.url


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def run_framework(framework, broker, tmp, tasks, concurrency):
    """(enqueue tasks/s, drain tasks/s, server µs/task, worker µs/task, every task once)."""
    workdir = os.path.join(tmp, "%s-%s" % (framework, broker.kind))
    os.makedirs(workdir)
    out = os.path.join(workdir, "done.txt")
    app = "bench_celery_app" if framework == "celery" else "bench_dramatiq_app"
    with open(os.path.join(workdir, app + ".py"), "w") as f:
        f.write(CELERY_APP if framework == "celery" else DRAMATIQ_APP)
    env = dict(os.environ, BENCH_OUT=out, BROKER_KIND=broker.kind, PYTHONPATH=workdir,
               BROKER_URL=celery_url(broker) if framework == "celery" else broker.url)
    code = ("import os, sys, time; sys.path.insert(0, %r); os.environ.update(%r); "
            "import %s as m; t = time.perf_counter(); "
            "[m.noop.delay(i) if hasattr(m.noop, 'delay') else m.noop.send(i) for i in range(%d)]; "
            "print(%d / (time.perf_counter() - t))" % (workdir, env, app, tasks, tasks))
    produced = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=900)
    if produced.returncode != 0:
        raise RuntimeError("producing %s tasks on %s failed:\n%s" % (
            framework, broker.kind, produced.stderr[-2000:]))
    enqueue_rate = float(produced.stdout.strip().splitlines()[-1])
    if framework == "celery":
        argv = [os.path.join(VENV_BIN, "celery"), "-A", app, "worker", "-c", str(concurrency),
                "--pool", "prefork", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-l", "warning"]
    else:
        argv = [os.path.join(VENV_BIN, "dramatiq"), app, "--processes", "1", "--threads",
                str(concurrency)]
    with open(os.path.join(workdir, "worker.log"), "wb") as worker_log:
        worker = subprocess.Popen(argv, cwd=workdir, env=env, stdout=worker_log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: len(lines(out)) >= 1, 120, "the first %s task" % framework)
            cpu0 = (cpu_of(broker.pid), cpu_of(worker.pid))
            first = len(lines(out))
            wait_for(lambda: len(lines(out)) >= tasks, 1800, "%d tasks done" % tasks)
            cpu1 = (cpu_of(broker.pid), cpu_of(worker.pid))
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(30)
    done = lines(out)
    times = sorted(float(t) for _, t in done)
    counted = tasks - first
    return {"enqueue_s": enqueue_rate, "drain_s": (len(times) - 1) / (times[-1] - times[0]),
            "server_us": (cpu1[0] - cpu0[0]) / counted * 1e6,
            "worker_us": (cpu1[1] - cpu0[1]) / counted * 1e6,
            "once": sorted(int(i) for i, _ in done) == list(range(tasks))}


def median_run(rows):
    """The median of each figure over the rounds; `once` only if every round ran each once."""
    out = {key: statistics.median(row[key] for row in rows) for key in rows[0] if key != "once"}
    out["once"] = all(row["once"] for row in rows)
    out["rounds"] = len(rows)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tasks", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    p.add_argument("--only", choices=("celery", "dramatiq"))
    p.add_argument("--brokers", default="disque,redis,rabbitmq",
                   help="comma-separated among disque, redis, rabbitmq")
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.rounds = 300, 1
    kinds = [k for k in args.brokers.split(",")
             if k != "rabbitmq" or shutil.which("rabbitmq-server")]
    frameworks = [args.only] if args.only else ["celery", "dramatiq"]
    concurrency = {"celery": 2, "dramatiq": 8}
    tmp = tempfile.mkdtemp(prefix="bench-frameworks-")
    runs = {}
    try:
        for round_no in range(args.rounds):
            for kind in kinds:
                log("round %d: starting %s" % (round_no + 1, kind))
                broker = Broker(kind, os.path.join(tmp, "r%d" % round_no))
                try:
                    for framework in frameworks:
                        log("%s on %s: %d tasks" % (framework, kind, args.tasks))
                        runs.setdefault("%s/%s" % (framework, kind), []).append(run_framework(
                            framework, broker, broker.dir, args.tasks, concurrency[framework]))
                finally:
                    broker.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results = {key: median_run(rows) for key, rows in runs.items()}
    report(results, frameworks, kinds, concurrency)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def report(results, frameworks, kinds, concurrency):
    names = {"disque": "Disque (`--workers 2`)", "redis": "Debian redis-server 7",
             "rabbitmq": "Debian rabbitmq-server"}
    for framework in frameworks:
        worker = ("celery worker -c %d, prefork" if framework == "celery"
                  else "dramatiq --processes 1 --threads %d") % concurrency[framework]
        print("\n%s, no-op task, %s:" % (framework.capitalize(), worker))
        print("| broker | enqueue tasks/s | drain tasks/s | Disque / this | broker CPU µs/task "
              "| worker CPU µs/task | each once |")
        print("|---|---:|---:|---:|---:|---:|---|")
        ours = results.get("%s/disque" % framework)
        for kind in kinds:
            r = results.get("%s/%s" % (framework, kind))
            if r is None:
                continue
            ratio = "" if kind == "disque" or ours is None else "%.2fx" % (
                ours["drain_s"] / r["drain_s"])
            print("| %s | %.0f | %.0f | %s | %.0f | %.0f | %s |" % (
                names[kind], r["enqueue_s"], r["drain_s"], ratio, r["server_us"],
                r["worker_us"], "yes" if r["once"] else "NO"))


if __name__ == "__main__":
    sys.exit(main())
