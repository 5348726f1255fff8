"""The human report: report/index.html with PNG charts (matplotlib, Agg backend).

Everything plotted is aggregated by Spark first (time series are binned to at most
~MAX_POINTS points per line), so the driver only collects small results.
"""
from __future__ import annotations

import datetime as _dt
import html
import os
import time

from disque_spark import storage

MAX_POINTS = 600
MAX_NODES_PLOTTED = 12
MAX_QUEUES_PLOTTED = 8
TOP_N_ROWS = 25


def _label(node: str, addr) -> str:
    if node == "TOTAL":
        return "TOTAL"
    return f"{node[:8]} {addr or ''}".strip()


def _fmt(v, kind: str = "") -> str:
    if v is None:
        return "-"
    if kind == "bytes":
        from disque_spark.progress import human_bytes
        return human_bytes(v)
    if kind == "ratio":
        return f"{v:.3f}"
    if kind == "pct":
        return f"{v:.1f}%"
    if kind == "time":
        return _dt.datetime.fromtimestamp(v, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    if kind == "dur":
        v = float(v)
        if v >= 3600:
            return f"{v / 3600:.1f} h"
        if v >= 60:
            return f"{v / 60:.1f} min"
        return f"{v:.1f} s"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def _table(headers, rows, kinds=None, cls="") -> str:
    kinds = kinds or [""] * len(headers)
    out = [f'<table class="{cls}"><thead><tr>'
           + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    if not rows:
        out.append(f'<tr><td colspan="{len(headers)}" class="none">none</td></tr>')
    for r in rows:
        out.append("<tr>" + "".join(
            f'<td class="{"txt" if isinstance(v, str) else "num"}">{html.escape(_fmt(v, k))}</td>'
            for v, k in zip(r, kinds)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _times(ts):
    return [_dt.datetime.fromtimestamp(t, _dt.timezone.utc) for t in ts]


def _new_fig(plt, title, ylabel, h=4.2):
    fig, ax = plt.subplots(figsize=(10, h), dpi=100)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _finish(fig, ax, path, has_data, legend=True):
    import matplotlib.dates as mdates
    if not has_data:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=14, color="gray")
    else:
        loc = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(loc)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
        ax.set_xlabel("time (UTC)")
        if legend and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best", ncol=2)
    fig.tight_layout()
    fig.savefig(path, format="png")
    import matplotlib.pyplot as plt
    plt.close(fig)


def _worker_rows(totals: list) -> list[dict]:
    """The per-worker table's rows from the partial totals per (node, worker, addr)."""
    from disque_spark import partials
    merged = partials.merge(totals, partials.WORKER_KEY, partials.merge_worker)
    rows = []
    for (node, worker), t in sorted(merged.items()):
        secs = t["seconds"]
        rows.append({"node": node, "worker": worker, "samples": t["samples"],
                     "avg": t["commands"] / secs if secs and t["commands"] is not None else None,
                     "peak": t["peak_commands_per_s"],
                     "cpu": t["cpu_s"] / secs * 100 if secs and t["cpu_s"] is not None else None,
                     "rss": t["rss"], "restarts": t["restarts"], "commands": t["commands"]})
    return rows


def make_report(spark, output: str, out_dir: str, result, worker_totals: list | None = None) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pyspark.sql import functions as F

    os.makedirs(out_dir, exist_ok=True)

    def table(name):
        p = storage.join(output, name)
        return spark.read.parquet(p) if storage.exists(spark, p) else None

    summ, nr, wr = table("summary"), table("node_rates"), table("worker_rates")
    qb, qs = table("queue_backlog"), table("queue_summary")
    srows = [r.asDict() for r in summ.collect()] if summ is not None else []
    nodes = [r for r in srows if r["node"] != "TOTAL"]
    total = next((r for r in srows if r["node"] == "TOTAL"), None)
    labels = {r["node"]: _label(r["node"], r["addr"]) for r in nodes}
    plotted = [r["node"] for r in sorted(nodes, key=lambda r: -(r["commands"] or 0))][:MAX_NODES_PLOTTED]
    span = (total["span_s"] if total and total["span_s"] else 0.0) or 0.0
    bucket = float(result.bucket_s or 1.0)
    bin_s = max(bucket, span / MAX_POINTS) if span else bucket
    tb = (F.floor(F.col("ts") / F.lit(bin_s)) * F.lit(bin_s)).alias("t")

    # --- series (binned) -------------------------------------------------------
    node_series = {}
    if nr is not None and plotted:
        rows = (nr.where(F.col("node").isin(plotted)).groupBy("node", tb)
                .agg(F.avg("commands_per_s").alias("c"), F.avg("skew").alias("s"), F.max("skew").alias("smax"),
                     F.avg("lat_p99_us").alias("p99"), F.avg("lat_p50_us").alias("p50"),
                     F.avg("acked_per_s").alias("a"), F.avg("added_per_s").alias("ad"))
                .orderBy("node", "t").collect())
        for r in rows:
            node_series.setdefault(r["node"], []).append(r)
    worker_series = {}
    worker_rows = []
    if wr is not None and plotted:
        rows = (wr.where(F.col("node").isin(plotted)).groupBy("node", "worker", tb)
                .agg((F.sum("commands") / F.sum(F.when(F.col("interval_s") > 0, F.col("interval_s")))).alias("c"))
                .orderBy("node", "worker", "t").collect())
        for r in rows:
            worker_series.setdefault(r["node"], {}).setdefault(r["worker"], []).append(r)
        from disque_spark import partials
        worker_rows = _worker_rows(worker_totals if worker_totals is not None
                                   else [r.asDict() for r in partials.worker_partials(wr).collect()])

    growing, largest, redelivery = [], [], []
    backlog = {}
    if qs is not None:
        growing = (qs.where("growing").orderBy(F.desc("len_slope_per_s")).limit(TOP_N_ROWS).collect())
        largest = qs.orderBy(F.desc("max_len")).limit(MAX_QUEUES_PLOTTED).collect()
        redelivery = (qs.groupBy("queue")
                      .agg(F.countDistinct("node").alias("nodes"), F.sum("jobs_out").alias("out"),
                           F.sum("additional_deliveries").alias("add"), F.sum("nacks").alias("nacks"),
                           F.sum("jobs_in").alias("in"))
                      .where(F.col("out") > 0)
                      .select("*", ((F.col("add") + F.col("nacks")) / F.col("out")).alias("ratio"))
                      .orderBy(F.desc("ratio"), F.desc("out")).limit(TOP_N_ROWS).collect())
    chosen = [(r["node"], r["queue"]) for r in (growing[:MAX_QUEUES_PLOTTED] if growing else largest)]
    if qb is not None and chosen:
        cond = None
        for n, q in chosen:
            c = (F.col("node") == n) & (F.col("queue") == q)
            cond = c if cond is None else (cond | c)
        rows = (qb.where(cond).groupBy("node", "queue", tb).agg(F.avg("len").alias("len"))
                .orderBy("node", "queue", "t").collect())
        for r in rows:
            backlog.setdefault((r["node"], r["queue"]), []).append(r)

    # --- charts -------------------------------------------------------------------
    charts = {}

    fig, ax = _new_fig(plt, "Throughput per node (commands/s, summed over workers)", "commands/s")
    for n in plotted:
        s = node_series.get(n, [])
        ax.plot(_times([r["t"] for r in s]), [r["c"] for r in s], label=labels.get(n, n), lw=1.2)
    _finish(fig, ax, os.path.join(out_dir, "throughput.png"), bool(node_series))
    charts["throughput"] = "throughput.png"

    ncols = 2 if len(plotted) > 1 else 1
    nrows_ = max(1, (len(plotted) + ncols - 1) // ncols)
    fig, axes = plt.subplots(nrows_, ncols, figsize=(10, 2.6 * nrows_ + 0.6), dpi=100, squeeze=False)
    for i, n in enumerate(plotted):
        ax = axes[i // ncols][i % ncols]
        for w, s in sorted(worker_series.get(n, {}).items()):
            ax.plot(_times([r["t"] for r in s]), [r["c"] for r in s], label=f"w{w}", lw=1)
        ax.set_title(labels.get(n, n), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, ncol=4, loc="upper left")
        import matplotlib.dates as mdates
        loc = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(loc)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
    for j in range(len(plotted), nrows_ * ncols):
        axes[j // ncols][j % ncols].axis("off")
    if not plotted:
        axes[0][0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0][0].transAxes)
    fig.suptitle("Throughput per worker (commands/s)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "workers.png"), format="png")
    plt.close(fig)
    charts["workers"] = "workers.png"

    fig, ax = _new_fig(plt, "Load skew between the workers of a node (max / mean of worker commands/s)",
                       "skew (1 = even)")
    for n in plotted:
        s = [r for r in node_series.get(n, []) if r["s"] is not None]
        ax.plot(_times([r["t"] for r in s]), [r["s"] for r in s], label=labels.get(n, n), lw=1.2)
    if node_series:
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    _finish(fig, ax, os.path.join(out_dir, "skew.png"), bool(node_series))
    charts["skew"] = "skew.png"

    title = ("Backlog of the fastest-growing queues (len)" if growing
             else "Backlog of the largest queues (len) - no queue keeps growing")
    fig, ax = _new_fig(plt, title, "jobs queued")
    for (n, q), s in backlog.items():
        ax.plot(_times([r["t"] for r in s]), [r["len"] for r in s], label=f"{q} @ {labels.get(n, n[:8])}", lw=1.2)
    _finish(fig, ax, os.path.join(out_dir, "backlog.png"), bool(backlog))
    charts["backlog"] = "backlog.png"

    fig, ax = _new_fig(plt, "Command latency per node: p99 (solid) and p50 (dotted), from the histograms",
                       "microseconds (log scale)")
    for i, n in enumerate(plotted):
        s = [r for r in node_series.get(n, []) if r["p99"] is not None]
        color = f"C{i % 10}"
        ax.plot(_times([r["t"] for r in s]), [r["p99"] for r in s], label=labels.get(n, n), lw=1.2, color=color)
        ax.plot(_times([r["t"] for r in s]), [r["p50"] for r in s], lw=0.8, ls=":", color=color)
    if any(r["p50"] for s_ in node_series.values() for r in s_ if r["p50"]):
        ax.set_yscale("log")
    _finish(fig, ax, os.path.join(out_dir, "latency.png"), bool(node_series))
    charts["latency"] = "latency.png"

    # --- html -------------------------------------------------------------------
    H = []
    H.append("<h2>Run</h2>")
    run_rows = [
        ("input", f"{result.input} ({_fmt(result.files)} files, {_fmt(result.input_bytes, 'bytes')})"),
        ("lines read", _fmt(result.rows_read)),
        ("bad lines (skipped)", f"{_fmt(result.bad_lines)} {result.bad_by_reason or ''}".strip()),
        ("time range (UTC)", f"{_fmt(total['start_ts'], 'time')} .. {_fmt(total['end_ts'], 'time')} "
                             f"({_fmt(total['span_s'], 'dur')})" if total else "-"),
        ("nodes / workers", f"{len(nodes)} / {total['workers'] if total else 0}"),
        ("sampling bucket", f"{bucket:g} s (node_rates); charts binned to {bin_s:g} s"),
        ("generated", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
    ]
    H.append(_table(["", ""], run_rows, cls="kv"))

    H.append("<h2>Summary</h2><p>One row per node plus the cluster total. Counts are deltas of the "
             "monotonic counters over the run (a worker's first sample counts from its process start, "
             "restarts are stitched); the span runs from the earliest process start seen to the last "
             "sample; average and peak rates are the mean and max over the time buckets.</p>")
    heads = ["node", "workers", "samples", "span", "restarts", "commands", "avg cmd/s", "peak cmd/s",
             "added", "delivered", "acked", "nacked", "requeued", "expired", "deleted", "avg CPU",
             "peak RSS", "p50 us", "p90 us", "p99 us", "mean skew", "max skew"]
    kinds = ["", "", "", "dur", "", "", "", "", "", "", "", "", "", "", "", "pct", "bytes", "", "", "",
             "ratio", "ratio"]
    rows = [(_label(r["node"], r["addr"]), r["workers"], r["samples"], r["span_s"], r["restarts"], r["commands"],
             r["avg_commands_per_s"], r["peak_commands_per_s"], r["added"], r["delivered"], r["acked"],
             r["nacked"], r["requeued"], r["expired"], r["deleted"], r["avg_cpu_pct"], r["peak_rss"],
             r["lat_p50_us"], r["lat_p90_us"], r["lat_p99_us"], r["mean_skew"], r["max_skew"]) for r in srows]
    H.append(_table(heads, rows, kinds, cls="wide"))

    H.append("<h2>1. Throughput per node and worker over time</h2>")
    H.append(f'<img src="{charts["throughput"]}" alt="throughput per node"><br>')
    H.append(f'<img src="{charts["workers"]}" alt="throughput per worker">')
    H.append(_table(["node", "worker", "samples", "commands", "avg cmd/s", "peak cmd/s", "avg CPU",
                     "max RSS", "restarts"],
                    [(labels.get(r["node"], r["node"][:8]), r["worker"], r["samples"], r["commands"], r["avg"],
                      r["peak"], r["cpu"], r["rss"], r["restarts"]) for r in worker_rows],
                    ["", "", "", "", "", "", "pct", "bytes", ""]))

    H.append("<h2>2. Load skew between the workers of a node</h2><p>Per time bucket: the busiest "
             "worker's commands/s divided by the mean over the node's workers (1 = perfectly even; "
             "N workers with all load on one = N).</p>")
    H.append(f'<img src="{charts["skew"]}" alt="skew over time">')
    H.append(_table(["node", "workers", "mean skew", "p95 skew", "max skew"],
                    [(_label(r["node"], r["addr"]), r["workers"], r["mean_skew"], r["p95_skew"], r["max_skew"])
                     for r in nodes], ["", "", "ratio", "ratio", "ratio"]))

    H.append("<h2>3. Queues whose backlog keeps growing</h2><p>A queue keeps growing when the "
             "least-squares slope of its length over the run is positive and that linear trend explains "
             "at least half of the length's variance (R&sup2; &ge; 0.5, so an oscillating queue does not "
             "count), its last length is above its first, and its length went up in at least as many "
             "intervals as it went down. Only queues that were among a worker's 10 largest at some sample "
             "are visible.</p>")
    H.append(f'<img src="{charts["backlog"]}" alt="backlog over time">')
    H.append(_table(["node", "queue", "first len", "last len", "max len", "slope (jobs/s)", "R²",
                     "up fraction", "jobs in", "jobs out"],
                    [(labels.get(r["node"], r["node"][:8]), r["queue"], r["first_len"], r["last_len"],
                      r["max_len"], r["len_slope_per_s"], r["len_r2"], r["up_fraction"], r["jobs_in"],
                      r["jobs_out"]) for r in growing], ["", "", "", "", "", "", "ratio", "ratio", "", ""]))

    H.append("<h2>4. Redelivery ratio per queue</h2><p>(additional deliveries + NACKs) / jobs delivered "
             "out, summed over the nodes that have the queue; highest first.</p>")
    H.append(_table(["queue", "nodes", "jobs in", "delivered", "additional deliveries", "nacks",
                     "redelivery ratio"],
                    [(r["queue"], r["nodes"], r["in"], r["out"], r["add"], r["nacks"], r["ratio"])
                     for r in redelivery], ["", "", "", "", "", "", "ratio"]))

    H.append("<h2>5. Command latency per node</h2><p>Estimated from the summed service-time histograms "
             "(linear interpolation inside a bucket; a percentile in the open last bucket shows its "
             "lower edge).</p>")
    H.append(f'<img src="{charts["latency"]}" alt="latency over time">')
    H.append(_table(["node", "commands timed", "p50 us", "p90 us", "p99 us"],
                    [(_label(r["node"], r["addr"]), r["latency_count"], r["lat_p50_us"], r["lat_p90_us"],
                      r["lat_p99_us"]) for r in srows]))

    if result.bad_lines:
        H.append("<h2>Bad lines</h2><p>Skipped and counted; all of them are in the bad_lines table.</p>")
        H.append(_table(["file", "reason", "line (truncated)"],
                        [(str(f), str(rsn), (str(line) or "")[:200]) for f, rsn, line in result.bad_examples]))

    H.append("<h2>Tables</h2>")
    H.append(_table(["table", "rows", "path"],
                    [(t, n, str(result.table_paths.get(t, ""))) for t, n in result.tables.items()]))

    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Disque stats report</title>
<style>
body {{ font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 24px; color: #222; max-width: 1400px; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd; }}
table {{ border-collapse: collapse; margin: 10px 0; font-size: 13px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 7px; }} th {{ background: #f3f3f3; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }} td.none {{ color: #888; text-align: center; }}
table.wide {{ font-size: 12px; }} img {{ max-width: 100%; margin: 6px 0; }}
</style></head><body>
<h1>Disque stats report</h1>
{''.join(H)}
<p style="color:#888;font-size:12px">disque-stats-ingest, {time.strftime('%Y-%m-%d %H:%M:%S')}</p>
</body></html>
"""
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path
