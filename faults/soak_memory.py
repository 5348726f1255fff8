"""The soak's figures (faults/soak.py): the memory growth verdict, the seconds to recover
the rate after each fault, the picture.

The verdict is computed, not eyeballed. Judged from `steady` (5 minutes into the run, or
a third of a shorter one: the backlog has reached its target and the processes their
working size) to the end:

- the slope of a least-squares line through the samples, in MB per 10 minutes;
- the ratio of the median of the last W seconds to the median of the first W seconds
  after `steady` (W = 5 minutes, or half the judged span if shorter).

A series grows when both its slope and its ratio pass the thresholds below. Kills restart
processes and their RSS starts again from nothing, so RSS is judged per process (by PID):
a process that lived through the whole judged span on all of it; a process started during
the run on its own life after its first RESTARTED_WARM_S seconds, when that is at least
half the judged span; shorter lives are counted, not judged. A node's total RSS is
reported, not judged. used_memory is judged on the cluster's sum (the workload holds the
cluster's backlog steady, not each node's share of it, which moves with the consumers);
each node's used_memory and jobs are reported. A restarted node or worker loads its jobs
back from its AOF, so used_memory does not start again from nothing."""
import statistics

from faults.workload import BUCKET, RECOVERED

STEADY_S = 300.0            # the backlog is steady after this (or a third of a short run)
WINDOW_S = 300.0            # the first and last windows compared
RSS_SLOPE_MB = 1.0          # MB per 10 minutes
RSS_RATIO = 1.03
USED_SLOPE_MB = 0.1
USED_RATIO = 1.10
INF = float("inf")          # reported, not judged
RESTARTED_WARM_S = 60.0     # a restarted process loads its AOF and grows to its working size


def slope_per_10min(points):
    """Least-squares slope of (t seconds, MB) points, in MB per 10 minutes."""
    if len(points) < 3:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return None
    return 600.0 * sum((t - mt) * (v - mv) for t, v in points) / den


def judge(points, lo, hi, w, slope_max, ratio_max):
    """Slope, medians of the first and last windows, their ratio, and whether it grows."""
    pts = [(t, v) for t, v in points if lo <= t <= hi]
    early = [v for t, v in pts if t <= lo + w]
    late = [v for t, v in pts if t >= hi - w]
    slope = slope_per_10min(pts)
    if slope is None or not early or not late:
        return {"samples": len(pts), "slope_mb_per_10min": None, "ratio": None, "grows": None}
    e, la = statistics.median(early), statistics.median(late)
    ratio = la / e if e else None
    return {"samples": len(pts), "slope_mb_per_10min": round(slope, 3),
            "early_median_mb": round(e, 3), "late_median_mb": round(la, 3),
            "ratio": round(ratio, 4) if ratio else None,
            "grows": bool(slope > slope_max and ratio is not None and ratio > ratio_max)}


def cluster_sum(rows, col, n_nodes):
    """(t, sum over the nodes) at the samples where every node answered."""
    by_t = {}
    for r in rows:
        by_t.setdefault(r[0], []).append(r[col])
    return [(t, sum(vs)) for t, vs in sorted(by_t.items())
            if len(vs) == n_nodes and all(v != "" for v in vs)]


