#!/usr/bin/env python3
"""Row-for-row check of two versions of the Spark stats pipeline on the same input.

Runs the pipeline of another checkout (``--old-pythonpath``: a directory whose
``disque_spark`` is the old package, e.g. a symlink to a worktree's spark/) and this one, each
in its own process on ``local[2]`` with a full rebuild, then compares every output table:
same row count, same keys, and every column equal (floats, also inside maps and arrays, to a
relative 1e-9). Tables are joined and compared in Spark, so a day's queue_backlog (35 M rows)
is never collected.

    git worktree add --detach /work/wt-old main && mkdir -p /tmp/oldpkg && \\
        ln -sfn /work/wt-old/spark /tmp/oldpkg/disque_spark
    python tools/compare_spark_tables.py --input /tmp/bs01/in-v2 --work /tmp/cmp \\
        --old-pythonpath /tmp/oldpkg

Exit status 0 when every table is equal, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

KEYS = {"worker_rates": ["node", "worker", "ts"], "queue_backlog": ["node", "worker", "queue", "ts"],
        "node_rates": ["node", "ts"], "summary": ["node"], "queue_summary": ["node", "queue"],
        "bad_lines": None}       # bad lines repeat (same file, reason, text): compared as multisets
RUN = ("import sys; from disque_spark import ingest; "
       "r = ingest.run(sys.argv[1], sys.argv[2], master='local[2]', full=True, progress=False); "
       "print(ingest.__file__, r.tables, [(n, round(s, 1)) for n, s in r.stages])")


def run_pipeline(inp: str, out: str, pythonpath: str | None) -> None:
    env = dict(os.environ, SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    subprocess.run([sys.executable, "-c", RUN, inp, out], env=env, check=True, cwd="/")


def same_value(a, b, dtype):
    """A Spark expression: the two values are equal (floats to a relative 1e-9)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def close(x, y):
        tol = F.lit(1e-9) * F.greatest(F.lit(1.0), F.abs(x), F.abs(y))
        return (x.isNull() & y.isNull()) | (F.isnan(x) & F.isnan(y)) | (F.abs(x - y) <= tol)

    if isinstance(dtype, (T.DoubleType, T.FloatType)):
        return F.coalesce(close(a, b), F.lit(False))
    if isinstance(dtype, T.MapType) and isinstance(dtype.valueType, (T.DoubleType, T.FloatType)):
        keys = F.array_sort(F.map_keys(a)) == F.array_sort(F.map_keys(b))
        vals = F.forall(F.map_entries(F.map_zip_with(a, b, lambda k, x, y: close(x, y))), lambda e: e["value"])
        return (a.isNull() & b.isNull()) | F.coalesce(keys & vals, F.lit(False))
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, (T.DoubleType, T.FloatType)):
        return (a.isNull() & b.isNull()) | F.coalesce(
            (F.size(a) == F.size(b)) & F.forall(F.zip_with(a, b, close), lambda v: v), F.lit(False))
    if isinstance(dtype, T.MapType):          # maps are not comparable: their sorted entries are
        return F.array_sort(F.map_entries(a)).eqNullSafe(F.array_sort(F.map_entries(b)))
    return a.eqNullSafe(b)


def compare(spark, old_dir: str, new_dir: str, table: str) -> list[str]:
    from pyspark.sql import functions as F
    old = spark.read.parquet(os.path.join(old_dir, table))
    new = spark.read.parquet(os.path.join(new_dir, table))
    problems = []
    if sorted(old.columns) != sorted(new.columns):
        return [f"columns differ: {sorted(set(old.columns) ^ set(new.columns))}"]
    n_old, n_new = old.count(), new.count()
    if n_old != n_new:
        problems.append(f"rows: old {n_old:,}, new {n_new:,}")
    keys = KEYS[table]
    if keys is None:
        extra = new.exceptAll(old).count() + old.exceptAll(new).count()
        if extra:
            problems.append(f"{extra} rows in one table and not the other")
        return problems
    dup = new.groupBy(*keys).count().where("count > 1").count()
    if dup:
        problems.append(f"{dup} duplicate keys in the new table")
    types = {f.name: f.dataType for f in old.schema.fields}
    o = old.select(*[F.col(c).alias("o_" + c) for c in old.columns])
    n = new.select(*[F.col(c).alias("n_" + c) for c in new.columns])
    cond = None
    for k in keys:
        c = F.col("o_" + k).eqNullSafe(F.col("n_" + k))
        cond = c if cond is None else cond & c
    j = o.join(n, cond, "full_outer")
    others = [c for c in old.columns if c not in keys]
    diffs = [F.sum(F.when(~same_value(F.col("o_" + c), F.col("n_" + c), types[c]), 1).otherwise(0)).alias(c)
             for c in others]
    missing = F.sum(F.when(F.col("o_" + keys[0]).isNull() | F.col("n_" + keys[0]).isNull(), 1).otherwise(0))
    row = j.agg(missing.alias("_missing"), *diffs).first().asDict()
    if row["_missing"]:
        problems.append(f"{row['_missing']} keys in one table only")
    bad_cols = {c: v for c, v in row.items() if c != "_missing" and v}
    if bad_cols:
        problems.append(f"rows differing by column: {bad_cols}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="the stats logs (e.g. the bench's in-v2 directory)")
    ap.add_argument("--work", required=True, help="where the two outputs go (old/, new/)")
    ap.add_argument("--old-pythonpath", required=True, help="PYTHONPATH that imports the old disque_spark")
    ap.add_argument("--skip-runs", action="store_true", help="compare the outputs already under --work")
    args = ap.parse_args(argv)
    old_dir, new_dir = os.path.join(args.work, "old"), os.path.join(args.work, "new")
    if not args.skip_runs:
        run_pipeline(args.input, old_dir, args.old_pythonpath)
        run_pipeline(args.input, new_dir, None)
    from disque_spark.session import make_session
    spark = make_session(master="local[2]", driver_memory="2g")
    failed = False
    for table in KEYS:
        problems = compare(spark, old_dir, new_dir, table)
        rows = spark.read.parquet(os.path.join(new_dir, table)).count()
        print(f"{table:14s} {rows:>12,} rows  " + ("EQUAL" if not problems else "DIFFERENT: " + "; ".join(problems)))
        failed = failed or bool(problems)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
