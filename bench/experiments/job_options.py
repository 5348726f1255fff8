"""CPU cost of the worker's ADDJOB and enqueue paths, in process (no server, no network):
what docs/job-features.md compares before and after the job options. Run it against two
builds (PYTHONPATH=<other checkout with built extensions> python bench/experiments/job_options.py)
and compare the figures of one run; best of 9 rounds of 200,000 calls each."""
import sys, time
from disque._fast.shardcore import ShardCore
NODE = b"1390f0c1db03983a890d28e5c35b0544f8e0cc42"
def run(n=200000):
    s = ShardCore(NODE)
    argv = [b"ADDJOB", b"q", b"x" * 100, b"0"]
    argv2 = [b"ADDJOB", b"q", b"x" * 100, b"0", b"RETRY", b"30", b"TTL", b"3600"]
    t0 = time.process_time()
    for _ in range(n):
        s.cmd_addjob(argv)
    t1 = time.process_time()
    for _ in range(n):
        s.cmd_addjob(argv2)
    t2 = time.process_time()
    q = s.queues[b"q"]
    for _ in range(n):          # fetch + NACK-style requeue: the enqueue rule
        j = s.fetch(q)
        s.enqueue(j, True)
    t3 = time.process_time()
    return (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9, (t3 - t2) / n * 1e9
best = [min(x) for x in zip(*[run() for _ in range(9)])]
print("addjob %.0f ns  addjob+opts %.0f ns  fetch+nack %.0f ns" % tuple(best))
