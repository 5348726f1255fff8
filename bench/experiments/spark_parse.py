#!/usr/bin/env python3
"""What the parse into the samples table costs against the bare scan (docs/spark.md, "Why the
old parse cost 2.7 × the scan"): JVM CPU seconds of three text -> Parquet jobs over the same
files, in one warm local[2] session, each run ``--repeat`` times:

* bare: ``spark.read.schema(STATS_SCHEMA_V2).json(files)`` -> Parquet (what bench_spark.py times);
* text: ``schema.parse_lines`` (from_json, validation, flattening) -> Parquet by (node, hour),
  i.e. ``samples.write`` without its observation;
* datasource: the same flattening over Spark's JSON data source instead of from_json.

    python bench/experiments/spark_parse.py /tmp/bs01/in-v2       # the bench's --scale 0.1 v2 input
"""
from __future__ import annotations

import argparse
import os
import time

import psutil


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="a directory of stats logs (*.jsonl*)")
    ap.add_argument("--out", default="/tmp/bench-spark-parse")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from pyspark.sql import functions as F

    from disque_spark import batch, samples, schema
    from disque_spark.session import make_session
    spark = make_session(master="local[2]", driver_memory="2g")
    for key, value in batch.WRITE_CONF.items():
        spark.conf.set(key, value)
    me = psutil.Process()

    def jvm_cpu():
        return sum(sum(p.cpu_times()[:2]) for p in me.children(recursive=True))

    def reader():
        return spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.jsonl*")

    def by_node_hour(df):
        good = F.col("bad_reason").isNull()
        return df.select(*[c for c in df.columns if c != "node"], F.when(good, F.col("node")).alias("node"),
                         F.when(good, samples.hour_of(F.col("ts"))).alias("hour"))

    def datasource():
        df = reader().schema(schema.PARSE_SCHEMA).options(**schema.JSON_OPTIONS).json(args.input)
        df = df.select(F.struct(*df.columns).alias("j"))
        corrupt = F.col("j").getField(schema.CORRUPT_COLUMN)
        reason = (F.when(corrupt.isNotNull() & F.json_object_keys(corrupt).isNull(), F.lit("malformed"))
                  .when(corrupt.isNotNull(), F.lit("type"))
                  .when(F.coalesce(F.col("j.ts"), F.col("j.t")).isNull()
                        | F.coalesce(F.col("j.node"), F.col("j.n")).isNull(), F.lit("missing")))
        return df.select(*[schema._flat(n) for n in schema.SAMPLE_COLUMNS], reason.alias("bad_reason"),
                         F.when(reason.isNotNull(), F.substring(corrupt, 1, 500)).alias("line"))

    jobs = {
        "bare": lambda: reader().schema(schema.STATS_SCHEMA_V2).json(args.input),
        "text": lambda: by_node_hour(schema.parse_lines(reader().text(args.input))),
        "datasource": lambda: by_node_hour(datasource()),
    }

    def write(df):
        w = df.write.mode("overwrite")
        (w.partitionBy("node", "hour") if "hour" in df.columns else w).parquet(args.out)

    write(jobs["bare"]())          # warm the JVM first
    for rep in range(args.repeat):
        for name, make in jobs.items():
            c, t = jvm_cpu(), time.monotonic()
            write(make())
            print(f"{rep} {name:10s} wall {time.monotonic() - t:6.1f} s  JVM CPU {jvm_cpu() - c:6.1f} s  "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
