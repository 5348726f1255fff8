"""Per scenario: acknowledged, lost, duplicated, unexpected, producer errors by type,
crashed processes, whether every node answers, seconds to recover the fault-free rate."""
from faults import nodes as N
from faults.workload import RECOVER_MAX

# log lines of a process that died or gave up on its own: ours (a Python traceback, a node
# stopping itself) and the original's (its crash report)
CRASH_MARKERS = ("Traceback", "shutting the node down", "BUG REPORT")


def check(name, aof, record, ctx):
    nodes, worker_kills = ctx.all_nodes, ctx.worker_kills
    acked = record["acked"]                     # id -> REPLICATE
    deliveries = record["deliveries"]           # id -> times delivered
    delivered = set(deliveries)
    lost = sorted(j for j in acked if j not in delivered)
    dup = sum(c - 1 for c in deliveries.values() if c > 1)
    unexpected = len(delivered - set(acked))
    restarts = 0
    tracebacks = 0
    exits = ctx.unexpected_exits
    for node in nodes:
        r = N.info_field(node.i, "server", "worker_restarts")
        restarts += int(r) if r and r.isdigit() else 0
        text = node.log_text()
        tracebacks += sum(text.count(marker) for marker in CRASH_MARKERS)
    for node in ctx.removed:
        tracebacks += sum(node.log_text().count(marker) for marker in CRASH_MARKERS)
    answering = [N.cli(n.i, "PING") == "PONG" for n in nodes]
    return {
        "scenario": name, "aof": aof or "off",
        "attempts": record["attempts"], "acked": len(acked),
        "acked_repl2": sum(1 for r in acked.values() if r == 2),
        "acked_repl3": sum(1 for r in acked.values() if r == 3),
        "lost": len(lost), "lost_ids": lost[:10],
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
        "adds_per_second": record["adds_per_second"], **ctx.extra,
    }


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


def recovery_text(r):
    if r["recover_seconds"] is None:
        return "> %d" % RECOVER_MAX
    return "%.1f" % r["recover_seconds"]
