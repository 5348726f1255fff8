"""The samples table: every stats line parsed and validated once, in columnar form.

A batch run parses the new lines exactly once (``write``) into OUT/samples/, Parquet
partitioned by node and hour (``node=<id>/hour=2026-11-21T05/``), and every output table is
computed from that table, never from the text again (docs/spark.md#how-the-job-is-laid-out).
The table is kept: an incremental run appends the new lines' samples under a new ``run``
number and reads back only those (``read``), a ``--full`` run rewrites it.

Columns: schema.SAMPLE_COLUMNS (the flattened sample, v1 and v2 brought to one shape), then
``bad_reason``, ``line`` and ``file`` (set only for a bad line), ``run`` (the run that
ingested the line) and the partition columns ``node`` and ``hour``. A bad line has neither
node nor hour: all bad lines land in the one null partition
(``node=__HIVE_DEFAULT_PARTITION__``), which ``read`` skips by partition pruning and
``bad_lines`` reads alone.

The write is a straight text -> Parquet job, like a bare scan: no shuffle, no sort, no
cache. The counts the run reports (lines, bad lines by reason, the longest histogram) are
observed while it writes (``DataFrame.observe``), not counted by a second pass.
"""
from __future__ import annotations

import os

SAMPLES = "samples"
PARTITION_COLUMNS = ("node", "hour")


def hour_of(ts):
    """The UTC hour of a unix timestamp as ``yyyy-MM-ddTHH`` (sorts like time; independent
    of the session time zone)."""
    from pyspark.sql import functions as F

    from disque_spark.transform import date_of
    h = F.floor(F.pmod(ts, F.lit(86400.0)) / 3600).cast("int")
    return F.concat(date_of(ts).cast("string"), F.lit("T"), F.lpad(h.cast("string"), 2, "0"))


def table_schema(spark):
    """The samples table's schema, partition columns last and typed explicitly (a node id of
    decimal digits must not be read back as a number)."""
    from pyspark.sql import types as T

    from disque_spark import schema
    empty = spark.createDataFrame([], "value string, _file string")
    parsed = schema.parse_lines(empty, file_col="_file").schema
    fields = [f for f in parsed.fields if f.name not in PARTITION_COLUMNS]
    fields.append(T.StructField("run", T.IntegerType(), True))
    fields += [T.StructField(c, T.StringType(), True) for c in PARTITION_COLUMNS]
    return T.StructType(fields)


def write(spark, paths: list[str], dest: str, run: int, append: bool, segment_names: dict | None = None,
          reader_options: dict | None = None) -> dict:
    """Parse the lines of ``paths`` once and write their samples under ``dest``.

    ``segment_names``: {copied segment path: original file} (an incremental run reads the new
    part of a grown file from a copy; a bad line reports the original file).
    Returns the observed counts: rows (non-blank lines), bad (by reason), k (the longest
    latency histogram of a good line, 0 when none).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from disque_spark import schema
    reader = spark.read
    for key, value in (reader_options or {}).items():
        reader = reader.option(key, value)
    text = reader.text(paths)
    file_col = F.col("_metadata.file_path")
    for seg, orig in (segment_names or {}).items():
        file_col = F.when(F.col("_metadata.file_path").endswith(os.path.basename(seg)),
                          F.lit(orig)).otherwise(file_col)
    parsed = schema.parse_lines(text.select("value", file_col.alias("_file")), file_col="_file")
    good = F.col("bad_reason").isNull()
    obs = Observation("samples")
    parsed = parsed.observe(
        obs, F.count(F.lit(1)).alias("rows"),
        *[F.count(F.when(F.col("bad_reason") == r, 1)).alias(r) for r in schema.BAD_REASONS],
        F.max(F.when(good, F.size("lat_counts"))).alias("k"))
    data = [c for c in parsed.columns if c not in PARTITION_COLUMNS]
    out = parsed.select(*data, F.lit(run).alias("run"),
                        F.when(good, F.col("node")).alias("node"), F.when(good, hour_of(F.col("ts"))).alias("hour"))
    # each task writes the few (node, hour) partitions its lines fall in (a file is one
    # node's, in time order): no sort by partition first (ingest.WRITE_CONF)
    out.write.mode("append" if append else "overwrite").partitionBy(*PARTITION_COLUMNS).parquet(dest)
    m = obs.get
    bad = {r: int(m[r]) for r in schema.BAD_REASONS if m[r]}
    return {"rows": int(m["rows"]), "bad": bad, "k": int(m["k"] or 0)}


def _table(spark, path: str, files: list | None):
    """The table, or only ``files`` of it (the partition columns still read from their paths)."""
    reader = spark.read.schema(table_schema(spark))
    if files is None:
        return reader.parquet(path)
    if not files:
        return spark.createDataFrame([], table_schema(spark))
    return reader.option("basePath", path).parquet(*files)


def read(spark, path: str, run: int | None = None, files: list | None = None):
    """The good samples (all of them, or only those one run ingested; ``files``: the files
    that run wrote, when known): the columns schema.parse_lines gives a good line, node
    included."""
    from pyspark.sql import functions as F
    df = _table(spark, path, files).where(F.col("node").isNotNull())
    if run is not None:
        df = df.where(F.col("run") == run)
    return df.drop("bad_reason", "line", "file", "run", "hour")


def bad_lines(spark, path: str, run: int | None = None, files: list | None = None):
    """The bad lines (file, bad_reason, line): the null partition only."""
    from pyspark.sql import functions as F
    df = _table(spark, path, files).where(F.col("node").isNull())
    if run is not None:
        df = df.where(F.col("run") == run)
    return df.select("file", "bad_reason", "line")
