"""The queue listing behind the dashboard's `/api/queues` (docs/metrics.md): the longest
queues of a shard with their counters, pause state, waiting consumers and oldest job age.
Asked for by the front-end's HTTP endpoint only, never on the command path."""
import heapq
import time

from disque.workers.queues import PAUSE_NAMES


def queue_report(shard, limit):
    now_ms = int(time.time() * 1000)
    out = []
    for q in heapq.nlargest(limit, shard.queues.values(), key=lambda q: q.length()):
        first = q.jobs.first() if len(q.jobs) else None
        # ctime is ms * 1e6 + a tie counter; the queue is ordered by it, oldest first
        oldest_ms = max(0, now_ms - first.ctime // 1000000) if first is not None else 0
        out.append({"queue": q.name.decode(errors="replace"), "len": q.length(), "spilled": len(q.cold) if q.cold is not None else 0,
                    "jobs_in": q.jobs_in, "jobs_out": q.jobs_out,
                    "paused": PAUSE_NAMES[q.paused].decode(),
                    "blocked": len(q.blocked) if q.blocked else 0,
                    "oldest_ms": oldest_ms})
    return out
