"""Per scenario: acknowledged, lost, duplicated, unexpected, producer errors by type,
crashed processes, whether every node answers, seconds to recover the fault-free rate."""
from faults import nodes as fault_nodes
from faults.workload import RECOVER_MAX

# log lines of a process that died or gave up on its own: ours (a Python traceback, a node
# stopping itself) and the original's (its crash report)
CRASH_MARKERS = ("Traceback", "shutting the node down", "BUG REPORT")
# the timing probes (workload --probes): a timer may fire this much before its time, the
# requeue jitter (-250 ms) plus the 10 ms timer tick and some slack
EARLY_TOLERANCE_S = 0.3
# job groups: a group's next job may wait this much beyond the faults' window and two
# RETRYs (a requeue's jitter, federation's INTEREST refresh, the 100 ms crons)
GROUP_SLACK_S = 3.0


def check(name, aof, record, ctx):
    nodes, worker_kills = ctx.all_nodes, ctx.worker_kills
    acked = record["acked"]                     # id -> REPLICATE
    deliveries = record["deliveries"]           # id -> times delivered
    delivered = set(deliveries)
    lost = sorted(j for j in acked if j not in delivered)
    timing = probe_checks(record)
    # a RETRY probe's second delivery is the workload's doing, not a duplicate
    dup = sum(c - 1 for c in deliveries.values() if c > 1) - timing.pop("retry_redelivered")
    unexpected = len(delivered - set(acked))
    restarts = 0
    tracebacks = 0
    exits = ctx.unexpected_exits
    for node in nodes:
        r = fault_nodes.info_field(node.i, "server", "worker_restarts")
        restarts += int(r) if r and r.isdigit() else 0
        text = node.log_text()
        tracebacks += sum(text.count(marker) for marker in CRASH_MARKERS)
    for node in ctx.removed:
        tracebacks += sum(node.log_text().count(marker) for marker in CRASH_MARKERS)
    answering = [fault_nodes.cli(n.i, "PING") == "PONG" for n in nodes]
    # of the first lost jobs, those a node still holds: late (a timer held back), not gone
    held = sum(any(fault_nodes.cli(n.i, "SHOW", jid) for n in nodes) for jid in lost[:10])
    return {
        "scenario": name, "aof": aof or "off",
        "attempts": record["attempts"], "acked": len(acked),
        "acked_repl2": sum(1 for r in acked.values() if r == 2),
        "acked_repl3": sum(1 for r in acked.values() if r == 3),
        "lost": len(lost), "lost_ids": lost[:10], "lost_ids_still_held": held,
        "delivered": len(delivered), "duplicated": dup,
        "dup_ratio": round(dup / len(delivered), 4) if delivered else 0.0,
        "unexpected": unexpected, "producer_errors": record["errors"],
        "consumer_errors": record["consumer_errors"],
        # processes that died without being killed by the harness: worker restarts beyond
        # our kills, nodes found dead at the heal, crash lines in the logs
        "crashed": max(0, restarts - worker_kills) + exits + tracebacks,
        "worker_restarts": restarts, "worker_kills": worker_kills,
        "all_answer": all(answering), "drain_seconds": record["drain_seconds"],
        "baseline_rate": record["baseline_rate"], "fault_rate": record["fault_rate"],
        "recover_seconds": record["recover_seconds"],
        "adds_per_second": record["adds_per_second"],
        **timing, **group_checks(record, ctx.args.duration + ctx.node_timeout_s), **ctx.extra,
    }


def group_checks(record, fault_window_s):
    """Job groups (workload --groups, docs/job-groups.md), per group: acknowledged jobs
    first delivered out of the order of their adds, deliveries of a job while another of
    its group was in flight, and the longest a job waited for its turn: from the later of
    its add's reply and its predecessor's first delivery, to its own first delivery. A
    group is stuck when that wait passes the documented bound, the faults' window (their
    duration plus the node timeout) plus two RETRYs and GROUP_SLACK_S for the timers."""
    if not record.get("groups"):
        return {}
    bound = fault_window_s + 2 * record["retry"] + GROUP_SLACK_S
    deliveries = record["group_deliveries"]
    out_of_order = stuck = 0
    max_wait = 0.0
    for group, acked in record["group_acked"].items():
        first = {}
        for jid, t in deliveries.get(group, ()):
            first.setdefault(jid, t)
        place = {jid: k for k, (jid, _t) in enumerate(acked)}
        highest = -1
        for jid in first:                       # first deliveries, in delivery order
            k = place.get(jid)
            if k is None:
                continue                        # an add that got an error: no known place
            out_of_order += k < highest
            highest = max(highest, k)
        group_wait = 0.0
        for k, (jid, t_ack) in enumerate(acked):
            if jid not in first:
                continue                        # lost: counted with the others
            ready = t_ack
            if k and acked[k - 1][0] in first:
                ready = max(ready, first[acked[k - 1][0]])
            group_wait = max(group_wait, first[jid] - ready)
        stuck += group_wait > bound
        max_wait = max(max_wait, group_wait)
    two = len(record["group_two_in_flight"])
    return {"groups": len(record["group_acked"]),
            "group_jobs": sum(len(a) for a in record["group_acked"].values()),
            "group_out_of_order": out_of_order, "group_two_in_flight": two,
            "group_violations": out_of_order + two, "group_stuck": stuck,
            "group_max_wait_s": round(max_wait, 2), "group_bound_s": round(bound, 1)}