def verdict(sampler, total, warmup):
    """used_memory judged on the cluster's sum, RSS per process; restarts counted from the
    PIDs seen."""
    end = warmup + total
    steady = warmup + min(STEADY_S, total / 3.0)
    w = min(WINDOW_S, (end - steady) / 2.0)
    times = sorted({r[0] for r in sampler.procs})
    first_judged = next((t for t in times if t >= steady), None)
    last = times[-1] if times else None
    nodes = {}
    for n in sorted({r[1] for r in sampler.nodes}):
        rows = [r for r in sampler.nodes if r[1] == n]
        used = [(r[0], r[4]) for r in rows if r[4] != ""]
        jobs = [(r[0], r[5] / 1000.0) for r in rows if r[5] != ""]
        rss_total = [(r[0], r[3]) for r in rows if r[3]]
        procs = {}
        for t, node, pid, role, rss in sampler.procs:
            if node == n:
                p = procs.setdefault(pid, {"role": role, "points": []})
                p["points"].append((t, rss))
                if role != "proc":
                    p["role"] = role
        judged = {}
        for pid, p in procs.items():
            ts = [t for t, _ in p["points"]]
            if first_judged is not None and ts[0] <= first_judged and ts[-1] >= last:
                judged["%s (pid %d)" % (p["role"], pid)] = judge(
                    p["points"], steady, end, w, RSS_SLOPE_MB, RSS_RATIO)
                continue
            lo, hi = max(steady, ts[0] + RESTARTED_WARM_S), ts[-1]
            if hi - lo >= (end - steady) / 2.0:
                judged["%s (pid %d, %.0f-%.0f s)" % (p["role"], pid, lo, hi)] = judge(
                    p["points"], lo, hi, min(WINDOW_S, (hi - lo) / 2.0), RSS_SLOPE_MB, RSS_RATIO)
        started_after = sum(1 for p in procs.values() if times and p["points"][0][0] > times[0])
        nodes[str(n)] = {
            "used_memory": judge(used, steady, end, w, INF, INF),
            "kjobs": judge(jobs, steady, end, w, INF, INF),
            "rss_total": judge(rss_total, steady, end, w, INF, INF),
            "processes_judged": judged,
            "processes_seen": len(procs), "processes_started_during_run": started_after,
        }
    n_nodes = len(nodes)
    used = judge(cluster_sum(sampler.nodes, 4, n_nodes), steady, end, w, USED_SLOPE_MB, USED_RATIO)
    kjobs = [(t, v / 1000.0) for t, v in cluster_sum(sampler.nodes, 5, n_nodes)]
    grows = ["cluster used_memory"] if used["grows"] else []
    grows += ["node %s %s" % (n, name) for n, v in nodes.items()
              for name, j in v["processes_judged"].items() if j["grows"]]
    unjudged = [n for n, v in nodes.items() if not v["processes_judged"]]
    return {"steady_after_s": steady, "end_s": end, "window_s": w,
            "thresholds": {"rss_slope_mb_per_10min": RSS_SLOPE_MB, "rss_ratio": RSS_RATIO,
                           "used_slope_mb_per_10min": USED_SLOPE_MB, "used_ratio": USED_RATIO},
            "cluster_used_memory": used,
            "cluster_kjobs": judge(kjobs, steady, end, w, INF, INF),
            "nodes": nodes, "growing": grows, "nodes_without_unrestarted_process": unjudged,
            "verdict": "grows: " + ", ".join(grows) if grows else "no growth"}


def verdict_table(mem):
    """One line per node: used_memory and the judged processes' RSS, slope and ratio."""
    def fig(j):
        if j["slope_mb_per_10min"] is None:
            return "-"
        return "%+.2f MB/10min, x%.3f" % (j["slope_mb_per_10min"], j["ratio"] or 0)
    def span(j):
        return "%s -> %s" % (j.get("early_median_mb", "-"), j.get("late_median_mb", "-"))
    lines = ["| node | used_memory (MB, early -> late) | used_memory slope, ratio | "
             "jobs (thousands, early -> late) | total RSS (MB, early -> late) | "
             "processes judged (RSS slope, ratio) | processes started during the run |",
             "|---|---|---|---|---|---|---|"]
    u, k = mem["cluster_used_memory"], mem["cluster_kjobs"]
    lines.append("| all (judged) | %s | %s | %s | | | |" % (span(u), fig(u), span(k)))
    for n, v in mem["nodes"].items():
        u, r = v["used_memory"], v["rss_total"]
        # "*": a process started during the run, judged on its own life
        procs = "; ".join("%s%s: %s" % (name.split(" ")[0], "*" if " s)" in name else "", fig(j))
                          for name, j in sorted(v["processes_judged"].items())) or "none"
        lines.append("| %s | %s | %s | %s | %s | %s | %d |" % (
            n, span(u), fig(u), span(v["kjobs"]), span(r), procs,
            v["processes_started_during_run"]))
    lines.append("")
    lines.append("verdict (from %.0f s to %.0f s): %s" % (
        mem["steady_after_s"], mem["end_s"], mem["verdict"]))
    return "\n".join(lines)


def recoveries(record, faults):
    """Seconds from each fault's heal until one second's adds reach RECOVERED of the
    fault-free rate (None: not before the next fault)."""
    rates = record.get("adds_per_second") or []
    base = record.get("baseline_rate") or 0
    per = int(round(1.0 / BUCKET))
    out = []
    for k, f in enumerate(faults):
        start = int((f["heal_unix"] - record["started_unix"]) / BUCKET)
        stop = len(rates)
        if k + 1 < len(faults):
            stop = min(stop, int((faults[k + 1]["heal_unix"] - record["started_unix"]) / BUCKET))
        got = None
        for b in range(start + per, stop):
            if sum(rates[b - per:b]) / per >= RECOVERED * base:
                got = round((b - start) * BUCKET, 2)
                break
        out.append(got)
    return out


def recovery_summary(secs):
    """The recovery times after the faults: median, largest, and how many did not recover
    before the next fault."""
    got = sorted(s for s in secs if s is not None)
    return {"faults": len(secs), "median_s": statistics.median(got) if got else None,
            "max_s": got[-1] if got else None, "not_recovered": len(secs) - len(got)}


