"""The queue row a worker reports for the dashboard and the console (built by
disque/workers/queue_report.py), and how the rows of several workers, or of several nodes,
add up to one: {queue, len, groups, held, spilled, jobs_in, jobs_out, paused, blocked,
oldest_ms, dead_letter} (groups and held: its job groups, docs/job-groups.md)."""

SUMMED = ("len", "groups", "held", "spilled", "jobs_in", "jobs_out", "blocked")
# a queue's PAUSE state by its bits (in = 1, out = 2), as QSTAT, PAUSE and the rows name it
PAUSE_NAMES = (b"none", b"in", b"out", b"all")
PAUSE_BITS = {name: bits for bits, name in enumerate(PAUSE_NAMES)}


def merge_row(row, q):
    """Add queue row q (another worker's or node's) to row."""
    for k in SUMMED:
        row[k] += q[k]
    row["oldest_ms"] = max(row["oldest_ms"], q["oldest_ms"])
    row["dead_letter"] = row["dead_letter"] or q["dead_letter"]


def merged_rows(per_part):
    """Queue rows of several workers (or nodes) summed by name, the longest first."""
    rows = {}
    for part in per_part:
        for q in part:
            row = rows.get(q["queue"])
            if row is None:
                rows[q["queue"]] = dict(q)
            else:
                merge_row(row, q)
    return sorted(rows.values(), key=lambda q: (-q["len"], q["queue"]))
