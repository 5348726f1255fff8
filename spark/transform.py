"""The DataFrame transformations: counters -> per-interval rates -> tables -> answers.

Everything here is plain Spark SQL (window functions, higher-order functions): no Python
UDF, so executors never need this package and the job runs unchanged on a cluster.

Counter semantics (per (node, worker), ordered by ts; per (node, worker, queue) for the
queue counters):

* a sample is *fresh* when it is the first one seen for its worker, or when the worker
  restarted since the previous sample (``uptime_s`` went down or ``pid`` changed);
* the interval of a fresh sample starts at the process start (``ts - uptime_s``) and its
  counters are the deltas (everything since the process started); with
  ``first_sample="baseline"`` the first sample of a worker only sets the baseline (no
  interval, null rates) - a restart still counts from the process start;
* otherwise the interval is ``(previous ts, ts]`` and a counter's delta is ``value -
  previous``, except that a counter that went down (``CONFIG RESETSTAT``, a queue that
  was garbage-collected and re-created) counts ``value`` (its delta since the reset);
* rates are delta / interval seconds; an interval of zero or less (duplicate samples)
  gives null rates and zero deltas.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from disque_spark.schema import GAUGES, JOB_COUNTERS, QUEUE_COUNTERS, TOP_QUEUE_TYPE

PERCENTILES = ((50, 0.50), (90, 0.90), (99, 0.99))

#: Scalar monotonic counters of a sample (besides the maps and the histogram).
_SCALAR_COUNTERS = list(JOB_COUNTERS)
_DOUBLE_COUNTERS = ["cpu_user", "cpu_sys"]
_MAP_COUNTERS = ["commands", "bus_in", "bus_out"]


# ---------------------------------------------------------------------------
# small expression helpers
# ---------------------------------------------------------------------------

def _rate(delta: Column, dt: Column) -> Column:
    return F.when(dt > 0, F.try_divide(delta.cast("double"), dt))


def _map_sum(m: Column) -> Column:
    return F.aggregate(F.map_values(m), F.lit(0).cast("long"), lambda acc, x: acc + F.coalesce(x, F.lit(0)))


def add_percentiles(df: DataFrame, k: int, counts: str = "lat_counts", bounds: str = "lat_bounds") -> DataFrame:
    """Add latency_count and lat_p50_us / lat_p90_us / lat_p99_us estimated from a histogram.

    ``k`` is the (maximum) number of buckets. Bucket i holds values in (bounds[i-1],
    bounds[i]] (bounds[-1] = 0); the last bucket (above the last bound) has no upper edge,
    so a quantile falling there is reported as the last bound (a lower bound of the true
    value). Linear interpolation inside a bucket. Null when the histogram is empty.

    Written with scalar columns (the k counts, their cumulative sums, the bounds, each
    extracted once) and one CASE chain per percentile over those columns, rather than
    higher-order array functions (they run interpreted) or array lookups repeated inside the
    chains (the generated code, and the JIT's work on it, grows with every repetition).
    """
    if k <= 0:
        return df.select("*", F.lit(None).cast("long").alias("latency_count"),
                         *[F.lit(None).cast("double").alias(f"lat_p{p}_us") for p, _ in PERCENTILES])
    arr, bnd = F.col(counts), F.col(bounds)
    cs = [f"_pc{i}" for i in range(1, k + 1)]
    cums = [f"_pcum{i}" for i in range(1, k + 1)]
    bs = [f"_pb{i}" for i in range(1, k + 1)]
    df = df.select("*", *[F.coalesce(F.try_element_at(arr, F.lit(i)), F.lit(0)).cast("long").alias(cs[i - 1])
                          for i in range(1, k + 1)],
                   *[F.try_element_at(bnd, F.lit(i)).cast("double").alias(bs[i - 1]) for i in range(1, k + 1)])
    cum_exprs, acc = [], None
    for c in cs:
        acc = F.col(c) if acc is None else acc + F.col(c)
        cum_exprs.append(acc)
    df = df.select("*", *[e.alias(n) for e, n in zip(cum_exprs, cums)])
    total = F.col(cums[-1])
    out = [F.when(arr.isNotNull(), total).alias("latency_count")]
    for p, q in PERCENTILES:
        t = total * F.lit(q)
        expr = None
        for i in range(1, k + 1):
            lo = F.lit(0.0) if i == 1 else F.col(bs[i - 2])
            hi = F.col(bs[i - 1])
            before = F.lit(0.0) if i == 1 else F.col(cums[i - 2])
            val = F.when(hi.isNull(), lo).otherwise(lo + (hi - lo) * F.try_divide(t - before, F.col(cs[i - 1])))
            cond = F.col(cums[i - 1]) >= t
            expr = F.when(cond, val) if expr is None else expr.when(cond, val)
        out.append(F.when(arr.isNotNull() & (total > 0), expr).alias(f"lat_p{p}_us"))
    return df.select("*", *out).drop(*cs, *cums, *bs)


def sum_arrays(col: str, k: int) -> Column:
    """Element-wise sum of an array column over an aggregation group (fixed length k)."""
    if k <= 0:
        return F.lit(None).cast("array<bigint>")
    return F.array(*[F.coalesce(F.sum(F.try_element_at(F.col(col), F.lit(i))), F.lit(0)).cast("long")
                     for i in range(1, k + 1)])


def date_of(ts: Column) -> Column:
    """UTC date of a unix timestamp, independent of the session time zone."""
    return F.date_add(F.lit("1970-01-01").cast("date"), F.floor(ts / 86400).cast("int"))


# ---------------------------------------------------------------------------
# worker_rates
# ---------------------------------------------------------------------------

def _interval_flags(p: str, first_sample: str):
    """first / restart / fresh flags and the interval start for a row with previous struct p."""
    prev = F.col(p)
    first = prev.isNull()
    restart = (~first) & F.coalesce(
        (F.col("uptime_s") < prev["uptime_s"]) | (F.col("pid") != prev["pid"]), F.lit(False))
    fresh = first | restart
    from_start = F.col("ts") - F.col("uptime_s")
    if first_sample == "baseline":
        start = (F.when(first, F.lit(None).cast("double"))
                 .when(restart, F.coalesce(from_start, prev["ts"]))
                 .otherwise(prev["ts"]))
    else:
        start = (F.when(first, from_start)
                 .when(restart, F.coalesce(from_start, prev["ts"]))
                 .otherwise(prev["ts"]))
    return first, restart, fresh, start


def _delta(cur: Column, prev: Column, fresh: Column, start: Column) -> Column:
    return (F.when(start.isNull(), F.lit(None))
            .when(fresh, cur)
            .when(prev.isNull() | cur.isNull(), F.lit(None))
            .when(cur < prev, cur)
            .otherwise(cur - prev))


def _map_delta(cur: Column, prev: Column, fresh: Column, start: Column) -> Column:
    per_key = F.transform_values(
        cur, lambda k, v: F.when(fresh, v)
        .when(F.try_element_at(prev, k).isNull() | (v < F.try_element_at(prev, k)), v)
        .otherwise(v - F.try_element_at(prev, k)))
    return (F.when(start.isNull() | cur.isNull(), F.lit(None))
            .when(fresh, cur)
            .when(prev.isNull(), F.lit(None))
            .otherwise(per_key))


def _hist_delta(cur: Column, prev: Column, cur_b: Column, prev_b: Column, fresh: Column, start: Column,
                k: int) -> Column:
    if k <= 0:
        return F.lit(None).cast("array<bigint>")
    ci = [F.coalesce(F.try_element_at(cur, F.lit(i)), F.lit(0)) for i in range(1, k + 1)]
    pi = [F.coalesce(F.try_element_at(prev, F.lit(i)), F.lit(0)) for i in range(1, k + 1)]
    went_down = None
    for c, p in zip(ci, pi):
        went_down = (c < p) if went_down is None else (went_down | (c < p))
    reset = (F.size(cur) != F.size(prev)) | ~F.coalesce(cur_b == prev_b, F.lit(True)) | went_down
    return (F.when(start.isNull() | cur.isNull(), F.lit(None))
            .when(fresh, cur)
            .when(prev.isNull(), F.lit(None))
            .when(reset, cur)
            .otherwise(F.array(*[(c - p).cast("long") for c, p in zip(ci, pi)])))


#: What a worker's sample contributes to the next one's deltas (the window's previous row).
WORKER_PREV_COLS = ["ts", "uptime_s", "pid"] + _SCALAR_COUNTERS + _DOUBLE_COUNTERS + _MAP_COUNTERS + [
    "lat_bounds", "lat_counts"]
QUEUE_PREV_COLS = ["ts", "uptime_s", "pid", "len"] + list(QUEUE_COUNTERS)


def prev_struct(df: DataFrame, cols: list[str]) -> Column:
    """A saved sample (a worker's or a queue's last one) as the struct the window's lag yields."""
    return F.struct(*[df[c] for c in cols])


def _previous(cols: list[str], w, prev: str | None) -> Column:
    """The previous sample in the window; for the first row of a key, the ``prev`` column's
    struct (the last sample an earlier run saw) when given."""
    lagged = F.lag(F.struct(*cols)).over(w)
    return F.coalesce(lagged, F.col(prev)) if prev else lagged


def _with_edges(df: DataFrame, w, prev_col, edges, keep: list[str], recent: int = 0) -> DataFrame:
    """Add the previous-sample struct ``_p`` (one window operator); with ``edges`` (an
    Observation), also gather, while the window runs, each key's last row (its ``keep``
    columns: what the next run's state needs) and each key's first row (node, ts), so no
    second pass over the samples is needed for them. ``recent`` > 0 adds ``_recent``, true
    for each key's last ``recent`` rows."""
    one = F.lit(1)
    # every window function in one select: one window operator, one buffering of each key's rows
    marks = [F.lead(one, recent).over(w).isNull().alias("_recent")] if recent > 0 else []
    if edges is None:
        return df.select("*", prev_col.alias("_p"), *marks)
    df = df.select("*", prev_col.alias("_p"), F.lead(one).over(w).isNull().alias("_last"),
                   F.lag(one).over(w).isNull().alias("_first_new"), *marks)
    return df.observe(edges, F.collect_list(F.when(F.col("_last"), F.struct(*keep))).alias("last"),
                      F.collect_list(F.when(F.col("_first_new"), F.struct("node", "ts"))).alias("first"))


def worker_rates(samples: DataFrame, first_sample: str = "start", k: int = 14, prev: str | None = None,
                 edges=None, recent: int = 0) -> DataFrame:
    """Per (node, worker, sample): deltas and rates of every counter, gauges, latency.

    ``samples`` are good rows as produced by schema.parse_lines (top_queues not needed);
    ``k`` is the longest latency histogram (number of buckets) in the data.
    A boolean ``_tail`` column, when present, is carried through (used by --follow).
    ``prev``: a struct column (``prev_struct(tail, WORKER_PREV_COLS)``) with the worker's
    last sample of an earlier run, null for a worker seen for the first time: an incremental
    run's first delta is taken against it (no union with the old rows, so a cached input
    that is already partitioned and sorted by (node, worker, ts) needs no shuffle or sort).
    ``edges``: an Observation that gets every worker's last row and first (node, ts).
    ``recent`` > 0: a boolean ``_recent`` column marks each worker's last ``recent`` rows.
    """
    w = Window.partitionBy("node", "worker").orderBy("ts")
    keep = [c for c in samples.columns if c not in ("_tail", prev)]
    df = _with_edges(samples, w, _previous(WORKER_PREV_COLS, w, prev), edges, keep, recent)
    first, restart, fresh, start = _interval_flags("_p", first_sample)
    df = df.select("*", first.alias("_first"), restart.alias("restart"), fresh.alias("_fresh"),
                   start.alias("_start"))
    fr, st, p = F.col("_fresh"), F.col("_start"), F.col("_p")
    dt = F.col("interval_s")
    df = df.withColumn("interval_s", F.col("ts") - st)

    d = {}
    for c in _SCALAR_COUNTERS:
        d[c] = _delta(F.col(c), p[c], fr, st)
    cpu = _delta(F.col("cpu_user"), p["cpu_user"], fr, st) + _delta(F.col("cpu_sys"), p["cpu_sys"], fr, st)
    cmd = _map_delta(F.col("commands"), p["commands"], fr, st)
    bus_in = _map_delta(F.col("bus_in"), p["bus_in"], fr, st)
    bus_out = _map_delta(F.col("bus_out"), p["bus_out"], fr, st)
    lat = _hist_delta(F.col("lat_counts"), p["lat_counts"], F.col("lat_bounds"), p["lat_bounds"], fr, st, k)

    df = df.select(
        "*",
        cmd.alias("cmd"), bus_in.alias("bus_in_by_type"), bus_out.alias("bus_out_by_type"),
        lat.alias("_lat"), cpu.alias("cpu_s"),
        *[d[c].alias("_d_" + c) for c in _SCALAR_COUNTERS])
    # map totals once (higher-order functions run interpreted: do not repeat them)
    df = df.select("*", _map_sum(F.col("cmd")).alias("_cmd_sum"),
                   _map_sum(F.col("bus_in_by_type")).alias("_bin_sum"),
                   _map_sum(F.col("bus_out_by_type")).alias("_bout_sum"))
    # duplicate samples (same ts as the previous one): zero deltas, null rates; a fresh
    # sample with no elapsed time (uptime_s 0) keeps its counts (rates stay null)
    zero = (dt <= 0) & ~F.col("_fresh")
    cols = [
        date_of(F.col("ts")).alias("date"),
        F.timestamp_seconds(F.col("ts")).alias("time"),
        "ts", "node", "addr", "worker", "pid", "uptime_s", "interval_s",
        F.col("_first").alias("first_sample"), "restart",
        F.when(zero, F.lit(0)).otherwise(F.col("_cmd_sum")).cast("long").alias("commands"),
        _rate(F.col("_cmd_sum"), dt).alias("commands_per_s"),
        F.when(zero, F.lit(None)).otherwise(F.col("cmd")).alias("cmd"),
        F.when(dt > 0, F.transform_values(F.col("cmd"), lambda k, v: F.try_divide(v.cast("double"), dt))
               ).alias("cmd_per_s"),
    ]
    for c in _SCALAR_COUNTERS:
        cols.append(F.when(zero, F.lit(0)).otherwise(F.col("_d_" + c)).cast("long").alias(c))
        cols.append(_rate(F.col("_d_" + c), dt).alias(c + "_per_s"))
    cols += [
        F.when(zero, F.lit(0)).otherwise(F.col("_bin_sum")).cast("long").alias("bus_in"),
        F.when(zero, F.lit(0)).otherwise(F.col("_bout_sum")).cast("long").alias("bus_out"),
        _rate(F.col("_bin_sum"), dt).alias("bus_in_per_s"),
        _rate(F.col("_bout_sum"), dt).alias("bus_out_per_s"),
        F.when(zero, F.lit(None)).otherwise(F.col("bus_in_by_type")).alias("bus_in_by_type"),
        F.when(zero, F.lit(None)).otherwise(F.col("bus_out_by_type")).alias("bus_out_by_type"),
        F.when(zero, F.lit(0.0)).otherwise(F.col("cpu_s")).alias("cpu_s"),
        (_rate(F.col("cpu_s"), dt) * 100.0).alias("cpu_pct"),
        "rss", F.col("jobs"), *[g for g in GAUGES if g != "jobs"],
        "lat_bounds",
        F.when(zero, F.lit(None)).otherwise(F.col("_lat")).alias("lat_counts"),
    ]
    cols += [c for c in ("_tail", "_recent") if c in df.columns]
    out = df.select(*cols)
    return add_percentiles(out, k)


# ---------------------------------------------------------------------------
# queue_backlog
# ---------------------------------------------------------------------------

def queue_samples(samples: DataFrame) -> DataFrame:
    """Explode the top queues: one row per (node, worker, queue, sample).

    v1 lines carry them as ``top_queues`` (array of structs), v2 lines as ``qmap`` (name ->
    [len, jobs_in, jobs_out, nacks, additional_deliveries], trailing zeros trimmed). Both are
    brought to the v1 struct and concatenated, so the rows are exploded in one pass: a union
    of two explodes reads its input twice (writing the queue rows of 1.38 M v2 lines took
    31.8 s that way, 25.0 s this way; docs/spark.md, "The floor").
    """
    keep = ["node", "worker", "pid", "ts", "uptime_s"]
    if "_tail" in samples.columns:
        keep.append("_tail")
    fields = ["len"] + list(QUEUE_COUNTERS)
    none = F.array().cast(T.ArrayType(TOP_QUEUE_TYPE))
    parts = [F.coalesce(F.col("top_queues"), none)]
    if "qmap" in samples.columns:
        v2 = F.transform(F.map_entries("qmap"), lambda e: F.struct(
            e["key"].alias("queue"),
            *[F.coalesce(F.try_element_at(e["value"], F.lit(i + 1)), F.lit(0)).cast("long").alias(c)
              for i, c in enumerate(fields)]))
        parts.append(F.coalesce(v2, none))
    df = samples.select(*keep, F.explode(F.concat(*parts) if len(parts) > 1 else parts[0]).alias("q"))
    return df.select(*keep, F.col("q.queue").alias("queue"), *[F.col("q." + c).alias(c) for c in fields]
                     ).where(F.col("queue").isNotNull())


def queue_backlog(qsamples: DataFrame, first_sample: str = "start", prev: str | None = None,
                  edges=None) -> DataFrame:
    """Per (node, queue, sample): len, growth, in/out/nack/redelivery deltas and rates.

    ``prev``: as for worker_rates, a struct column (QUEUE_PREV_COLS) with the queue's last
    sample of an earlier run; ``edges`` as for worker_rates (every queue's last row).
    """
    w = Window.partitionBy("node", "worker", "queue").orderBy("ts")
    keep = [c for c in qsamples.columns if c not in ("_tail", prev)]
    df = _with_edges(qsamples, w, _previous(QUEUE_PREV_COLS, w, prev), edges, keep)
    first, restart, fresh, start = _interval_flags("_p", first_sample)
    df = df.select("*", first.alias("_first"), restart.alias("restart"), fresh.alias("_fresh"),
                   start.alias("_start"))
    fr, st, p = F.col("_fresh"), F.col("_start"), F.col("_p")
    dt = F.col("interval_s")
    df = df.withColumn("interval_s", F.col("ts") - st)
    zero = (dt <= 0) & ~F.col("_fresh")
    cols = [date_of(F.col("ts")).alias("date"), F.timestamp_seconds(F.col("ts")).alias("time"),
            "ts", "node", "worker", "queue", "len", "interval_s", "restart"]
    for c in QUEUE_COUNTERS:
        delta = _delta(F.col(c), p[c], fr, st)
        cols.append(F.when(zero, F.lit(0)).otherwise(delta).cast("long").alias(c))
        cols.append(_rate(delta, dt).alias(c.replace("jobs_", "") + "_per_s"))
    growth = F.when(F.col("_first") | F.col("restart"), F.lit(None)).otherwise(F.col("len") - p["len"])
    gdt = F.col("ts") - p["ts"]
    cols.append(growth.alias("growth"))
    cols.append(F.when(gdt > 0, F.try_divide(growth.cast("double"), gdt)).alias("growth_per_s"))
    if "_tail" in qsamples.columns:
        cols.append("_tail")
    return df.select(*cols)


# ---------------------------------------------------------------------------
# text and array values inside aggregations
# ---------------------------------------------------------------------------

class Codes:
    """Integer codes for the few distinct values of ``addr`` and ``lat_bounds``.

    An aggregation whose buffer holds a string or an array (a node's address, its histogram
    bounds) cannot use Spark's hash aggregation: the planner falls back to sorting every row
    by the group keys first (SortAggregate; node_rates sorted its input four times). The
    aggregations take the smallest code of the group instead (a long, hash-aggregated) and
    the code is turned back into its value afterwards.
    """

    TYPES = {"addr": "string", "lat_bounds": "array<bigint>"}

    def __init__(self, values: dict):
        self.values = values

    @classmethod
    def of(cls, df: DataFrame) -> "Codes":
        rows = df.select(*cls.TYPES).distinct().collect()
        values = {}
        for c in cls.TYPES:
            seen = {tuple(r[c]) if isinstance(r[c], list) else r[c] for r in rows if r[c] is not None}
            values[c] = [list(v) if isinstance(v, tuple) else v for v in sorted(seen)]
        return cls(values)

    def _array(self, c: str) -> Column:
        vals = self.values[c]
        if c == "lat_bounds":
            return F.array(*[F.array(*[F.lit(int(x)).cast("long") for x in v]) if v
                             else F.array().cast("array<bigint>") for v in vals])
        return F.array(*[F.lit(v) for v in vals])

    def smallest(self, c: str, src: Column | None = None) -> Column:
        """Aggregate: the smallest code of column ``c`` in the group (null when all are null);
        ``src``: a code column of an earlier aggregation level instead of the value."""
        if src is not None:
            return F.min(src)
        if not self.values[c]:
            return F.min(F.lit(None).cast("int"))
        pos = F.array_position(self._array(c), F.col(c))
        return F.min(F.when(pos > 0, pos))

    def value(self, c: str, code: Column) -> Column:
        if not self.values[c]:
            return F.lit(None).cast(self.TYPES[c])
        return F.element_at(self._array(c), code.cast("int"))


# ---------------------------------------------------------------------------
# node_rates
# ---------------------------------------------------------------------------

_NODE_SUMS = ["commands"] + _SCALAR_COUNTERS + ["bus_in", "bus_out"]
#: the worker_rates columns node_rates reads
NODE_RATES_INPUT = (["date", "ts", "node", "addr", "worker", "interval_s", "restart", "cpu_s", "rss"]
                    + list(GAUGES) + ["lat_bounds", "lat_counts"] + _NODE_SUMS)


def node_rates(wr: DataFrame, bucket_s: float, grid: DataFrame, k: int, codes: Codes | None = None,
               hours: int = 0) -> DataFrame:
    """Per (node, time bucket): rates summed over the node's workers, skew, latency.

    ``grid`` is (node, t0): each node's first sample, which anchors its time buckets.

    Each worker's rate in a bucket is sum(deltas) / sum(interval seconds) of its samples
    that fall into the bucket (normally exactly one); the node rate is the sum over its
    workers. Buckets are ``bucket_s`` wide, centred on t0 + i * bucket_s per node, so the
    one-line-per-worker-per-interval pattern lands one sample per worker per bucket even
    with a little timing jitter. ``codes``: Codes.of(wr) when the caller has them already.
    ``hours``: when > 0, the rows are hash-partitioned by the hour of their bucket into that
    many partitions before the first aggregation (by hour and node into 8 when the hours are
    fewer), so both levels run without another exchange and every output file holds whole
    hours (an incremental run rewrites only the files that hold the hours it recomputes:
    spark/buckets.py).
    """
    codes = codes or Codes.of(wr)
    df = wr.join(F.broadcast(grid), "node")
    df = df.withColumn("_idx", F.round((F.col("ts") - F.col("t0")) / F.lit(float(bucket_s))).cast("long"))
    df = df.withColumn("_hour", F.floor((F.col("t0") + F.col("_idx") * F.lit(float(bucket_s))) / 3600))
    if hours > 0:       # a few hours (an incremental run): by node too, for every core
        df = df.repartition(*((hours, "_hour") if hours >= 8 else (8, "_hour", "node")))
    dtv = F.when(F.col("interval_s") > 0, F.col("interval_s"))
    # gauges: the max over the worker's samples in the bucket (normally exactly one)
    agg1 = [codes.smallest("addr").alias("_addr"),
            F.sum(dtv).alias("_dt"),
            F.max(F.col("restart").cast("int")).alias("_restart"),
            F.sum("cpu_s").alias("cpu_s"),
            F.max("rss").alias("rss"),
            *[F.max(g).alias(g) for g in GAUGES],
            codes.smallest("lat_bounds").alias("_lb"),
            sum_arrays("lat_counts", k).alias("lat_counts")]
    agg1 += [F.sum(c).alias(c) for c in _NODE_SUMS]
    per_worker = df.groupBy("node", "t0", "_hour", "_idx", "worker").agg(*agg1)
    dt = F.col("_dt")
    per_worker = per_worker.withColumn("_wrate", _rate(F.col("commands"), dt))
    agg2 = [codes.smallest("addr", F.col("_addr")).alias("_addr"),
            F.count(F.lit(1)).alias("workers"),
            F.sum("_restart").cast("long").alias("restarts")]
    for c in _NODE_SUMS:
        agg2.append(F.sum(c).cast("long").alias(c))
        agg2.append(F.sum(_rate(F.col(c), dt)).alias(c + "_per_s"))
    agg2 += [
        (F.sum(_rate(F.col("cpu_s"), dt)) * 100.0).alias("cpu_pct"),
        F.sum("rss").alias("rss"), *[F.sum(g).alias(g) for g in GAUGES],
        F.max("_wrate").alias("max_worker_commands_per_s"),
        F.avg("_wrate").alias("mean_worker_commands_per_s"),
        F.max_by("worker", "_wrate").alias("busiest_worker"),
        codes.smallest("lat_bounds", F.col("_lb")).alias("_lb"),
        sum_arrays("lat_counts", k).alias("lat_counts"),
    ]
    nr = per_worker.groupBy("node", "t0", "_hour", "_idx").agg(*agg2)
    nr = nr.select("*", codes.value("addr", F.col("_addr")).alias("addr"),
                   codes.value("lat_bounds", F.col("_lb")).alias("lat_bounds"))
    ts = F.col("t0") + F.col("_idx") * F.lit(float(bucket_s))
    nr = nr.select(
        date_of(ts).alias("date"), F.timestamp_seconds(ts).alias("time"), ts.alias("ts"),
        "node", "addr", F.lit(float(bucket_s)).alias("bucket_s"), "workers", "restarts",
        *[c for col in _NODE_SUMS for c in (col + "_per_s", col)],
        "cpu_pct", "rss", *GAUGES,
        F.when(F.col("mean_worker_commands_per_s") > 0,
               F.try_divide(F.col("max_worker_commands_per_s"), F.col("mean_worker_commands_per_s"))
               ).alias("skew"),
        "max_worker_commands_per_s", "mean_worker_commands_per_s", "busiest_worker",
        "lat_bounds", "lat_counts")
    return add_percentiles(nr, k)


# ---------------------------------------------------------------------------
# summaries and answers
# ---------------------------------------------------------------------------

TOTAL_NODE = "TOTAL"


def summary(wparts: DataFrame, nr: DataFrame, bucket_s: float, k: int, codes: Codes | None = None) -> DataFrame:
    """One row per node plus a TOTAL row: totals, averages, peaks, skew, latency.

    ``wparts``: the worker_rates totals per (node, worker, addr) (partials.worker_partials,
    or the merged ones an incremental run keeps); ``nr``: node_rates."""
    codes = codes or Codes.of(nr)
    sums = ["commands"] + _SCALAR_COUNTERS + ["bus_in", "bus_out"]
    w_aggs = [F.min("addr").alias("addr"),
              F.countDistinct("worker").alias("workers"),
              F.sum("samples").cast("long").alias("samples"),
              F.min("start_ts").alias("start_ts"),
              F.max("end_ts").alias("end_ts"),
              F.sum("restarts").cast("long").alias("restarts"),
              *[F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c) for c in sums],
              F.sum("cpu_s").alias("cpu_s"),
              F.max("rss").alias("max_worker_rss")]
    per_node_w = wparts.groupBy("node").agg(*w_aggs)
    n_aggs = [F.avg("commands_per_s").alias("avg_commands_per_s"),
              F.avg("added_per_s").alias("avg_added_per_s"),
              F.avg("acked_per_s").alias("avg_acked_per_s"),
              F.max("commands_per_s").alias("peak_commands_per_s"),
              F.avg("cpu_pct").alias("avg_cpu_pct"),
              F.max("rss").alias("peak_rss"),
              F.max("queued").alias("peak_queued"),
              F.avg("skew").alias("mean_skew"),
              # exact: an approximate percentile depends on how node_rates' rows are laid out
              F.percentile("skew", 0.95).alias("p95_skew"),
              F.max("skew").alias("max_skew"),
              codes.smallest("lat_bounds").alias("_lb"),
              sum_arrays("lat_counts", k).alias("lat_counts")]
    per_node_n = nr.groupBy("node").agg(*n_aggs)
    per_node_n = per_node_n.select("*", codes.value("lat_bounds", F.col("_lb")).alias("lat_bounds")).drop("_lb")
    # materialized once (a few rows): the TOTAL row and the output both read it
    nodes = per_node_w.join(per_node_n, "node", "left").localCheckpoint(eager=True)

    # cluster-wide: a cluster bucket sums the nodes' buckets that fall into it
    cluster = (nr.groupBy(F.round(F.col("ts") / F.lit(float(bucket_s))).alias("_b"))
               .agg(F.sum("commands_per_s").alias("_c"), F.sum("added_per_s").alias("_a"),
                    F.sum("acked_per_s").alias("_k"), F.sum("rss").alias("_r")))
    peaks = cluster.agg(F.avg("_c").alias("avg_commands_per_s"), F.avg("_a").alias("avg_added_per_s"),
                        F.avg("_k").alias("avg_acked_per_s"),
                        F.max("_c").alias("peak_commands_per_s"), F.max("_r").alias("peak_rss"))
    total = nodes.agg(
        F.lit(TOTAL_NODE).alias("node"), F.lit(None).cast("string").alias("addr"),
        F.sum("workers").cast("long").alias("workers"), F.sum("samples").cast("long").alias("samples"),
        F.min("start_ts").alias("start_ts"), F.max("end_ts").alias("end_ts"),
        F.sum("restarts").cast("long").alias("restarts"),
        *[F.sum(c).cast("long").alias(c) for c in sums],
        F.sum("cpu_s").alias("cpu_s"), F.max("max_worker_rss").alias("max_worker_rss"),
        F.sum("avg_cpu_pct").alias("avg_cpu_pct"),
        F.max("peak_queued").alias("peak_queued"),
        F.avg("mean_skew").alias("mean_skew"), F.max("p95_skew").alias("p95_skew"),
        F.max("max_skew").alias("max_skew"),
        F.first("lat_bounds", ignorenulls=True).alias("lat_bounds"),
        sum_arrays("lat_counts", k).alias("lat_counts"),
    ).crossJoin(peaks)
    cols = ["node", "addr", "workers", "samples", "start_ts", "end_ts", "restarts"] + sums + [
        "cpu_s", "max_worker_rss", "avg_cpu_pct", "avg_commands_per_s", "avg_added_per_s", "avg_acked_per_s",
        "peak_commands_per_s", "peak_rss", "peak_queued",
        "mean_skew", "p95_skew", "max_skew", "lat_bounds", "lat_counts"]
    allrows = nodes.select(*cols).unionByName(total.select(*cols))
    span = F.col("end_ts") - F.col("start_ts")
    allrows = allrows.select(
        F.when(F.col("node") == TOTAL_NODE, 1).otherwise(0).alias("_o"),
        "*", span.alias("span_s"),
        F.timestamp_seconds(F.col("start_ts")).alias("start"),
        F.timestamp_seconds(F.col("end_ts")).alias("end"))
    return add_percentiles(allrows, k).orderBy("_o", "node").drop("_o")


