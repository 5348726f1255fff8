"""The stats-log schema v1, given to Spark explicitly (never inferred), and the line parser.

One JSON object per line, one line per worker per interval. See spark/README.md for the
field-by-field description. Parsing rules:

* blank lines are ignored (not counted as bad);
* a line is *bad* (counted, skipped, never fatal) when it is not a JSON object
  (``malformed``), when a known field has the wrong type (``type``: e.g. ``"worker": "x"``
  or ``"rss": 1.5``), or when ``ts``, ``node`` or ``worker`` is missing or null
  (``missing``);
* unknown extra fields are ignored; known fields that are missing become null.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

SCHEMA_VERSION = 1
CORRUPT_COLUMN = "_corrupt_record"

_L = T.LongType()
_D = T.DoubleType()
_S = T.StringType()


def _fields(*names, dtype=_L):
    return [T.StructField(n, dtype, True) for n in names]


JOB_COUNTERS = ("added", "delivered", "acked", "nacked", "requeued", "expired", "deleted")
GAUGES = ("jobs", "queued", "active", "queues", "blocked")
QUEUE_COUNTERS = ("jobs_in", "jobs_out", "nacks", "additional_deliveries")

TOP_QUEUE_TYPE = T.StructType(
    [T.StructField("queue", _S, True), T.StructField("len", _L, True)]
    + _fields(*QUEUE_COUNTERS))

COUNTER_MAP = T.MapType(_S, _L, True)

#: The record schema (schema v1). Field order follows the documentation.
STATS_SCHEMA = T.StructType([
    T.StructField("v", _L, True),
    T.StructField("ts", _D, True),
    T.StructField("node", _S, True),
    T.StructField("addr", _S, True),
    T.StructField("worker", T.IntegerType(), True),
    T.StructField("pid", _L, True),
    T.StructField("uptime_s", _D, True),
    T.StructField("commands", COUNTER_MAP, True),
    T.StructField("jobs", T.StructType(_fields(*JOB_COUNTERS)), True),
    T.StructField("gauges", T.StructType(_fields(*GAUGES)), True),
    T.StructField("top_queues", T.ArrayType(TOP_QUEUE_TYPE, True), True),
    T.StructField("bus", T.StructType([T.StructField("in", COUNTER_MAP, True),
                                       T.StructField("out", COUNTER_MAP, True)]), True),
    T.StructField("rss", _L, True),
    T.StructField("cpu_user", _D, True),
    T.StructField("cpu_sys", _D, True),
    T.StructField("latency_us", T.StructType([T.StructField("bounds", T.ArrayType(_L, True), True),
                                              T.StructField("counts", T.ArrayType(_L, True), True)]),
                  True),
])

#: What from_json is given: the record schema plus the corrupt-record column.
PARSE_SCHEMA = T.StructType(STATS_SCHEMA.fields + [T.StructField(CORRUPT_COLUMN, _S, True)])

JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}

#: Columns of the flattened "sample" rows every later stage works on.
SAMPLE_COLUMNS = (
    ["node", "addr", "worker", "pid", "ts", "uptime_s", "v", "commands"]
    + list(JOB_COUNTERS) + list(GAUGES)
    + ["top_queues", "bus_in", "bus_out", "rss", "cpu_user", "cpu_sys", "lat_bounds", "lat_counts"]
)

BAD_REASONS = ("malformed", "type", "missing")


def parse_lines(text: DataFrame, value_col: str = "value", file_col: str | None = None,
                file_for_all: bool = False) -> DataFrame:
    """Parse a DataFrame of raw lines into flattened sample rows plus ``bad_reason``.

    Returns every non-blank line: the SAMPLE_COLUMNS, ``bad_reason`` (null for a good
    line, else one of BAD_REASONS), ``line`` (the raw text, kept only for bad lines,
    truncated to 500 characters) and ``file`` (when ``file_col`` is given; only for bad
    lines unless ``file_for_all``).
    """
    value = F.col(value_col)
    df = text.where(F.trim(value) != "")
    j = F.from_json(value, PARSE_SCHEMA, JSON_OPTIONS)
    cols = [j.alias("j"), value.alias("_line")]
    if file_col is not None:
        cols.append(F.col(file_col).alias("file"))
    df = df.select(*cols)
    corrupt = F.col("j").getField(CORRUPT_COLUMN)
    # json_object_keys is null for anything that is not a JSON object: tells a syntax
    # error apart from a type error (it is only evaluated for corrupt lines).
    reason = (F.when(F.col("j").isNull(), F.lit("malformed"))
              .when(corrupt.isNotNull() & F.json_object_keys(F.col("_line")).isNull(), F.lit("malformed"))
              .when(corrupt.isNotNull(), F.lit("type"))
              .when(F.col("j.ts").isNull() | F.col("j.node").isNull() | F.col("j.worker").isNull(),
                    F.lit("missing")))
    out = [_flat(n) for n in SAMPLE_COLUMNS]
    out.append(reason.alias("bad_reason"))
    out.append(F.when(reason.isNotNull(), F.substring(F.col("_line"), 1, 500)).alias("line"))
    if file_col is not None:
        out.append(F.col("file") if file_for_all else F.when(reason.isNotNull(), F.col("file")).alias("file"))
    return df.select(*out)


def _flat(name: str) -> Column:
    j = F.col("j")
    if name in JOB_COUNTERS:
        return j.getField("jobs").getField(name).alias(name)
    if name in GAUGES:
        return j.getField("gauges").getField(name).alias(name)
    if name == "bus_in":
        return j.getField("bus").getField("in").alias(name)
    if name == "bus_out":
        return j.getField("bus").getField("out").alias(name)
    if name == "lat_bounds":
        return j.getField("latency_us").getField("bounds").alias(name)
    if name == "lat_counts":
        return j.getField("latency_us").getField("counts").alias(name)
    return j.getField(name).alias(name)
