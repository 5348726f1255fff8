"""The summaries' partial aggregates, kept between runs so that a run adds only its new rows.

``summary`` needs, per node, totals over every worker_rates row, and ``queue_summary``, per
(node, queue), totals and a least-squares fit over every queue_backlog row. Both are built from
partial aggregates, one row per (node, worker) and per (node, queue, worker): a full run
computes them from the whole tables, an incremental run from the rows it wrote, merged on the
driver with the ones the previous run saved (OUT/_state/run-N/, a few thousand rows at most).
Every field merges exactly (counts, sums, extremes, the first and last sample) except the fit,
which is merged the way Spark merges its own partial buffers (Chan et al.'s pairwise update of
count, means, co-moment and second moments), so a merged fit equals a full run's to rounding,
and a constant backlog keeps a co-moment of exactly zero.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from disque_spark.schema import JOB_COUNTERS, QUEUE_COUNTERS

WORKER_KEY = ("node", "worker")
QUEUE_KEY = ("node", "queue", "worker")
WORKER_SUMS = ["commands"] + list(JOB_COUNTERS) + ["bus_in", "bus_out"]
_FIT = ("fit_origin", "fit_n", "fit_x", "fit_y", "fit_ck", "fit_m2x", "fit_m2y")


def worker_partials(wr: DataFrame) -> DataFrame:
    """Per (node, worker, addr) totals of worker_rates rows (addr is a key: a string in an
    aggregation buffer would make Spark sort every row first)."""
    dtv = F.when(F.col("interval_s") > 0, F.col("interval_s"))
    return wr.groupBy("node", "worker", "addr").agg(
        F.count(F.lit(1)).alias("samples"),
        F.min(F.col("ts") - F.coalesce(F.col("interval_s"), F.lit(0.0))).alias("start_ts"),
        F.max("ts").alias("end_ts"),
        F.sum(F.col("restart").cast("int")).cast("long").alias("restarts"),
        *[F.sum(c).cast("long").alias(c) for c in WORKER_SUMS],
        F.sum("cpu_s").alias("cpu_s"), F.max("rss").alias("rss"),
        F.sum(dtv).alias("seconds"), F.max("commands_per_s").alias("peak_commands_per_s"))


def queue_partials(qb: DataFrame, origin: float = 0.0) -> DataFrame:
    """Per (node, queue, worker) totals of queue_backlog rows, the fit of len over ts as
    (n, mean x, mean y, co-moment, second moments): Spark's own state for regr_slope/regr_r2,
    over the rows where both are set. ``x`` is ts - ``origin`` (a whole second near the rows'
    first, kept as ``fit_origin``): the moments do not change, but the mean of times near
    1.8e9 would lose the digits the merge of two partials needs."""
    x = F.when(F.col("len").isNotNull(), F.col("ts") - F.lit(float(origin)))
    y = F.when(F.col("ts").isNotNull(), F.col("len").cast("double"))
    n = F.count(x)
    return qb.groupBy(*QUEUE_KEY).agg(
        F.count(F.lit(1)).alias("samples"),
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"),
        F.min_by("len", "ts").alias("first_len"), F.max_by("len", "ts").alias("last_len"),
        F.max("len").alias("max_len"),
        F.lit(float(origin)).alias("fit_origin"), n.cast("double").alias("fit_n"), F.avg(x).alias("fit_x"), F.avg(y).alias("fit_y"),
        (F.covar_pop(x, y) * n).alias("fit_ck"), (F.var_pop(x) * n).alias("fit_m2x"),
        (F.var_pop(y) * n).alias("fit_m2y"),
        F.sum(F.when(F.col("growth") > 0, 1).otherwise(0)).cast("long").alias("intervals_up"),
        F.sum(F.when(F.col("growth") < 0, 1).otherwise(0)).cast("long").alias("intervals_down"),
        F.count("growth").alias("intervals"),
        *[F.sum(c).cast("long").alias(c) for c in QUEUE_COUNTERS])


def _add(a, b):
    return b if a is None else a if b is None else a + b


def _pick(fn, a, b):
    return b if a is None else a if b is None else fn(a, b)


def _merge_fit(a: dict, b: dict) -> dict:
    """Spark's merge of two covariance/variance buffers (CentralMomentAgg, Covariance), b's
    mean time first moved to a's origin (whole seconds apart: an exact difference)."""
    n1, n2 = a["fit_n"] or 0.0, b["fit_n"] or 0.0
    if n1 == 0:
        return {k: b.get(k) for k in _FIT}
    if n2 == 0:
        return {k: a.get(k) for k in _FIT}
    n = n1 + n2
    # a partial saved without an origin measured time from 0
    dx = b["fit_x"] + ((b.get("fit_origin") or 0.0) - (a.get("fit_origin") or 0.0)) - a["fit_x"]
    dy = b["fit_y"] - a["fit_y"]
    dxn, dyn = dx / n, dy / n
    return {"fit_origin": a.get("fit_origin") or 0.0, "fit_n": n, "fit_x": a["fit_x"] + dxn * n2, "fit_y": a["fit_y"] + dyn * n2,
            "fit_ck": a["fit_ck"] + b["fit_ck"] + dx * dyn * n1 * n2,
            "fit_m2x": a["fit_m2x"] + b["fit_m2x"] + dx * dxn * n1 * n2,
            "fit_m2y": a["fit_m2y"] + b["fit_m2y"] + dy * dyn * n1 * n2}