def queue_summary(qparts: DataFrame, min_r2: float = 0.5, min_up_fraction: float = 0.5) -> DataFrame:
    """Per (node, queue): backlog trend (growing?) and the redelivery ratio.

    ``qparts``: one row per (node, queue) of merged partials (partials.per_queue): counts,
    first and last len, and the state of the least-squares fit of len over ts, evaluated here
    as Spark's regr_slope and regr_r2 evaluate theirs.
    growing = the fit's slope is positive and the linear trend explains at least ``min_r2``
    of len's variance (R^2; so an oscillating queue is not "growing"), the last len is above
    the first, and len went up in at least ``min_up_fraction`` of the intervals that changed
    it (intervals with growth != 0).
    redelivery_ratio = (additional_deliveries + nacks) / jobs_out over the run.
    """
    n, ck, m2x, m2y = F.col("fit_n"), F.col("fit_ck"), F.col("fit_m2x"), F.col("fit_m2y")
    slope = F.when((n > 0) & (m2x != 0), (ck / n) / (m2x / n))
    r2 = F.when((n > 0) & (m2x != 0), F.when(m2y == 0, F.lit(1.0)).otherwise(ck * ck / m2x / m2y))
    g = qparts.select(
        "node", "queue", F.col("samples").cast("long").alias("samples"),
        F.col("workers").cast("long").alias("workers"), "first_ts", "last_ts", "first_len", "last_len",
        "max_len", slope.alias("len_slope_per_s"), r2.alias("len_r2"),
        F.col("intervals_up").cast("long").alias("intervals_up"),
        F.col("intervals_down").cast("long").alias("intervals_down"),
        F.col("intervals").cast("long").alias("intervals"),
        *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in QUEUE_COUNTERS])
    changed = F.col("intervals_up") + F.col("intervals_down")
    up_frac = F.when(changed > 0, F.col("intervals_up") / changed)
    g = g.select("*", up_frac.alias("up_fraction"))
    growing = (F.coalesce(F.col("len_slope_per_s") > 0, F.lit(False))
               & F.coalesce(F.col("len_r2") >= min_r2, F.lit(False))
               & (F.col("last_len") > F.col("first_len"))
               & F.coalesce(F.col("up_fraction") >= min_up_fraction, F.lit(False)))
    ratio = F.when(F.col("jobs_out") > 0, F.try_divide(
        (F.col("additional_deliveries") + F.col("nacks")).cast("double"), F.col("jobs_out")))
    return g.select("*", growing.alias("growing"), ratio.alias("redelivery_ratio"))


def max_hist_len(df: DataFrame, col: str = "lat_counts") -> int:
    v = df.agg(F.max(F.size(col))).first()[0]
    return int(v) if v and v > 0 else 0
