"""node_rates in an incremental run: only the buckets the new samples touch are recomputed.

A node's buckets are centred on t0 + i * bucket (its first sample anchors the grid), so the
new samples of a node whose first new sample is at ``lo`` can only change the buckets from
``i_lo = round((lo - t0) / bucket)`` on: every earlier bucket of that node holds only samples
an earlier run already saw, and stays as written. The buckets from ``i_lo`` on are recomputed
from the worker_rates rows they hold (the old samples of the boundary bucket included), and
the node_rates files that hold rows of those buckets are rewritten without them: in an hourly
run, the files the previous run wrote (docs/spark.md#incremental-runs).
"""
from __future__ import annotations

import math

from disque_spark import storage


def bucket_index(ts: float, t0: float, bucket: float) -> int:
    """The index of the bucket ``ts`` falls in, rounded as Spark's ``round`` (half away from zero)."""
    x = (ts - t0) / bucket
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def cuts(first_new: dict, grid: dict, bucket: float) -> dict:
    """{node: ts of the first bucket its new samples touch} (t0 + i_lo * bucket, the value
    node_rates' ``ts`` has for that bucket)."""
    return {node: grid[node] + bucket_index(lo, grid[node], bucket) * bucket for node, lo in first_new.items()}


def recent_cover(rows: list, cut: dict, bucket: float, per_worker: int) -> bool:
    """Whether the saved recent worker_rates ``rows`` (each worker's last ``per_worker``, as
    dicts) hold every old row of the buckets from each node's cut on: for every worker of such
    a node whose rows reach the cut, the saved rows start before the cut's bucket, or they
    are all the rows the worker ever had (fewer than ``per_worker``)."""
    first, last, count = {}, {}, {}
    for r in rows:
        key = (r["node"], r["worker"])
        first[key] = min(r["ts"], first.get(key, r["ts"]))
        last[key] = max(r["ts"], last.get(key, r["ts"]))
        count[key] = count.get(key, 0) + 1
    for (node, worker), lo in first.items():
        if node not in cut:
            continue
        edge = cut[node] - bucket / 2.0 - bucket / 4.0      # a bucket's samples start after this
        if last[(node, worker)] >= edge and count[(node, worker)] >= per_worker and lo > edge:
            return False
    return True


def hours(start_ts, end_ts, bucket: float) -> int:
    """The number of clock hours the buckets of samples from ``start_ts`` to ``end_ts`` fall
    in: node_rates' partitions, one hour (or a few, when their hashes meet) per output file."""
    if start_ts is None or end_ts is None:
        return 0
    return int((end_ts + bucket) // 3600 - (start_ts - bucket) // 3600) + 1


def replace(spark, wr_all, nr_path: str, cut: dict, grid: dict, bucket: float, k: int, codes,
            end_ts: float | None) -> None:
    """Recompute the buckets from each node's cut on and replace them in ``nr_path``
    (``end_ts``: the last new sample)."""
    from pyspark.sql import functions as F

    from disque_spark import transform
    if not cut:
        return
    half = bucket / 4.0     # bucket times differ by a whole bucket: a quarter tells them apart
    low = min(cut.values())
    cut_df = F.broadcast(spark.createDataFrame(sorted(cut.items()), "node string, _cut double"))
    grid_df = spark.createDataFrame(sorted(grid.items()), "node string, t0 double")
    # every sample of a bucket from the cut on is at or after the cut minus half a bucket
    src = wr_all.where((F.col("date") >= transform.date_of(F.lit(low - bucket))) & (F.col("ts") >= low - bucket))
    new = (transform.node_rates(src, bucket, grid_df, k, codes, hours=hours(low - bucket, end_ts, bucket))
           .join(cut_df, "node")
           .where(F.col("ts") >= F.col("_cut") - half).drop("_cut"))
    old_files = []
    if storage.exists(spark, nr_path):
        old_files = sorted(r[0] for r in spark.read.parquet(nr_path).where(F.col("ts") >= low - half)
                           .select(F.col("_metadata.file_path")).distinct().collect())
    out = new
    if old_files:
        old = spark.read.option("basePath", nr_path).parquet(*old_files)
        kept = (old.join(cut_df, "node", "left")
                .where(F.col("_cut").isNull() | (F.col("ts") < F.col("_cut") - half)).drop("_cut"))
        out = kept.unionByName(new.select(*old.columns))
    out.write.mode("append").partitionBy("date").parquet(nr_path)
    for f in old_files:
        storage.delete(spark, f)
