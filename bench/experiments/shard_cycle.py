"""CPU cost of one job's ADDJOB, fetch and ACKJOB in the worker's Shard, in process (no
server, no network): what docs/benchmarks.md ("Job groups") compares before and after the
group gate on the command path. Run it against two builds (PYTHONPATH=<other checkout with
built extensions> python bench/experiments/shard_cycle.py before) and compare; best of 5
rounds of 200,000 jobs."""
import sys
import time

from disque.workers.shard import Shard

N = 200_000


def main(label):
    s = Shard(0, 1, b"a" * 40, {})
    body = b"x" * 100
    best = [float("inf")] * 3
    for _ in range(5):
        argvs = [[b"ADDJOB", b"q", body, b"0"] for _ in range(N)]
        t0 = time.perf_counter_ns()
        for argv in argvs:
            s.cmd_addjob(argv)
        t1 = time.perf_counter_ns()
        q = s.queues[b"q"]
        jobs = []
        while True:
            got = s.fetch_many(q, 1000)
            if not got:
                break
            jobs.extend(got)
        t2 = time.perf_counter_ns()
        s.ack_lone([b"ACKJOB"] + [j.id for j in jobs], [])
        t3 = time.perf_counter_ns()
        for i, ns in enumerate((t1 - t0, t2 - t1, t3 - t2)):
            best[i] = min(best[i], ns / N)
    print("%s: ADDJOB %.0f ns, fetch %.0f ns, ACKJOB %.0f ns per job" % (label, *best))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "this build")