def picture(sampler, faults, mem, path, label):
    """Memory over time per node (RSS of each node's processes, used_memory), the
    backlog and the rates below; faults shaded, restarts visible as drops."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    node_ids = sorted({r[1] for r in sampler.nodes})
    count = {}                          # (t, node) -> processes sampled
    for t, node, pid, role, rss in sampler.procs:
        count[t, node] = count.get((t, node), 0) + 1
    for n in node_ids:
        c = colours[n % len(colours)]
        rows = [r for r in sampler.nodes if r[1] == n]
        # a node's total only where all its processes were there (not halfway through a
        # restart, which would draw a drop that is not memory)
        full = max([count.get((r[0], n), 0) for r in rows] or [0])
        rows_full = [r for r in rows if r[3] and count.get((r[0], n)) == full]
        axes[0].plot([r[0] / 60 for r in rows_full], [r[3] for r in rows_full],
                     color=c, label="node %d" % n)
        axes[2].plot([r[0] / 60 for r in rows if r[4] != ""],
                     [r[4] for r in rows if r[4] != ""], color=c, label="node %d" % n)
        pids = {}
        for t, node, pid, role, rss in sampler.procs:
            if node == n and rss > 0:
                pids.setdefault(pid, []).append((t / 60, rss))
        for pts in pids.values():
            axes[1].plot([t for t, _ in pts], [v for _, v in pts], color=c, linewidth=0.8)
    load = sampler.load
    axes[3].plot([r[0] / 60 for r in load], [r[3] for r in load], color="k",
                 label="backlog (jobs)")
    ax_r = axes[3].twinx()
    ax_r.plot([r[0] / 60 for r in load if r[4] != ""], [r[4] for r in load if r[4] != ""],
              color="tab:green", linewidth=0.7, label="adds/s")
    ax_r.plot([r[0] / 60 for r in load if r[5] != ""], [r[5] for r in load if r[5] != ""],
              color="tab:red", linewidth=0.7, label="deliveries/s")
    ax_r.set_ylabel("per second")
    ax_r.legend(loc="upper right", fontsize=7)
    for ax in axes:
        for f in faults:
            ax.axvspan(f["start"] / 60, f["end"] / 60, color="orange", alpha=0.15, lw=0)
        ax.axvline(mem["steady_after_s"] / 60, color="grey", linestyle="--", linewidth=0.8)
    for f in faults:
        axes[0].text(f["start"] / 60, 1.0, f["name"], rotation=90, fontsize=6, va="top",
                     transform=axes[0].get_xaxis_transform())
    axes[0].set_ylabel("node RSS, all processes (MB)")
    axes[1].set_ylabel("RSS per process (MB)")
    axes[2].set_ylabel("INFO used_memory (MB)")
    axes[3].set_ylabel("backlog (jobs)")
    axes[3].set_xlabel("minutes (faults shaded; dashed: judged from here)")
    axes[0].legend(loc="lower right", fontsize=7, ncol=len(node_ids))
    axes[3].legend(loc="upper left", fontsize=7)
    fig.suptitle("Soak (%s): %s" % (label, mem["verdict"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


class Samples:
    """A run's samples read back from its CSV files (the sampler's rows, typed)."""

    def __init__(self, out):
        import csv
        import os

        def read(name, kinds):
            with open(os.path.join(out, name + ".csv"), newline="") as f:
                rows = list(csv.reader(f))[1:]
            return [tuple(v if v == "" else k(v) for k, v in zip(kinds, r)) for r in rows]
        self.procs = read("processes", (float, int, int, str, float))
        self.nodes = read("nodes", (float, int, int, float, float, int, int, int))
        self.load = read("workload", (float, int, int, int, float, float, int, int))


def main(argv=None):
    """python -m faults.soak_memory OUT [PNG [LABEL]]: the verdict (and the picture) again from a
    soak's samples, e.g. of a run still going or with other thresholds."""
    import json
    import os
    import sys
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0]
    path, res = os.path.join(out, "soak.json"), {}
    if os.path.exists(path):            # else a run still going: judged up to now
        with open(path) as f:
            res = json.load(f)
    samples = Samples(out)
    warmup = res["memory"]["end_s"] - res["soak_seconds"] if "memory" in res else 4.0
    total = res.get("soak_seconds") or max(r[0] for r in samples.nodes) - warmup
    mem = verdict(samples, total, warmup)
    print(verdict_table(mem))
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump(mem, f, indent=1)
    faults = res.get("faults")
    if faults is None and os.path.exists(os.path.join(out, "faults.json")):
        with open(os.path.join(out, "faults.json")) as f:
            faults = json.load(f)
    if len(argv) > 1:
        picture(samples, faults or [], mem, argv[1], argv[2] if len(argv) > 2 else "replay")


if __name__ == "__main__":
    main()
