"""A worker's share of QSCAN / JSCAN (SPEC 3.11): a walk over its scan log.

The front-end half, which turns the shares of every worker into one cursor, is
disque/frontend/scan.py.
"""
from time import perf_counter_ns

from disque._fast import resp


def scan_share(shard, kind, low, bits, bound, count, steps, opts):
    """Look at up to `steps` entries of the scan log from the sequence number whose low
    `bits` bits are `low` (0: from the start), stopping after `count` matches (-1: no
    limit) or at sequence number `bound` (-1: none; entries added after the scan began
    need not be returned, and the bound keeps a scan from chasing them forever).
    Returns [next sequence number or -1 when this worker is done, entries looked at,
    matches, the matches as RESP items]."""
    t0 = perf_counter_ns()
    cold_flag = 1 << (bits - 1)     # a JSCAN cursor past the log, among spilled jobs
    if kind == "j" and low & cold_flag:
        return scan_spilled(shard, (low & (cold_flag - 1)) - 1, count, steps, opts, cold_flag, t0)
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
            if job is None or jobs.get(job.id) is not job:
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
    if nxt == -1 and kind == "j" and shard.cold_jobs:
        if used == steps or len(out) == count:
            nxt = cold_flag | 1         # the spilled jobs from the first slot, next call
        else:
            more = scan_spilled(shard, 0, count if count == -1 else count - len(out),
                                steps if steps == -1 else steps - used, opts, cold_flag, t0)
            more[1] += used
            more[2] += len(out)
            more[3] = b"".join(out) + more[3]
            return more
    shard.command_ns[b"jscan" if kind == "j" else b"qscan"] += perf_counter_ns() - t0
    return [nxt, used, len(out), b"".join(out)]


def scan_spilled(shard, start, count, steps, opts, cold_flag, t0):
    """JSCAN's walk over the spilled jobs (disque/workers/spill.py) once the log is done:
    their slots from `start`; the next cursor carries `cold_flag`."""
    queue, states, reply_all = opts
    out = []
    used = 0
    pos = start
    while pos >= 0 and used != steps and len(out) != count:
        span = 256 if steps == -1 else min(256, steps - used)
        jobs, nxt = shard.spill.cold_jobs(pos, span)
        used += (nxt if nxt >= 0 else shard.spill.index.slot_limit) - pos
        pos = nxt
        for job in jobs:
            if queue is not None and job.queue != queue:
                continue
            if states and not states & (1 << job.state):
                continue
            out.append(shard.show_reply(job) if reply_all else b"+" + job.id + b"\r\n")
    shard.command_ns[b"jscan"] += perf_counter_ns() - t0
    return [cold_flag | (pos + 1) if pos >= 0 else -1, used, len(out), b"".join(out)]
