#!/usr/bin/env python3
"""The floor under the stats job: what writing the tables it must write costs with nothing
computed (docs/spark.md, "The floor under the job").

Over the input and the output of a finished job (``bench_spark.py --keep``), in one warm
local[2] session, each step ``--repeat`` times:

* the bare scan: ``spark.read.schema(STATS_SCHEMA_V2).json(files)`` -> Parquet (the yardstick);
* the parse alone: the same read with nothing written (``noop`` sink);
* the samples table written from the parsed lines (``samples.write``);
* each output table (worker_rates, queue_backlog, node_rates) held in memory first, then
  written to Parquet by date as the job writes it: the cost of the write alone.

The sum of the parse, the writes and the job's own report stage (given with ``--report-s``,
from the job's printout) is what no plan for the same tables can go below on this machine.

    python bench/bench_spark.py --scale 0.1 --schema v2 --dir /tmp/bs01 --keep
    python bench/experiments/spark_floor.py /tmp/bs01/in-v2 /tmp/bs01/out-v2 --report-s 5.6
"""
from __future__ import annotations

import argparse
import os
import shutil
import time

TABLES = ("worker_rates", "queue_backlog", "node_rates")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="the job's input directory of stats logs (*.jsonl*)")
    ap.add_argument("output", help="the job's output directory (its tables are rewritten elsewhere)")
    ap.add_argument("--work", default="/tmp/bench-spark-floor")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--report-s", type=float, default=0.0, help="the job's report stage, seconds")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from disque_spark import batch, samples, schema
    from disque_spark.session import make_session
    spark = make_session(master="local[2]", driver_memory="2g")
    for key, value in batch.WRITE_CONF.items():
        spark.conf.set(key, value)
    opts = {"recursiveFileLookup": "true", "pathGlobFilter": "*.jsonl*"}

    def scan():
        return spark.read.options(**opts).schema(schema.STATS_SCHEMA_V2).json(args.input)

    def best(name, fn):
        times = []
        for _ in range(args.repeat):
            t = time.monotonic()
            fn()
            times.append(time.monotonic() - t)
        print(f"  {name:44s} {min(times):6.1f} s   (runs: {', '.join(f'{x:.1f}' for x in times)})", flush=True)
        return min(times)

    shutil.rmtree(args.work, ignore_errors=True)
    scan().limit(1000).write.format("noop").mode("overwrite").save()      # JVM warm-up
    print(f"bench_spark_floor: {args.input} (tables of {args.output}), local[2], best of {args.repeat}")
    bare = best("bare scan (JSON -> Parquet)", lambda: scan().write.mode("overwrite").parquet(
        os.path.join(args.work, "bare")))
    parse = best("the parse alone (JSON -> nothing)", lambda: scan().write.format("noop").mode("overwrite").save())
    samp = best("samples.write (parse + samples table)", lambda: samples.write(
        spark, [args.input], os.path.join(args.work, "samples"), 0, False, reader_options=opts))
    writes = {}
    for t in TABLES:
        cached = spark.read.parquet(os.path.join(args.output, t)).cache()
        cached.count()
        writes[t] = best(f"write {t} from memory", lambda: cached.write.mode("overwrite").partitionBy(
            "date").parquet(os.path.join(args.work, t)))
        cached.unpersist()
    floor = samp + sum(writes.values()) + args.report_s
    print(f"  floor: samples.write + the table writes + the report ({args.report_s:.1f} s) = {floor:.1f} s "
          f"= {floor / bare:.2f} x the bare scan (the parse alone: {parse / bare:.2f} x; "
          f"samples.write: {samp / bare:.2f} x)")
    spark.stop()
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
