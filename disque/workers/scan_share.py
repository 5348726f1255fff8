"""A worker's share of QSCAN / JSCAN (SPEC 3.11): a walk over its scan log.

The front-end half, which turns the shares of every worker into one cursor, is
disque/frontend/scan.py.
"""
from time import perf_counter_ns

from disque._fast import resp
from disque.workers.spill import SPILLED


def scan_share(shard, kind, low, bits, bound, count, steps, opts):
    """Look at up to `steps` entries of the scan log from the sequence number whose low
    `bits` bits are `low` (0: from the start), stopping after `count` matches (-1: no
    limit) or at sequence number `bound` (-1: none; entries added after the scan began
    need not be returned, and the bound keeps a scan from chasing them forever).
    Returns [next sequence number or -1 when this worker is done, entries looked at,
    matches, the matches as RESP items]."""
    t0 = perf_counter_ns()
    log = shard.job_log if kind == "j" else shard.queue_log
    items = log.items
    n = len(items)
    if low:
        mask = (1 << bits) - 1
        top = log.next_seq
        seq = top - ((top - low) & mask)
        pos = log.position(seq) if seq >= 0 else n     # < 0: not a cursor we made
    else:
        pos = 0
    if bound >= 0:
        n = log.position(bound)
    out = []
    used = 0
    if kind == "j":
        queue, states, reply_all = opts
        jobs = shard.jobs
        while pos < n and used != steps and len(out) != count:
            job = items[pos]
            pos += 1
            used += 1
            if job is SPILLED:
                job = shard.spill.job_at(log.seq_at(pos - 1))     # on disk: read, not loaded
                if job is None:
                    continue
            elif job is None or jobs.get(job.id) is not job:
                continue
            if queue is not None and job.queue != queue:
                continue
            if states and not states & (1 << job.state):
                continue
            if not job.nodes_delivered:
                continue            # dummy ACK
            out.append(shard.show_reply(job) if reply_all else b"+" + job.id + b"\r\n")
    else:
        minlen, maxlen, importrate = opts
        queues = shard.queues
        while pos < n and used != steps and len(out) != count:
            q = items[pos]
            pos += 1
            used += 1
            if q is None or queues.get(q.name) is not q:
                continue
            qlen = q.length()
            if minlen != -1 and qlen < minlen:
                continue
            if maxlen != -1 and qlen > maxlen:
                continue
            if importrate != -1 and shard.federation.import_rate(q) < importrate:
                continue
            out.append(resp.bulk(q.name))
    nxt = log.seq_at(pos) if pos < n else -1
    shard.add_ns(b"jscan" if kind == "j" else b"qscan", perf_counter_ns() - t0)
    return [nxt, used, len(out), b"".join(out)]