def merge_worker(a: dict, b: dict) -> dict:
    out = dict(a)
    out["addr"] = _pick(min, a["addr"], b["addr"])
    for c in ["samples", "restarts", "cpu_s", "seconds"] + WORKER_SUMS:
        out[c] = _add(a[c], b[c])
    for c in ("start_ts",):
        out[c] = _pick(min, a[c], b[c])
    for c in ("end_ts", "rss", "peak_commands_per_s"):
        out[c] = _pick(max, a[c], b[c])
    return out


def merge_queue(a: dict, b: dict) -> dict:
    out = dict(a)
    for c in ["samples", "intervals_up", "intervals_down", "intervals"] + list(QUEUE_COUNTERS):
        out[c] = _add(a[c], b[c])
    out["max_len"] = _pick(max, a["max_len"], b["max_len"])
    if b["first_ts"] is not None and (a["first_ts"] is None or b["first_ts"] < a["first_ts"]):
        out["first_ts"], out["first_len"] = b["first_ts"], b["first_len"]
    if b["last_ts"] is not None and (a["last_ts"] is None or b["last_ts"] > a["last_ts"]):
        out["last_ts"], out["last_len"] = b["last_ts"], b["last_len"]
    out.update(_merge_fit(a, b))
    return out


def merge(rows, key, merge_fn, into: dict | None = None) -> dict:
    """Fold partial rows (dicts) into {key tuple: merged row}."""
    out = {} if into is None else into
    for r in rows:
        k = tuple(r[c] for c in key)
        out[k] = merge_fn(out[k], r) if k in out else dict(r)
    return out


def per_queue(rows) -> list[dict]:
    """The (node, queue, worker) partials merged over the workers: one row per (node, queue),
    with ``workers`` the number of workers that reported the queue."""
    out = {}
    for r in rows:
        k = (r["node"], r["queue"])
        if k in out:
            m = merge_queue(out[k], r)
            m["workers"] = out[k]["workers"] + 1
            out[k] = m
        else:
            out[k] = dict(r, workers=1)
    return list(out.values())


def frame(spark, schema, rows: list) -> DataFrame:
    """A DataFrame of partial rows (dicts) with the partials' ``schema`` (plus ``workers``
    for per_queue's rows)."""
    from pyspark.sql import types as T
    if rows and "workers" in rows[0] and "workers" not in schema.names:
        schema = T.StructType(schema.fields + [T.StructField("workers", T.LongType(), True)])
    return spark.createDataFrame([tuple(r.get(f) for f in schema.names) for r in rows], schema)


def queue_summary_input(spark, qb: DataFrame) -> DataFrame:
    """queue_summary's input from a whole queue_backlog (no saved totals to merge)."""
    first = qb.agg(F.min("ts")).first()[0]
    qp = queue_partials(qb, float(int(first)) if first is not None else 0.0)
    return frame(spark, qp.schema, per_queue([r.asDict() for r in qp.collect()]))
