"""The stats-log schemas v1 and v2, given to Spark explicitly (never inferred), and the line parser.

One JSON object per line, one line per worker per interval. See docs/stats-schema.md for the
field-by-field description of both versions. A file may mix them: the parser reads every
line with the union of both schemas and maps each version's fields onto the same flat
sample columns (v2's left-out counters become 0, its histogram gets the version's bounds).
Parsing rules:

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

#: v2 (docs/stats-schema.md): short keys; zero counters, empty maps and trailing zeros left out.
V2_JOBS = dict((("added", "add"), ("delivered", "dlv"), ("acked", "ack"), ("nacked", "nak"), ("requeued", "rq"),
                ("expired", "exp"), ("deleted", "del")))
V2_GAUGES = dict((("jobs", "jobs"), ("queued", "qd"), ("active", "act"), ("queues", "qs"), ("blocked", "blk")))
#: the histogram bounds every v2 line has unless it carries its own ``lb``
V2_LATENCY_BOUNDS = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
V2_FIELDS = [
    T.StructField("t", _D, True),
    T.StructField("n", _S, True),
    T.StructField("a", _S, True),
    T.StructField("w", T.IntegerType(), True),
    T.StructField("p", _L, True),
    T.StructField("up", _D, True),
    T.StructField("c", COUNTER_MAP, True),
    T.StructField("j", T.StructType(_fields(*V2_JOBS.values())), True),
    T.StructField("g", T.StructType(_fields(*V2_GAUGES.values())), True),
    T.StructField("q", T.MapType(_S, T.ArrayType(_L, True), True), True),
    T.StructField("bi", COUNTER_MAP, True),
    T.StructField("bo", COUNTER_MAP, True),
    T.StructField("m", _L, True),
    T.StructField("cu", _D, True),
    T.StructField("cs", _D, True),
    T.StructField("l", T.ArrayType(_L, True), True),
    T.StructField("lb", T.ArrayType(_L, True), True),
]
#: The v2 record schema (what a bare scan of v2 files is given).
STATS_SCHEMA_V2 = T.StructType([T.StructField("v", _L, True)] + V2_FIELDS)

#: What from_json is given: both versions' fields plus the corrupt-record column.
PARSE_SCHEMA = T.StructType(STATS_SCHEMA.fields + V2_FIELDS + [T.StructField(CORRUPT_COLUMN, _S, True)])

JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}

#: Columns of the flattened "sample" rows every later stage works on.
SAMPLE_COLUMNS = (
    ["node", "addr", "worker", "pid", "ts", "uptime_s", "v", "commands"]
    + list(JOB_COUNTERS) + list(GAUGES)
    + ["top_queues", "qmap", "bus_in", "bus_out", "rss", "cpu_user", "cpu_sys", "lat_bounds", "lat_counts"]
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
              .when(F.coalesce(F.col("j.ts"), F.col("j.t")).isNull()
                    | F.coalesce(F.col("j.node"), F.col("j.n")).isNull()
                    | F.coalesce(F.col("j.worker"), F.col("j.w")).isNull(), F.lit("missing")))
    out = [_flat(n) for n in SAMPLE_COLUMNS]
    out.append(reason.alias("bad_reason"))
    out.append(F.when(reason.isNotNull(), F.substring(F.col("_line"), 1, 500)).alias("line"))
    if file_col is not None:
        out.append(F.col("file") if file_for_all else F.when(reason.isNotNull(), F.col("file")).alias("file"))
    return df.select(*out)


def _empty_map() -> Column:
    return F.map_from_arrays(F.array().cast("array<string>"), F.array().cast("array<bigint>"))


_V2_SCALARS = {"ts": "t", "node": "n", "addr": "a", "worker": "w", "pid": "p", "uptime_s": "up"}


def _v1(name: str) -> Column:
    j = F.col("j")
    if name in JOB_COUNTERS:
        return j.getField("jobs").getField(name)
    if name in GAUGES:
        return j.getField("gauges").getField(name)
    if name == "bus_in":
        return j.getField("bus").getField("in")
    if name == "bus_out":
        return j.getField("bus").getField("out")
    if name == "lat_bounds":
        return j.getField("latency_us").getField("bounds")
    if name == "lat_counts":
        return j.getField("latency_us").getField("counts")
    return j.getField(name)


def _v2(name: str) -> Column:
    """A v2 line's value for a flat sample column: what v2 leaves out counts as zero / empty."""
    j = F.col("j")
    zero = F.lit(0).cast("long")
    if name in _V2_SCALARS:
        return j.getField(_V2_SCALARS[name])
    if name in JOB_COUNTERS:
        return F.coalesce(j.getField("j").getField(V2_JOBS[name]), zero)
    if name in GAUGES:
        return F.coalesce(j.getField("g").getField(V2_GAUGES[name]), zero)
    if name in ("commands", "bus_in", "bus_out"):
        return F.coalesce(j.getField({"commands": "c", "bus_in": "bi", "bus_out": "bo"}[name]), _empty_map())
    if name == "rss":
        return j.getField("m")
    if name in ("cpu_user", "cpu_sys"):
        return F.coalesce(j.getField({"cpu_user": "cu", "cpu_sys": "cs"}[name]), F.lit(0.0))
    if name == "lat_bounds":
        return F.coalesce(j.getField("lb"), F.array(*[F.lit(b).cast("long") for b in V2_LATENCY_BOUNDS]))
    if name == "lat_counts":
        # trailing zeros were trimmed: pad to len(bounds) + 1 so consecutive samples compare bucket by bucket
        counts = F.coalesce(j.getField("l"), F.array().cast("array<bigint>"))
        nb = F.coalesce(F.size(j.getField("lb")), F.lit(len(V2_LATENCY_BOUNDS))) + 1
        return F.concat(counts, F.array_repeat(F.lit(0).cast("long"), F.greatest(nb - F.size(counts), F.lit(0))))
    return None


def _flat(name: str) -> Column:
    if name == "top_queues":
        return F.col("j").getField("top_queues").alias(name)
    if name == "qmap":                  # v2 top queues: name -> [len, in, out, nacks, additional]
        return F.col("j").getField("q").alias(name)
    if name == "v":
        return F.col("j").getField("v").alias(name)
    v2 = _v2(name)
    v1 = _v1(name)
    if name in _V2_SCALARS:             # both spellings: whichever the line has
        return F.coalesce(v1, v2).alias(name)
    return F.when(F.coalesce(F.col("j").getField("v"), F.lit(1)) >= 2, v2).otherwise(v1).alias(name)
