"""The worker runner: real `disque-worker` processes against real nodes (retries with growing
delays into the dead-letter queue, WORKING for a long job, SIGTERM with jobs in hand, a node
killed under a worker), and the Python API (stats callback, job timeouts, asyncio)."""
import asyncio
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

from disque.client import AsyncDisque, Disque
from disque.client.worker import AsyncWorker, Worker
from support.processes import WorkerProcesses
from support.waits import wait_until

TASKS = textwrap.dedent('''
    import asyncio, json, os, time

    RECORD = os.environ["RECORD"]

    def note(event, job):
        with open(RECORD, "a") as f:
            f.write(json.dumps([event, job.id, time.time(), os.getpid()]) + "\\n")

    def fail(job):
        note("start", job)
        raise RuntimeError("this job always fails")

    def sleep(job):
        note("start", job)
        time.sleep(float(job.body))
        note("done", job)

    async def asleep(job):
        note("start", job)
        await asyncio.sleep(float(job.body))
        note("done", job)
''')

WORKER = os.path.join(os.path.dirname(sys.executable), "disque-worker")


class Workers(WorkerProcesses):
    """`disque-worker` processes of one test, killed by process group at its end."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        (tmp_path / "tasks.py").write_text(TASKS)

    def start(self, function, *args):
        spec = function if ":" in function else "tasks:" + function
        env = dict(os.environ, RECORD=str(self.record), PYTHONUNBUFFERED="1")
        return self.launch([WORKER, spec, "--stats-interval", "1", *args], env)


@pytest.fixture
def workers(tmp_path):
    w = Workers(tmp_path)
    yield w
    w.kill_all()


def server_arg(*nodes):
    return ["--servers", ",".join("127.0.0.1:%d" % n.port for n in nodes)]


def test_a_failing_job_is_retried_with_growing_delays_then_dead_lettered(server3, workers):
    client = Disque("127.0.0.1:%d" % server3.port)
    jid = client.add_job("flaky", b"x", retry=60, max_deliveries=4)
    proc = workers.start("fail", "-q", "flaky", *server_arg(server3))
    wait_until(lambda: client.qlen("flaky:dead") == 1, timeout=20,
               message="the job never reached its dead-letter queue")
    starts = [t for _, _, t, _ in workers.events("start")]
    assert len(starts) == 4
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    # NACK DELAY 1, 2, 4 s (the server's timers tick every 10 ms; a second more at most)
    for gap, delay in zip(gaps, (1, 2, 4)):
        assert delay - 0.05 <= gap <= delay + 1.2, gaps
    info = client.show(jid)
    assert (info.queue, info.dead_lettered_from, info.nacks) == ("flaky:dead", "flaky", 4)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    log = workers.log(proc)
    assert log.count("this job always fails") == 4 and "the server moves it to flaky:dead" in log
    assert "failed=4 retried=3 dead_lettered=1" in log
    client.close()


def test_a_job_running_three_times_its_retry_is_delivered_once(server1, workers):
    client = Disque("127.0.0.1:%d" % server1.port)
    jid = client.add_job("long", b"3", retry=1)
    procs = [workers.start("sleep", "-q", "long", "-c", "2", *server_arg(server1))
             for _ in range(2)]
    wait_until(lambda: workers.events("done"), timeout=15, message="the job never finished")
    wait_until(lambda: client.show(jid) is None, timeout=5, message="the job was not acked")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [p.wait(10) for p in procs] == [0, 0]
    assert len(workers.events("start")) == 1, workers.events()
    client.close()


def test_sigterm_with_20_jobs_in_hand(server3, workers):
    """10 jobs of 1 s finish within the grace period and are ACKed; 10 of 6 s do not, are
    left to the server, and a second worker runs them after their RETRY: every job done
    once, none lost, none twice."""
    client = Disque("127.0.0.1:%d" % server3.port)
    ids = [client.add_job("busy", b"1" if i % 2 else b"6", retry=2) for i in range(20)]
    first = workers.start("sleep", "-q", "busy", "-c", "20", "--grace", "3",
                          *server_arg(server3))
    wait_until(lambda: len(workers.events("start")) == 20, timeout=10,
               message="20 jobs never ran at once")
    first.send_signal(signal.SIGTERM)
    assert first.wait(15) == 0
    done_first = {e[1] for e in workers.events("done")}
    assert len(done_first) == 10
    log = workers.log(first)
    assert log.count("left to the server's retry") == 10, log
    assert "done=10" in log and "abandoned=10" in log
    second = workers.start("sleep", "-q", "busy", "-c", "20", *server_arg(server3))
    wait_until(lambda: len(workers.events("done")) == 20, timeout=30,
               message="the abandoned jobs were not run again")
    wait_until(lambda: all(client.show(j) is None for j in ids), timeout=10,
               message="some jobs were not acknowledged")
    done = [e[1] for e in workers.events("done")]
    assert sorted(done) == sorted(ids)          # every job finished exactly once
    second.send_signal(signal.SIGINT)
    assert second.wait(15) == 0
    client.close()


def test_a_worker_whose_node_is_killed_finishes_the_queue(start_cluster, workers):
    c = start_cluster(3)
    client = Disque("127.0.0.1:%d" % c[1].port, switch_window=0)
    ids = [client.add_job("survive", b"0.01", replicate=2, retry=2) for _ in range(200)]
    proc = workers.start("sleep", "-q", "survive", "-c", "4", *server_arg(c[1]))
    wait_until(lambda: len(workers.events("done")) >= 30, timeout=15)
    c.kill(1)
    wait_until(lambda: {e[1] for e in workers.events("done")} >= set(ids), timeout=60,
               message="the worker did not finish the queue after its node died")
    assert proc.poll() is None
    assert "failed (" in workers.log(proc)          # it saw the node go, and went on
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    client.close()


def test_bad_usage_is_one_clear_line(workers):
    for args, message in ((["nomodule:f", "-q", "q"], "cannot import nomodule"),
                          (["tasks:nothere", "-q", "q"], "tasks has no 'nothere'"),
                          (["tasks:sleep"], "give --queue"),
                          (["tasks:sleep", "-q", "q", "--servers", "h:x"], "bad port"),
                          (["tasks:sleep", "-q", "q", "-c", "0"], "concurrency must be >= 1")):
        proc = workers.start(*args)
        assert proc.wait(10) == 2
        out = workers.log(proc).strip().splitlines()
        assert len(out) == 1 and message in out[0], out


# -- the Python API ----------------------------------------------------------------------
def run_in_thread(worker):
    result = []
    thread = threading.Thread(target=lambda: result.append(worker.run(install_signals=False)),
                              daemon=True)
    thread.start()
    return thread, result


def test_threads_stats_callback_and_job_timeout(server1):
    client = Disque("127.0.0.1:%d" % server1.port)
    snapshots, seen = [], []

    def handle(job):
        seen.append(job.id)
        if job.body == b"hang" and job.nacks == 0:
            time.sleep(2)

    worker = Worker(handle, ["api"], client=client, concurrency=2, job_timeout=0.5,
                    stats_interval=0.2, on_stats=snapshots.append)
    quick = [client.add_job("api", b"ok", retry=30) for _ in range(5)]
    hang = client.add_job("api", b"hang", retry=30)
    thread, result = run_in_thread(worker)
    wait_until(lambda: snapshots and snapshots[-1].done == 6, timeout=10,
               message="stats never showed 6 jobs done")
    worker.stop()
    thread.join(10)
    assert result == [0]
    last = worker.stats.snapshot()
    assert (last.done, last.timed_out, last.retried, last.running) == (6, 1, 1, 0)
    assert seen.count(hang) == 2 and all(seen.count(j) == 1 for j in quick)
    client.close()


def test_asyncio_worker(server3):
    async def main():
        client = AsyncDisque("127.0.0.1:%d" % server3.port)
        ran = []

        async def handle(job):
            ran.append(job.id)
            if job.body == b"slow" and job.nacks == 0:
                await asyncio.sleep(5)              # cancelled by the job timeout
            if job.body == b"bad":
                raise ValueError("bad job")

        ids = [await client.add_job("aq", b"ok") for _ in range(10)]
        slow = await client.add_job("aq", b"slow", retry=30)
        bad = await client.add_job("aq", b"bad", retry=30, max_deliveries=1)
        worker = AsyncWorker(handle, ["aq"], client=client, concurrency=4, job_timeout=0.3)
        task = asyncio.ensure_future(worker.run(install_signals=False))
        deadline = time.monotonic() + 10
        while worker.stats.snapshot().done < 11 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.stop()
        assert await asyncio.wait_for(task, 10) == 0
        stats = worker.stats.snapshot()
        assert (stats.done, stats.timed_out, stats.dead_lettered) == (11, 1, 1)
        assert ran.count(slow) == 2 and set(ids) <= set(ran)
        assert await client.qlen("aq:dead") == 1
        assert (await client.show(bad)).queue == "aq:dead"
        await client.aclose()
    asyncio.run(main())


def test_an_async_function_runs_as_tasks_from_the_threaded_entry(server1, workers):
    client = Disque("127.0.0.1:%d" % server1.port)
    ids = [client.add_job("atask", b"0.2") for _ in range(8)]
    proc = workers.start("asleep", "-q", "atask", "-c", "8", *server_arg(server1))
    wait_until(lambda: len(workers.events("done")) == 8, timeout=10)
    starts = sorted(t for _, _, t, _ in workers.events("start"))
    assert starts[-1] - starts[0] < 0.5             # concurrent, not one after the other
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0 and "8 task(s)" in workers.log(proc)
    assert all(client.show(j) is None for j in ids)
    client.close()
