"""Per scenario: acknowledged, lost, duplicated, unexpected, producer errors by type,
crashed processes, whether every node answers."""
from faults import nodes as N


def check(name, aof, record, nodes, worker_kills):
    acked = record["acked"]                     # id -> REPLICATE
    deliveries = record["deliveries"]           # id -> times delivered
    delivered = set(deliveries)
    lost = sorted(j for j in acked if j not in delivered)
    dup = sum(c - 1 for c in deliveries.values() if c > 1)
    unexpected = len(delivered - set(acked))
    restarts = 0
    tracebacks = 0
    exits = 0
    for node in nodes:
        r = N.info_field(node.i, "server", "worker_restarts")
        restarts += int(r) if r and r.isdigit() else 0
        text = node.log_text()
        tracebacks += text.count("Traceback")
        exits += text.count("shutting the node down")
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
        # our kills, node shutdowns on their own, Python tracebacks in the logs
        "crashed": max(0, restarts - worker_kills) + exits + tracebacks,
        "worker_restarts": restarts, "worker_kills": worker_kills,
        "all_answer": all(answering), "drain_seconds": record["drain_seconds"],
    }


def table(results):
    head = ("scenario", "aof", "acked", "lost", "dup", "dup%", "unexp", "producer errors",
            "crashed", "answer")
    rows = [head]
    for r in results:
        if r.get("error"):
            rows.append((r["scenario"], "", "", "", "", "", "", r["error"][:60], "", ""))
            continue
        errs = ",".join("%s:%d" % kv for kv in sorted(r["producer_errors"].items())) or "-"
        rows.append((r["scenario"], r["aof"], str(r["acked"]), str(r["lost"]),
                     str(r["duplicated"]), "%.2f" % (100 * r["dup_ratio"]),
                     str(r["unexpected"]), errs, str(r["crashed"]),
                     "yes" if r["all_answer"] else "NO"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