def probe_checks(record):
    """The guarantees the timing probes check (faults/workload.py --probes), by client
    monotonic times: a DELAY job first delivered no earlier than DELAY after its ADDJOB was
    sent, a RETRY job delivered again no earlier than RETRY after it (and delivered again
    at all), a short-TTL job delivered; also job IDs never reused and one producer's jobs
    on one node delivered in order. `violations` sums what broke them."""
    opts = record.get("probe_options") or {}
    early = {"d": [], "r": []}          # seconds before its time, per delivery checked
    checked = {"d": 0, "r": 0, "t": 0}
    retry_missing = ttl_lost = redelivered = 0
    for jid, (kind, sent, times) in (record.get("probes") or {}).items():
        checked[kind] += 1
        if kind == "t":
            ttl_lost += jid not in record["deliveries"] and record["ended"] - sent < opts["t"]
        elif kind == "d" and times:
            early["d"].append(opts["d"] - (times[0] - sent))
        elif kind == "r" and len(times) >= 2:
            redelivered += 1
            early["r"].append(opts["r"] - (times[1] - sent))
        elif kind == "r" and times:
            retry_missing += 1
    early_delay = sum(e > EARLY_TOLERANCE_S for e in early["d"])
    early_retry = sum(e > EARLY_TOLERANCE_S for e in early["r"])
    out = {"probes_checked": checked, "early_delay": early_delay, "early_retry": early_retry,
           "max_early_delay_s": round(max(early["d"], default=0), 3),
           "max_early_retry_s": round(max(early["r"], default=0), 3),
           "retry_missing": retry_missing, "ttl_lost": ttl_lost,
           "id_reuse": record.get("id_reuse", 0),
           "order_pairs": record.get("order_pairs", 0),
           "order_inverted": record.get("order_inverted", 0), "retry_redelivered": redelivered}
    out["violations"] = (early_delay + early_retry + retry_missing + ttl_lost + out["id_reuse"]
                         + out["order_inverted"])
    return out


def table(results):
    head = ("scenario", "aof", "acked", "lost", "dup", "dup%", "unexp", "producer errors",
            "crashed", "answer", "recover s")
    rows = [head]
    for r in results:
        if r.get("error"):
            rows.append((r["scenario"], "", "", "", "", "", "", r["error"][:60], "", "", ""))
            continue
        errs = ",".join("%s:%d" % kv for kv in sorted(r["producer_errors"].items())) or "-"
        rows.append((r["scenario"], r["aof"], str(r["acked"]), str(r["lost"]),
                     str(r["duplicated"]), "%.2f" % (100 * r["dup_ratio"]),
                     str(r["unexpected"]), errs, str(r["crashed"]),
                     "yes" if r["all_answer"] else "NO", recovery_text(r)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def group_table(results):
    """Job groups' checks per scenario (workload --groups); empty without groups."""
    rows = [("scenario", "groups", "group jobs", "out of order", "two in flight",
             "stuck > bound", "longest wait s", "bound s")]
    for r in results:
        if r.get("groups"):
            rows.append((r["scenario"], str(r["groups"]), str(r["group_jobs"]),
                         str(r["group_out_of_order"]), str(r["group_two_in_flight"]),
                         str(r["group_stuck"]), "%.1f" % r["group_max_wait_s"],
                         "%.0f" % r["group_bound_s"]))
    if len(rows) == 1:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def recovery_text(r):
    if r["recover_seconds"] is None:
        return "> %d" % RECOVER_MAX
    return "%.1f" % r["recover_seconds"]
