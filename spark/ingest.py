"""disque-stats-ingest: turn Disque per-worker stats logs into Parquet tables and a report.

    disque-stats-ingest --input DIR_OR_GLOB --output DIR [--master URL] [--follow]
    spark-submit spark/ingest.py --input DIR_OR_GLOB --output DIR

From Python::

    from disque_spark import ingest
    result = ingest.run("/var/log/disque/", "/tmp/stats-out")      # batch
    result.rows_read, result.bad_lines, result.tables["worker_rates"], result.report_path

See spark/README.md for the input schema, the tables and the --follow semantics.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a script (spark-submit spark/ingest.py): load the package
    import importlib.util

    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        sys.path.pop(0)  # do not let spark/*.py shadow top-level modules
    _spec = importlib.util.spec_from_file_location(
        "disque_spark", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here])
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["disque_spark"] = _mod
    _spec.loader.exec_module(_mod)

import argparse
import json
import time
from dataclasses import asdict, dataclass, field

from disque_spark import storage
from disque_spark.progress import Progress, fmt_int, human_bytes

TABLES = ("worker_rates", "node_rates", "queue_backlog", "summary", "queue_summary", "bad_lines")
PARTITIONED = ("worker_rates", "node_rates", "queue_backlog")
STAGING = "_staging"
FOLLOW_DIR = "_follow"
REPORT_DIR = "report"
PARTITION_BYTES = 64 << 20
WRITE_CONF = {"spark.sql.optimizer.plannedWrite.enabled": "false", "spark.sql.maxConcurrentOutputFileWriters": "16"}


class IngestError(Exception):
    """A user-facing error (bad arguments, no input): reported in one line."""


@dataclass
class IngestResult:
    input: str
    output: str
    master: str = ""
    mode: str = "batch"
    files: int | None = 0
    input_bytes: int | None = 0
    new_bytes: int | None = None       # bytes read by this run (incremental: only what was new)
    rows_read: int = 0                 # non-blank input lines
    bad_lines: int = 0
    bad_by_reason: dict = field(default_factory=dict)
    bad_examples: list = field(default_factory=list)   # [(file, reason, line)], first few
    rows_ok: int = 0                   # good samples
    late_rows: int = 0                 # --follow: samples older than what was already processed
    nodes: int = 0
    workers: int = 0
    restarts: int = 0
    start_ts: float | None = None
    end_ts: float | None = None
    bucket_s: float | None = None
    batches: int = 0                   # --follow micro-batches processed
    tables: dict = field(default_factory=dict)        # table -> rows
    table_paths: dict = field(default_factory=dict)   # table -> path
    report_path: str | None = None
    stages: list = field(default_factory=list)        # [(stage, seconds)]
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def summary_lines(self) -> list[str]:
        lines = [
            f"mode {self.mode}, master {self.master}, {self.seconds:.1f}s",
            f"input: {self.input} ({fmt_int(self.files)} files, {human_bytes(self.input_bytes)})",
            f"rows in: {fmt_int(self.rows_read)} lines, {fmt_int(self.rows_ok)} good, "
            f"{fmt_int(self.bad_lines)} bad" + (f" {self.bad_by_reason}" if self.bad_lines else "")
            + (f", {fmt_int(self.late_rows)} late (dropped)" if self.late_rows else ""),
            f"nodes {self.nodes}, workers {self.workers}, restarts seen {self.restarts}"
            + (f", bucket {self.bucket_s:g}s" if self.bucket_s else ""),
            "rows out: " + (", ".join(f"{t} {fmt_int(n)}" for t, n in self.tables.items()) or "none"),
            f"tables under: {self.output}",
        ]
        if self.report_path:
            lines.append(f"report: {self.report_path}")
        if self.stages:
            lines.append("stages: " + ", ".join(f"{n} {s:.1f}s" for n, s in self.stages))
        return lines


# ---------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------

class BatchPipeline:
    def __init__(self, spark, input_path: str, output: str, progress: Progress, result: IngestResult,
                 first_sample: str = "start", bucket_s: float | None = None, report: bool = True,
                 keep_staging: bool = False, full: bool = False):
        self.spark = spark
        self.full = full
        self.meta = None
        self.incremental = False
        self.node_t0 = {}
        self._new_node_min = {}
        self.new_manifest = None
        self.segment_names = {}
        self.input = input_path
        self.output = output
        self.progress = progress
        self.result = result
        self.first_sample = first_sample
        self.bucket_s = bucket_s
        self.report = report
        self.keep_staging = keep_staging
        self.cached = None          # the parsed samples, partitioned and sorted (see _run)
        self.observed = {}          # table -> metrics observed while it was written

    def path(self, *parts: str) -> str:
        return storage.join(self.output, *parts)

    def run(self) -> IngestResult:
        try:
            return self._run()
        finally:
            if self.cached is not None:
                self.cached.unpersist()
                self.cached = None

    def _partitions(self, nbytes: int | None) -> int:
        """Partitions of the parsed samples: enough for every core twice (a straggler's
        share stays small), more when the input is large (~64 MB of lines each, so that a
        task's sort stays well inside its share of a 2g heap)."""
        cores = max(1, self.spark.sparkContext.defaultParallelism)
        return max(2 * cores, -(-(nbytes or 0) // PARTITION_BYTES))

    def _run(self) -> IngestResult:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from disque_spark import increment, schema, transform

        spark, res, pr = self.spark, self.result, self.progress
        # partitioned writes without a sort of every row by date first: concurrent writers
        # (a run covers a few dates, so a task keeps a few files open)
        for key, value in WRITE_CONF.items():
            spark.conf.set(key, value)

        with pr.stage("list input") as st:
            spark_paths, files, total = storage.list_input(self.input)
            if files is not None and not files:
                raise IngestError(f"no input files match {self.input!r}"
                                  + (f" (a directory means {storage.DIR_PATTERN} under it)"
                                     if os.path.isdir(storage.local_path(self.input)) else ""))
            res.files = len(files) if files is not None else None
            res.input_bytes = total
            # incremental needs inodes (a local input) and a local state directory
            can_increment = files is not None and storage.is_local(self.output)
            state_dir = os.path.join(storage.local_path(self.output), increment.STATE_DIR) if can_increment else None
            meta = None if self.full or not can_increment else self._load_meta(state_dir)
            self.meta = meta
            self.incremental = meta is not None
            if meta is None:
                for name in TABLES + (STAGING, FOLLOW_DIR, REPORT_DIR, increment.STATE_DIR):
                    storage.delete(spark, self.path(name))
            if files is not None:
                manifest = increment.load_manifest(state_dir) if meta is not None else None
                segments, self.new_manifest = increment.plan(files, manifest)
                seg_dir = os.path.join(storage.local_path(self.output), increment.STATE_DIR, increment.SEGMENTS)
                spark_paths = increment.materialize(segments, seg_dir)
                res.new_bytes = sum(s.end - s.start for s in segments)
                self.segment_names = {p: s.path for p, s in zip(spark_paths, segments) if not s.whole}
            else:
                segments, self.new_manifest, res.new_bytes, self.segment_names = None, None, None, {}
            res.mode = "incremental" if meta is not None else "batch"
            st.detail = (f"{fmt_int(res.files)} files, {human_bytes(total)}" if files is not None
                         else f"{self.input} (listed by Spark)")
            if meta is not None:
                st.detail += f"; incremental: {len(segments)} new parts, {human_bytes(res.new_bytes)} new"
        if segments is not None and not spark_paths:
            pr.say("nothing new since the last run")
            self._apply_meta_counts(meta)
            self._count_tables()
            return res

        with pr.stage("parse + validate (explicit schema)") as st:
            reader = spark.read.option("recursiveFileLookup", "true")
            if files is None:
                reader = reader.option("pathGlobFilter", storage.DIR_PATTERN) if not any(
                    c in self.input for c in "*?[{") else reader
            text = reader.text(spark_paths)
            file_col = F.col("_metadata.file_path")
            for seg, orig in self.segment_names.items():     # a copied part reports its file
                file_col = F.when(F.col("_metadata.file_path").endswith(os.path.basename(seg)),
                                  F.lit(orig)).otherwise(file_col)
            text = text.select("value", file_col.alias("_file"))
            parsed = schema.parse_lines(text, file_col="_file")
            # The one shuffle of the run: every worker's samples into one partition, in time
            # order, persisted on local disk (serialized: held in memory, a full day ran a 2g
            # driver out of heap while the cache was built). Both windows below read this layout
            # as it is (no further exchange or sort), and every table derives from it, so the
            # input is read and parsed once (docs/spark.md#how-the-job-is-laid-out).
            parts = self._partitions(res.new_bytes if res.new_bytes is not None else res.input_bytes)
            staged = (parsed.repartition(parts, "node", "worker").sortWithinPartitions("node", "worker", "ts")
                      .persist(StorageLevel.DISK_ONLY))
            self.cached = staged
            good = F.col("bad_reason").isNull()
            # one small group per (node, worker) and per bad reason: summed up here
            groups = staged.groupBy(
                "bad_reason", F.when(good, F.col("node")).alias("n"), F.when(good, F.col("worker")).alias("w")
            ).agg(F.count(F.lit(1)).alias("rows"), F.max(F.size("lat_counts")).alias("k"),
                  F.min("ts").alias("t0")).collect()
            rows = sum(int(g["rows"]) for g in groups)
            bad_by_reason = {}
            for g in groups:
                if g["bad_reason"] is not None:
                    bad_by_reason[g["bad_reason"]] = bad_by_reason.get(g["bad_reason"], 0) + int(g["rows"])
            ok = [g for g in groups if g["bad_reason"] is None]
            k = max([int(g["k"]) for g in ok if g["k"] is not None and g["k"] > 0] or [0])
            counts = self._counts(rows, bad_by_reason, k)
            nbad = sum(bad_by_reason.values())
            if nbad:
                bad = staged.where(~good).select("file", "bad_reason", "line")
                self._write("bad_lines", bad, partitioned=False, append=meta is not None)
                res.bad_examples = [tuple(r) for r in bad.limit(5).collect()]
            if self.keep_staging:
                staged.write.mode("overwrite").parquet(self.path(STAGING, "samples"))
            k = counts["k"]
            st.detail = (f"rows read {fmt_int(rows)}, bad lines {fmt_int(nbad)}"
                         + (f" {bad_by_reason}" if nbad else "") + f", {len(ok)} workers, {parts} partitions")

        samples = staged.where(good).drop("bad_reason", "line", "file")
        wcols = [c for c in samples.columns if c not in ("top_queues", "qmap")]
        tail_dir = self.state_path("worker_tail")
        qtail_dir = self.state_path("queue_tail")

        with pr.stage("worker_rates (window per node/worker)") as st:
            prev = None
            if meta is not None and storage.exists(spark, tail_dir):
                # the previous run's last sample of every worker: the first delta of each worker
                # is taken against it; samples not newer than it are late (dropped, counted)
                tail = spark.read.parquet(tail_dir).select(*wcols)
                marks = tail.select("node", "worker", F.col("ts").alias("_tail_ts"),
                                    transform.prev_struct(tail, transform.WORKER_PREV_COLS).alias("_prev"))
                joined = samples.join(F.broadcast(marks), ["node", "worker"], "left")
                late_cond = F.coalesce(F.col("ts") <= F.col("_tail_ts"), F.lit(False))
                late = joined.where(late_cond).count()
                samples = joined.where(~late_cond).drop("_tail_ts")
                prev = "_prev"
            else:
                late, tail = 0, None
            counts["late"] = counts.get("late", 0) + late
            # nodes first seen in this run anchor their node_rates grid at their first sample
            self._new_node_min = {}
            for g in ok:
                if g["t0"] is not None:
                    self._new_node_min[g["n"]] = min(float(g["t0"]), self._new_node_min.get(g["n"], float("inf")))
            wr = transform.worker_rates(samples.select(*wcols, *([prev] if prev else [])), self.first_sample, k,
                                        prev=prev)
            n = self._write("worker_rates", wr, append=meta is not None,
                            metrics=[F.min("ts").alias("start_ts"), F.max("ts").alias("end_ts")])
            st.detail = f"{fmt_int(n)} rows" + (f", {fmt_int(late)} late rows dropped" if late else "")

        with pr.stage("queue_backlog (window per node/worker/queue)") as st:
            qs = transform.queue_samples(samples.select("node", "worker", "pid", "ts", "uptime_s", "top_queues",
                                                        "qmap"))
            if meta is not None and storage.exists(spark, qtail_dir):
                qtail = spark.read.parquet(qtail_dir)
                qmarks = qtail.select("node", "worker", "queue",
                                      transform.prev_struct(qtail, transform.QUEUE_PREV_COLS).alias("_qprev"))
                qb = transform.queue_backlog(qs.join(F.broadcast(qmarks), ["node", "worker", "queue"], "left"),
                                             self.first_sample, prev="_qprev")
            else:
                qtail = None
                qb = transform.queue_backlog(qs, self.first_sample)
            n = self._write("queue_backlog", qb, append=meta is not None)
            st.detail = f"{fmt_int(n)} rows"
        # what the state keeps: the last sample of every worker and queue, old ones included
        wsrc = samples.select(*wcols) if tail is None else tail.unionByName(samples.select(*wcols))
        qsrc = qs if qtail is None else qtail.unionByName(qs)

        with pr.stage("node_rates (per node and time bucket)") as st:
            wr_all = spark.read.parquet(self.path("worker_rates"))
            bucket = self.bucket_s or (meta or {}).get("bucket_s") or detect_bucket(wr_all)
            res.bucket_s = bucket
            n = self._node_rates(wr_all, bucket, k, incremental=meta is not None)
            st.detail = f"{fmt_int(n)} rows, bucket {bucket:g}s"

        with pr.stage("summary + answers") as st:
            nr = spark.read.parquet(self.path("node_rates"))
            n1 = self._write("summary", transform.summary(wr_all, nr, bucket, k), partitioned=False)
            qb_all = spark.read.parquet(self.path("queue_backlog"))
            n2 = self._write("queue_summary", transform.queue_summary(qb_all), partitioned=False)
            st.detail = f"summary {n1} rows, queue_summary {n2} rows"

        if state_dir is not None:
            with pr.stage("state for the next run (last samples)") as st:
                self._save_state(wsrc, qsrc, state_dir, counts, bucket)
                st.detail = self.state_path()
        self._apply_meta_counts({"counts": counts, "bucket_s": bucket})
        self._count_tables()
        if not self.keep_staging:
            storage.delete(spark, self.path(STAGING))

        if self.report:
            with pr.stage("report (HTML + PNG charts)") as st:
                res.report_path = write_report(spark, self.output, res)
                st.detail = res.report_path
        return res

    # -- incremental state ------------------------------------------------------------
    def state_path(self, *parts: str) -> str:
        from disque_spark.increment import STATE_DIR
        run = (self.meta or {}).get("run", 0)
        return self.path(STATE_DIR, f"run-{run:06d}", *parts)

    def _load_meta(self, state_dir: str) -> dict | None:
        from disque_spark import increment
        p = os.path.join(state_dir, "meta.json")
        if not os.path.exists(p) or increment.load_manifest(state_dir) is None:
            return None
        with open(p) as f:
            meta = json.load(f)
        if meta.get("first_sample") != self.first_sample or (self.bucket_s and meta.get("bucket_s") != self.bucket_s):
            self.progress.say("options differ from the previous run: full rebuild")
            return None
        return meta

    def _counts(self, rows: int, bad_by_reason: dict, k: int) -> dict:
        c = dict((self.meta or {}).get("counts") or {"rows": 0, "bad": {}, "late": 0})
        c["bad"] = dict(c["bad"])
        c["rows"] += rows
        for r, n in bad_by_reason.items():
            c["bad"][r] = c["bad"].get(r, 0) + n
        c["k"] = max(int(c.get("k") or 0), k)
        return c

    def _save_state(self, wsrc, qsrc, state_dir: str, counts: dict, bucket: float) -> None:
        """The last sample of every worker and queue (tail included), then meta + manifest."""
        from pyspark.sql import functions as F

        from disque_spark import increment
        old = self.state_path()
        meta = {"run": (self.meta or {}).get("run", -1) + 1, "counts": counts, "bucket_s": bucket,
                "first_sample": self.first_sample, "nodes": self.node_t0}
        new_meta_holder, self.meta = self.meta, meta
        try:
            for src, keys, name in ((wsrc, ["node", "worker"], "worker_tail"),
                                    (qsrc, ["node", "worker", "queue"], "queue_tail")):
                cols = [c for c in src.columns if c != "_tail"]
                last = src.groupBy(*keys).agg(F.max_by(F.struct(*cols), F.col("ts")).alias("_s")).select("_s.*")
                last.write.mode("overwrite").parquet(self.state_path(name))
        except Exception:
            self.meta = new_meta_holder
            raise
        with open(os.path.join(state_dir, "meta.json.tmp"), "w") as f:
            json.dump(meta, f)
        os.replace(os.path.join(state_dir, "meta.json.tmp"), os.path.join(state_dir, "meta.json"))
        increment.save_manifest(state_dir, self.new_manifest)
        if new_meta_holder is not None:
            storage.delete(self.spark, old)
        storage.delete(self.spark, storage.join(state_dir, increment.SEGMENTS))

    def _node_rates(self, wr_all, bucket: float, k: int, incremental: bool) -> int:
        """Full: every bucket. Incremental: the days the new samples touch are recomputed from
        worker_rates (a bucket at the boundary gets its samples from both runs) and replace
        those date partitions; earlier days stay as they are."""
        from pyspark.sql import functions as F

        from disque_spark import transform
        spark = self.spark
        known = dict((self.meta or {}).get("nodes") or {})
        if not incremental:
            # each node's first sample is known from the parse stage's counts: no pass over
            # worker_rates to find it
            self.node_t0 = dict(self._new_node_min)
            grid = spark.createDataFrame(sorted(self.node_t0.items()), "node string, t0 double")
            return self._write("node_rates", transform.node_rates(wr_all, bucket, grid, k))
        # nodes first seen now anchor their grid at their first sample
        for node, t0 in self._new_node_min.items():
            known.setdefault(node, t0)
        self.node_t0 = known
        if not self._new_node_min:
            return self._count("node_rates")
        lo = min(self._new_node_min.values())
        day = int((lo - bucket) // 86400)
        grid = spark.createDataFrame(sorted(known.items()), "node string, t0 double")
        src = wr_all.where((F.col("date") >= transform.date_of(F.lit(day * 86400.0 - 86400.0)))
                           & (F.col("ts") >= day * 86400.0 - bucket))
        nr = transform.node_rates(src, bucket, grid, k).where(
            F.col("date") >= transform.date_of(F.lit(day * 86400.0)))
        nr.write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy("date").parquet(
            self.path("node_rates"))
        return self._count("node_rates")

    def _apply_meta_counts(self, meta) -> None:
        res = self.result
        c = (meta or {}).get("counts") or {}
        res.rows_read = int(c.get("rows", 0))
        res.bad_by_reason = dict(c.get("bad", {}))
        res.bad_lines = sum(res.bad_by_reason.values())
        res.rows_ok = res.rows_read - res.bad_lines
        res.late_rows = int(c.get("late", 0))
        res.bucket_s = res.bucket_s or (meta or {}).get("bucket_s")

    def _count_tables(self) -> None:
        from pyspark.sql import functions as F
        spark, res = self.spark, self.result
        for t in TABLES:
            p = self.path(t)
            if t not in res.tables and storage.exists(spark, p):
                res.tables[t] = spark.read.parquet(p).count()
                res.table_paths[t] = p
        if storage.exists(spark, self.path("summary")):
            rows = spark.read.parquet(self.path("summary")).select(
                "node", "workers", "restarts", "start_ts", "end_ts").collect()
            tot = [r for r in rows if r["node"] == "TOTAL"]
            res.nodes = len(rows) - len(tot)
            if tot:
                res.workers, res.restarts = int(tot[0]["workers"] or 0), int(tot[0]["restarts"] or 0)
        seen = self.observed.get("worker_rates")
        if seen is not None and not self.incremental:      # this run wrote the whole table
            res.start_ts, res.end_ts = seen["start_ts"], seen["end_ts"]
        elif storage.exists(spark, self.path("worker_rates")):
            agg = spark.read.parquet(self.path("worker_rates")).agg(F.min("ts"), F.max("ts")).first()
            res.start_ts, res.end_ts = agg[0], agg[1]

    def _write(self, name: str, df, partitioned: bool | None = None, append: bool = False,
               metrics: list | None = None) -> int:
        """Write a table (replace it, or append to it); returns the table's row count.

        The rows written (and ``metrics``, kept in self.observed[name]) are observed while
        the table is written, so a replaced table is not read back to be counted."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        path = self.path(name)
        obs = Observation(name)
        df = df.observe(obs, F.count(F.lit(1)).alias("rows"), *(metrics or []))
        w = df.write.mode("append" if append else "overwrite")
        if partitioned is None:
            partitioned = name in PARTITIONED
        if partitioned:
            w = w.partitionBy("date")
        w.parquet(path)
        self.observed[name] = dict(obs.get)
        if append:
            return self._count(name)
        n = int(self.observed[name]["rows"])
        self.result.tables[name] = n
        self.result.table_paths[name] = path
        return n

    def _count(self, name: str) -> int:
        path = self.path(name)
        n = self.spark.read.parquet(path).count() if storage.exists(self.spark, path) else 0
        self.result.tables[name] = n
        self.result.table_paths[name] = path
        return n


def detect_bucket(wr, default: float | None = 1.0) -> float | None:
    """The typical sampling interval: median interval of non-fresh samples, in ms resolution
    (``default`` when no worker has two consecutive samples)."""
    from pyspark.sql import functions as F
    v = (wr.where(~F.col("first_sample") & ~F.col("restart") & (F.col("interval_s") > 0))
         .agg(F.percentile_approx("interval_s", 0.5, 10000)).first()[0])
    if not v or v <= 0:
        return default
    return max(round(float(v), 3), 0.001)


def write_report(spark, output: str, result: IngestResult) -> str:
    from disque_spark import report
    if storage.is_local(output):
        out = os.path.join(storage.local_path(output), REPORT_DIR)
        return report.make_report(spark, output, out, result)
    import tempfile
    tmp = tempfile.mkdtemp(prefix="disque-report-")
    report.make_report(spark, output, tmp, result)
    dest = storage.join(output, REPORT_DIR)
    storage.copy_from_local(spark, tmp, dest)
    return storage.join(dest, "index.html")


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------

def run(input: str, output: str, master: str | None = None, follow: bool = False, report: bool = True,
        spark=None, progress: bool | Progress = True, first_sample: str = "start",
        bucket_s: float | None = None, driver_memory: str | None = "2g", keep_staging: bool = False,
        max_files_per_trigger: int = 10, trigger_seconds: float = 2.0, idle_timeout: float | None = None,
        max_seconds: float | None = None, stop_event=None, report_every: float = 60.0,
        spark_conf: dict | None = None, full: bool = False) -> IngestResult:
    """Run the pipeline; returns an IngestResult with the counts.

    ``spark``: an existing SparkSession to use (it is left running); otherwise one is
    created (``master`` or ``local[*]``) and stopped at the end.
    ``follow``: keep consuming new files (Structured Streaming) until ``stop_event`` is
    set, ``idle_timeout`` seconds pass without new input, ``max_seconds`` elapse, or
    Ctrl-C. See follow.py.
    ``full``: rebuild every table from all the input; by default a batch run over an output
    that a previous run left state in (OUT/_state/) processes only the new input.
    """
    if first_sample not in ("start", "baseline"):
        raise IngestError("first_sample must be 'start' or 'baseline'")
    if isinstance(progress, Progress):
        pr = progress
    else:
        pr = Progress(enabled=bool(progress), total_stages=None if follow else (8 if report else 7))
    t0 = time.monotonic()
    own = spark is None
    if own:
        from disque_spark.session import make_session
        pr.say(f"starting Spark ({master or 'local[*]'}) ...")
        spark = make_session(master=master, driver_memory=driver_memory, conf=spark_conf)
    pr.spark = spark
    res = IngestResult(input=input, output=output, master=spark.sparkContext.master,
                       mode="follow" if follow else "batch")
    try:
        if follow:
            from disque_spark.follow import Follower
            f = Follower(spark, input, output, progress=pr, result=res, first_sample=first_sample,
                         bucket_s=bucket_s, report=report, max_files_per_trigger=max_files_per_trigger,
                         trigger_seconds=trigger_seconds, report_every=report_every)
            f.start()
            f.wait(stop_event=stop_event, idle_timeout=idle_timeout, max_seconds=max_seconds)
            f.stop()
        else:
            BatchPipeline(spark, input, output, pr, res, first_sample=first_sample, bucket_s=bucket_s,
                          report=report, keep_staging=keep_staging, full=full).run()
    finally:
        res.stages = list(pr.done)
        res.seconds = time.monotonic() - t0
        if own:
            spark.stop()
    return res


def start_follow(input: str, output: str, spark, progress: bool | Progress = True, first_sample: str = "start",
                 bucket_s: float | None = None, report: bool = True, max_files_per_trigger: int = 10,
                 trigger_seconds: float = 2.0, report_every: float = 60.0):
    """Start --follow on an existing SparkSession and return the running Follower.

    Call ``.stop()`` on it to end (flushes the last node buckets, refreshes summary and
    report) and get the IngestResult; ``.result`` has the running counts meanwhile.
    """
    from disque_spark.follow import Follower
    pr = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    pr.spark = spark
    res = IngestResult(input=input, output=output, master=spark.sparkContext.master, mode="follow")
    return Follower(spark, input, output, progress=pr, result=res, first_sample=first_sample,
                    bucket_s=bucket_s, report=report, max_files_per_trigger=max_files_per_trigger,
                    trigger_seconds=trigger_seconds, report_every=report_every).start()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="disque-stats-ingest",
        description="Ingest Disque stats logs (JSON lines, schema v1 or v2) into Parquet tables "
                    "(worker_rates, node_rates, queue_backlog, summary, queue_summary) and an HTML report.")
    p.add_argument("--input", required=True,
                   help="a directory (every *.jsonl* file under it, rotated ones included) or a glob")
    p.add_argument("--output", required=True, help="output directory for the tables and report/")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: what spark-submit set, else local[*])")
    p.add_argument("--follow", action="store_true",
                   help="keep running: Structured Streaming over the input, updating the tables")
    p.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                   help="write report/index.html with PNG charts (default: on)")
    p.add_argument("--first-sample", choices=("start", "baseline"), default="start",
                   help="a worker's first sample counts from the process start (default) or is "
                        "only a baseline")
    p.add_argument("--bucket", type=float, default=None, metavar="SECONDS",
                   help="node_rates time bucket (default: the median sampling interval)")
    p.add_argument("--driver-memory", default="2g", help="driver JVM heap for a local master (default 2g)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark config")
    p.add_argument("--full", action="store_true",
                   help="rebuild every table from all the input (default: a re-run over the same --output "
                        "processes only the lines added since the last run)")
    p.add_argument("--keep-staging", action="store_true", help="keep the parsed samples (_staging/)")
    p.add_argument("--max-files-per-trigger", type=int, default=10, help="--follow: files per micro-batch")
    p.add_argument("--trigger", type=float, default=2.0, metavar="SECONDS",
                   help="--follow: micro-batch interval (default 2s)")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="SECONDS",
                   help="--follow: stop after this long without new input (default: run until Ctrl-C)")
    p.add_argument("--report-every", type=float, default=60.0, metavar="SECONDS",
                   help="--follow: refresh the report at most this often (default 60s)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result counts as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


MISSING_EXTRA = ("disque-stats-ingest: {what} is not installed; install the spark extra: "
                 "pip install 'disque-py[spark]'")


def missing_extra() -> str | None:
    """The one-line message when the `spark` extra (pyspark, matplotlib) is absent, else None."""
    import importlib
    for mod, what in (("pyspark", "pyspark"), ("matplotlib", "matplotlib")):
        try:
            importlib.import_module(mod)
        except ImportError:
            return MISSING_EXTRA.format(what=what)
    return None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # the console script is installed without the extra too: one line, no traceback
    problem = missing_extra()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    conf = {}
    for kv in args.conf:
        if "=" not in kv:
            print(f"disque-stats-ingest: --conf wants KEY=VALUE, got {kv!r}", file=sys.stderr)
            return 2
        k, v = kv.split("=", 1)
        conf[k] = v
    try:
        res = run(args.input, args.output, master=args.master, follow=args.follow, report=args.report,
                  progress=not args.quiet, first_sample=args.first_sample, bucket_s=args.bucket,
                  driver_memory=args.driver_memory, keep_staging=args.keep_staging,
                  max_files_per_trigger=args.max_files_per_trigger, trigger_seconds=args.trigger,
                  idle_timeout=args.idle_timeout, report_every=args.report_every, spark_conf=conf,
                  full=args.full)
    except IngestError as e:
        print(f"disque-stats-ingest: {e}", file=sys.stderr)
        return 2
    print("disque-stats-ingest: done")
    for line in res.summary_lines():
        print("  " + line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res.to_dict(), f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
