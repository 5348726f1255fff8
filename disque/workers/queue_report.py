"""What a worker tells the dashboard and the operations console about its queues and jobs
(docs/metrics.md, docs/console.md): the longest queues with their counters, a page of a
queue's jobs, a bounded search of bodies. Asked for by worker controls only (the
front-end's `queries` part), never on the command path; every answer is bounded."""
import heapq

from disque._fast.job import ACTIVE, FLAG_DELIVERED, QUEUED, STATE_NAMES
from disque.contracts.queue_rows import PAUSE_NAMES

PAGE_MAX = 500              # jobs in one page
PEEK_DEPTH_MAX = 10000      # how deep into a queue a page may start (from either end)
SEARCH_SCAN_MAX = 100000    # jobs a search reads per worker at most
BODY_MAX = 1 << 20          # body bytes one job summary carries at most
GROUPS_MAX = 200            # job groups in one answer


def ctime_ms(job):
    return job.ctime // 1000000     # ms * 1e6 + a tie counter; queues are ordered by it


def queue_row(q, now_ms, groups):
    """A queue's row; `groups`: the shard's JobGroups (docs/job-groups.md)."""
    first = q.jobs.first() if len(q.jobs) else None
    ext = first.ext if first is not None else None
    ngroups, held = groups.of_queue(q.name)
    return {"queue": q.name.decode(errors="replace"), "len": q.length(),
            "groups": ngroups, "held": held,
            "spilled": len(q.cold) if q.cold is not None else 0,
            "jobs_in": q.jobs_in, "jobs_out": q.jobs_out,
            "paused": PAUSE_NAMES[q.paused].decode(),
            "blocked": q.waiting(),
            "oldest_ms": max(0, now_ms - ctime_ms(first)) if first is not None else 0,
            # a dead-letter queue: its jobs came from another queue
            "dead_letter": ext is not None and ext.origin is not None}


def queue_report(shard, limit, match=None):
    """The `limit` longest queues (whose name holds `match`, bytes, when given)."""
    now_ms = shard.now_ms
    queues = shard.queues.values()
    if match:
        queues = [q for q in queues if match in q.name]
    return [queue_row(q, now_ms, shard.groups)
            for q in heapq.nlargest(limit, queues, key=lambda q: q.length())]


def group_report(shard, queue, limit):
    """The job groups of a queue this node is the home of (docs/job-groups.md), the largest
    first: each group's key, its jobs, and the job it waits on (its head) with that job's
    state: queued, delivered (and not finished), or waiting (its DELAY or its requeue)."""
    groups = shard.groups
    mine = [g for g in (groups.by_queue.get(queue) or {}).values() if groups.home_here(g)]
    rows = []
    for g in heapq.nsmallest(max(0, min(limit, GROUPS_MAX)), mine,
                             key=lambda g: (-len(g), g.key)):
        head = shard.jobs.get(g.head)
        rows.append({"key": g.key, "jobs": len(g), "head": g.head,
                     "head_state": head_state(head),
                     "head_deliveries": 0 if head is None else head.additional_deliveries})
    return {"count": len(mine), "groups": rows}


def head_state(job):
    if job is None:
        return "spilled"
    if job.state == QUEUED:
        return "queued"
    if job.state == ACTIVE:
        return "delivered" if job.flags & FLAG_DELIVERED else "waiting"
    return STATE_NAMES[job.state].decode()


def queue_names(shard, match, cap):
    """How many queues hold `match` in their name, and their names (None past `cap`)."""
    names = [name for name in shard.queues if not match or match in name]
    return [len(names), names if len(names) <= cap else None]


def queue_rows(shard, names):
    """The rows of these queues (those this worker has)."""
    now_ms = shard.now_ms
    queues = shard.queues
    return [queue_row(queues[n], now_ms, shard.groups) for n in names if n in queues]


def job_summary(job, now_ms, body_max):
    """A job as the console lists it; the body cut to body_max bytes (whole when < 0, for
    QPEEK ... CLUSTER), its size given."""
    body = job.body or b""
    ext = job.ext
    return {"id": job.id, "queue": job.queue, "state": STATE_NAMES[job.state].decode(),
            "ctime": job.ctime, "ctime_ms": ctime_ms(job), "age_ms": max(0, now_ms - ctime_ms(job)),
            "nacks": job.nacks, "deliveries": job.additional_deliveries,
            "retry": job.retry, "ttl": max(0, job.etime - now_ms // 1000),
            "body": body if body_max < 0 else body[:body_max], "body_size": len(body),
            "dead_lettered_from": ext.origin if ext is not None else None}


def job_page(shard, queue, start, count, newest_first, body_max):
    """Jobs [start, start + count) of the queue in queue order (oldest first, or newest
    first), and the queue's length on this worker."""
    q = shard.queues.get(queue)
    if q is None:
        return {"len": 0, "jobs": []}
    start = max(0, min(start, PEEK_DEPTH_MAX))
    # the front-end cuts its pages to PAGE_MAX; a merge over workers asks from the start
    count = max(0, min(count, PEEK_DEPTH_MAX + PAGE_MAX))
    depth = start + count
    jobs = shard.queue_commands.peek(q, -depth if newest_first else depth)[start:]
    now_ms = shard.now_ms
    body_max = min(body_max, BODY_MAX)
    return {"len": q.length(), "jobs": [job_summary(j, now_ms, body_max) for j in jobs]}


def search(shard, queue, needle, limit, body_max):
    """Jobs of the queue whose body holds `needle` (bytes), oldest first: at most `limit`,
    after reading at most SEARCH_SCAN_MAX jobs."""
    q = shard.queues.get(queue)
    if q is None or not needle:
        return {"scanned": 0, "complete": True, "jobs": []}
    jobs = shard.queue_commands.peek(q, SEARCH_SCAN_MAX)
    now_ms = shard.now_ms
    body_max = max(0, min(body_max, BODY_MAX))
    found = [job_summary(j, now_ms, body_max) for j in jobs if j.body and needle in j.body]
    return {"scanned": len(jobs), "complete": len(jobs) >= q.length(),
            "jobs": found[:max(0, limit)]}


def queued_ids(shard, queue, limit):
    """IDs of jobs queued in the queue on this worker, oldest first (bulk actions)."""
    q = shard.queues.get(queue)
    if q is None:
        return []
    return [j.id for j in shard.queue_commands.peek(q, max(0, limit))]
