"""A batch run of disque-stats-ingest (no --follow): parse once, then every table from columns.

The lines a run reads are parsed and validated exactly once, into the samples table
(samples.py: Parquet partitioned by node and hour, kept under OUT/samples/). Every output
table is then computed from that table, never from the text again: worker_rates and
queue_backlog from the run's samples (one window each, over only the columns they need),
node_rates and summary from worker_rates, queue_summary from queue_backlog, bad_lines from
the samples' null partition. The state the next run needs (each worker's and queue's last
sample, each new node's first sample) is gathered while the windows run
(transform._with_edges), not by another pass. See docs/spark.md#how-the-job-is-laid-out.

An incremental run appends the new lines' samples under a new run number and reads back only
those, plus the saved last sample of every worker and queue for the rates at the boundary
(spark/increment.py for which bytes are new; the state under OUT/_state/).
"""
from __future__ import annotations

import json
import os

from disque_spark import samples, storage
from disque_spark.progress import Progress, fmt_int, human_bytes

TABLES = ("worker_rates", "node_rates", "queue_backlog", "summary", "queue_summary", "bad_lines")
PARTITIONED = ("worker_rates", "node_rates", "queue_backlog")
STAGING = "_staging"
FOLLOW_DIR = "_follow"
REPORT_DIR = "report"
PARTITION_BYTES = 64 << 20
WRITE_CONF = {"spark.sql.optimizer.plannedWrite.enabled": "false", "spark.sql.maxConcurrentOutputFileWriters": "16"}
QUEUE_INPUT = ["node", "worker", "pid", "ts", "uptime_s", "top_queues", "qmap"]
#: worker_rates rows kept per worker in the state: the next run's boundary node_rates buckets
#: are recomputed from them instead of a scan of worker_rates (spark/buckets.py)
RECENT_ROWS = 64


class IngestError(Exception):
    """A user-facing error (bad arguments, no input): reported in one line."""


def bucket_from_median(v, default: float | None = 1.0) -> float | None:
    """The node_rates bucket from the median sampling interval (ms resolution)."""
    if not v or v <= 0:
        return default
    return max(round(float(v), 3), 0.001)


class BatchPipeline:
    def __init__(self, spark, input_path: str, output: str, progress: Progress, result,
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
        self.keep_staging = keep_staging     # the samples are always kept now (OUT/samples/)
        self.observed = {}          # table -> metrics observed while it was written
        self.tails = {}             # state name -> (schema, {key: last row}) for the next run
        self.written = {}           # table -> the rows this run wrote to it (a DataFrame)
        self.totals = {}            # state name -> (schema, [partial totals]) for the next run
        self.recent = None          # (schema, rows): each worker's last worker_rates rows, saved
        self.recent_old = None      # (DataFrame, rows): the ones the previous run saved

    def path(self, *parts: str) -> str:
        return storage.join(self.output, *parts)

    def run(self):
        return self._run()

    def _partitions(self, nbytes: int | None) -> int:
        """Partitions of each window's shuffle: enough for every core twice (a straggler's
        share stays small), more when the input is large (~64 MB of lines each, so that a
        task's sort stays well inside its share of a 2g heap)."""
        cores = max(1, self.spark.sparkContext.defaultParallelism)
        return max(2 * cores, -(-(nbytes or 0) // PARTITION_BYTES))

    def _list_input(self):
        """Stage 1: the files, the state, and the new bytes. Returns (spark_paths, files)."""
        from disque_spark import increment
        spark, res = self.spark, self.result
        spark_paths, files, total = storage.list_input(self.input)
        if files is not None and not files:
            raise IngestError(f"no input files match {self.input!r}"
                              + (f" (a directory means {storage.DIR_PATTERN} under it)"
                                 if os.path.isdir(storage.local_path(self.input)) else ""))
        res.files = len(files) if files is not None else None
        res.input_bytes = total
        # incremental needs inodes (a local input) and a local state directory
        can_increment = files is not None and storage.is_local(self.output)
        self.state_dir = (os.path.join(storage.local_path(self.output), increment.STATE_DIR)
                          if can_increment else None)
        meta = None if self.full or not can_increment else self._load_meta(self.state_dir)
        self.meta = meta
        self.incremental = meta is not None
        if meta is None:
            for name in TABLES + (samples.SAMPLES, STAGING, FOLLOW_DIR, REPORT_DIR, increment.STATE_DIR):
                storage.delete(spark, self.path(name))
        self.segments = None
        if files is not None:
            manifest = increment.load_manifest(self.state_dir) if meta is not None else None
            self.segments, self.new_manifest = increment.plan(files, manifest)
            seg_dir = os.path.join(storage.local_path(self.output), increment.STATE_DIR, increment.SEGMENTS)
            spark_paths = increment.materialize(self.segments, seg_dir)
            res.new_bytes = sum(s.end - s.start for s in self.segments)
            self.segment_names = {p: s.path for p, s in zip(spark_paths, self.segments) if not s.whole}
        res.mode = "incremental" if meta is not None else "batch"
        return spark_paths, files

    def _run(self):
        from pyspark.sql import functions as F

        from disque_spark import partials, transform

        spark, res, pr = self.spark, self.result, self.progress
        # partitioned writes without a sort of every row by partition first: concurrent
        # writers (a task's rows fall in a few dates, or a few (node, hour) of the samples)
        for key, value in WRITE_CONF.items():
            spark.conf.set(key, value)

        with pr.stage("list input") as st:
            spark_paths, files = self._list_input()
            meta = self.meta
            st.detail = (f"{fmt_int(res.files)} files, {human_bytes(res.input_bytes)}" if files is not None
                         else f"{self.input} (listed by Spark)")
            if meta is not None:
                st.detail += (f"; incremental: {len(self.segments)} new parts, "
                              f"{human_bytes(res.new_bytes)} new")
        if self.segments is not None and not spark_paths:
            pr.say("nothing new since the last run")
            self._apply_meta_counts(meta)
            self._count_tables()
            return res

        run_no = (meta or {}).get("run", -1) + 1
        samples_dir = self.path(samples.SAMPLES)
        with pr.stage("parse + validate -> samples (once)") as st:
            opts = {"recursiveFileLookup": "true"}
            if files is None and not any(c in self.input for c in "*?[{"):
                opts["pathGlobFilter"] = storage.DIR_PATTERN
            before = storage.list_files(spark, samples_dir) if meta is not None else None
            seen = samples.write(spark, spark_paths, samples_dir, run_no, append=meta is not None,
                                 segment_names=self.segment_names, reader_options=opts)
            # an incremental run reads back the files it wrote, not the table's every footer
            new_files = sorted(storage.list_files(spark, samples_dir) - before) if before is not None else None
            counts = self._counts(seen["rows"], seen["bad"], seen["k"])
            k = counts["k"]
            nbad = sum(seen["bad"].values())
            if nbad:
                bad = samples.bad_lines(spark, samples_dir, run=run_no, files=new_files)
                self._write("bad_lines", bad, partitioned=False, append=meta is not None)
                res.bad_examples = [tuple(r) for r in bad.limit(5).collect()]
            st.detail = (f"rows read {fmt_int(seen['rows'])}, bad lines {fmt_int(nbad)}"
                         + (f" {seen['bad']}" if nbad else "") + f", samples under {samples_dir}")

        new = samples.read(spark, samples_dir, run=run_no if meta is not None else None, files=new_files)
        parts = self._partitions(res.new_bytes if res.new_bytes is not None else res.input_bytes)
        wcols = [c for c in new.columns if c not in ("top_queues", "qmap")]
        marks = None

        with pr.stage("worker_rates (window per node/worker)") as st:
            ws = new.select(*wcols).repartition(parts, "node", "worker")
            prev, late_obs, tail_dir = None, None, self.state_path("worker_tail")
            if meta is not None and storage.exists(spark, tail_dir):
                # the previous run's last sample of every worker: the first delta of each worker
                # is taken against it; samples not newer than it are late (dropped, counted)
                tail = spark.read.parquet(tail_dir).select(*wcols)
                marks = F.broadcast(tail.select(
                    "node", "worker", F.col("ts").alias("_tail_ts"),
                    transform.prev_struct(tail, transform.WORKER_PREV_COLS).alias("_prev")))
                ws, late_obs = self._drop_late(ws.join(marks, ["node", "worker"], "left"), count=True)
                prev = "_prev"
            self._merge_old_tail("worker_tail", tail_dir if prev else None, ws.select(*wcols).schema)
            edges = self._observation("worker_edges")
            wr = transform.worker_rates(ws.select(*wcols, *([prev] if prev else [])), self.first_sample, k,
                                        prev=prev, edges=edges, recent=RECENT_ROWS if self.state_dir else 0)
            metrics = [F.min("ts").alias("start_ts"), F.max("ts").alias("end_ts")]
            if "_recent" in wr.columns:     # each worker's last rows, for the next run's boundary
                metrics.append(F.collect_list(F.when(F.col("_recent"), F.struct(
                    *transform.NODE_RATES_INPUT))).alias("recent"))
            if not (self.bucket_s or (meta or {}).get("bucket_s")):   # the median interval, observed now
                metrics.append(F.percentile_approx(F.when(
                    ~F.col("first_sample") & ~F.col("restart") & (F.col("interval_s") > 0),
                    F.col("interval_s")), 0.5, 10000).alias("median_interval"))
            before = storage.list_files(spark, self.path("worker_rates")) if meta is not None else None
            n = self._write("worker_rates", wr, append=meta is not None, metrics=metrics, drop=["_recent"])
            self.written["worker_rates"] = self._new_rows("worker_rates", before)
            self.recent_old = self._recent_rows(
                self.written["worker_rates"].select(*transform.NODE_RATES_INPUT).schema,
                self.observed["worker_rates"].pop("recent", None))
            e = edges.get
            self._add_tail_rows("worker_tail", e["last"], ["node", "worker"])
            self._new_node_min = {}
            for r in e["first"]:
                self._new_node_min[r["node"]] = min(float(r["ts"]), self._new_node_min.get(r["node"], float("inf")))
            late = int(late_obs.get["late"]) if late_obs is not None else 0
            counts["late"] = counts.get("late", 0) + late
            st.detail = (f"{fmt_int(n)} rows, {len(e['last'])} workers, {parts} partitions"
                         + (f", {fmt_int(late)} late rows dropped" if late else ""))

        with pr.stage("queue_backlog (window per node/worker/queue)") as st:
            qin = new.select(*QUEUE_INPUT).repartition(parts, "node", "worker")
            if marks is not None:       # the worker's late samples are not the queues' either
                qin, _ = self._drop_late(qin.join(marks.drop("_prev"), ["node", "worker"], "left"))
            qs = transform.queue_samples(qin)
            qtail_dir, qprev = self.state_path("queue_tail"), None
            if meta is not None and storage.exists(spark, qtail_dir):
                qtail = spark.read.parquet(qtail_dir)
                qmarks = qtail.select("node", "worker", "queue",
                                      transform.prev_struct(qtail, transform.QUEUE_PREV_COLS).alias("_qprev"))
                qs, qprev = qs.join(F.broadcast(qmarks), ["node", "worker", "queue"], "left"), "_qprev"
            qcols = [c for c in qs.columns if c != "_qprev"]
            self._merge_old_tail("queue_tail", qtail_dir if qprev else None, qs.select(*qcols).schema)
            edges = self._observation("queue_edges")
            qb = transform.queue_backlog(qs, self.first_sample, prev=qprev, edges=edges)
            before = storage.list_files(spark, self.path("queue_backlog")) if meta is not None else None
            n = self._write("queue_backlog", qb, append=meta is not None)
            self.written["queue_backlog"] = self._new_rows("queue_backlog", before)
            self._add_tail_rows("queue_tail", edges.get["last"], ["node", "worker", "queue"])
            st.detail = f"{fmt_int(n)} rows"

        with pr.stage("node_rates (per node and time bucket)") as st:
            wr_all = spark.read.parquet(self.path("worker_rates"))
            bucket = self.bucket_s or (meta or {}).get("bucket_s")
            if not bucket:
                bucket = bucket_from_median(self.observed["worker_rates"].get("median_interval"))
            res.bucket_s = bucket
            # addresses and bounds as codes (a full run: of every row; an incremental run: of
            # the rows of the buckets it recomputes)
            codes = transform.Codes.of(wr_all) if meta is None else None
            n = self._node_rates(wr_all, bucket, k, codes, incremental=meta is not None)
            st.detail = f"{fmt_int(n)} rows, bucket {bucket:g}s"

        with pr.stage("summary + answers") as st:
            # from partial totals: a full run's of every row, an incremental run's of its new
            # rows merged with the saved ones (spark/partials.py)
            nr = spark.read.parquet(self.path("node_rates"))
            self._totals("worker_totals", partials.worker_partials(self.written["worker_rates"]),
                                  ("node", "worker", "addr"), partials.merge_worker)
            n1 = self._write("summary", transform.summary(self._frame("worker_totals"), nr, bucket, k, codes),
                             partitioned=False)
            start = self.observed["worker_rates"]["start_ts"]
            origin = float(int(start)) if start is not None else 0.0
            qparts = self._totals("queue_totals", partials.queue_partials(self.written["queue_backlog"], origin),
                                  partials.QUEUE_KEY, partials.merge_queue)
            qsum = transform.queue_summary(self._frame("queue_totals", partials.per_queue(qparts)))
            n2 = self._write("queue_summary", qsum, partitioned=False)
            st.detail = f"summary {n1} rows, queue_summary {n2} rows"

        if self.state_dir is not None:
            with pr.stage("state for the next run (last samples)") as st:
                self._save_state(self.state_dir, counts, bucket)
                st.detail = self.state_path()
        self._apply_meta_counts({"counts": counts, "bucket_s": bucket})
        self._count_tables()
        storage.delete(spark, self.path(STAGING))

        if self.report:
            with pr.stage("report (HTML + PNG charts)") as st:
                from disque_spark.ingest import write_report
                res.report_path = write_report(spark, self.output, res, self.totals["worker_totals"][1])
                st.detail = res.report_path
        return res

    # -- the windows' edges: late rows, last samples --------------------------------------
    @staticmethod
    def _observation(name: str):
        from pyspark.sql import Observation
        return Observation(name)

    def _drop_late(self, joined, count: bool = False):
        """Drop the rows not after their worker's saved last sample (``_tail_ts``); with
        ``count``, the number dropped is observed while the rows flow (no extra job)."""
        from pyspark.sql import functions as F
        late = F.coalesce(F.col("ts") <= F.col("_tail_ts"), F.lit(False))
        obs = None
        if count:
            obs = self._observation("late")
            joined = joined.observe(obs, F.count(F.when(late, 1)).alias("late"))
        return joined.where(~late).drop("_tail_ts"), obs

    def _merge_old_tail(self, name: str, old_dir: str | None, schema) -> None:
        """Start the next state's ``name`` from the saved one (a key with no new sample keeps
        its old last sample); a few rows per worker, held on the driver."""
        rows = {}
        if old_dir is not None:
            for r in self.spark.read.parquet(old_dir).select(*schema.names).collect():
                rows[(r["node"], r["worker"], r["queue"] if "queue" in schema.names else None)] = r
        self.tails[name] = (schema, rows)

    def _add_tail_rows(self, name: str, last_rows, keys: list[str]) -> None:
        schema, rows = self.tails[name]
        for r in last_rows:
            rows[(r["node"], r["worker"], r["queue"] if "queue" in keys else None)] = r


    # -- each worker's recent rows ----------------------------------------------------
    def _recent_rows(self, schema, new_rows):
        """Merge the saved recent worker_rates rows with this run's (each worker's last
        RECENT_ROWS, by time) into the state; returns the saved ones as (DataFrame, rows) for
        this run's boundary, or None when there are none."""
        if new_rows is None:
            return None
        old_dir = self.state_path("recent_rates")
        old, old_df = [], None
        if self.meta is not None and storage.exists(self.spark, old_dir):
            old_df = self.spark.read.schema(schema).parquet(old_dir)
            old = old_df.collect()
        by_worker = {}
        for r in list(old) + list(new_rows):
            by_worker.setdefault((r["node"], r["worker"]), []).append(tuple(r[c] for c in schema.names))
        ts = schema.names.index("ts")
        keep = [row for rows in by_worker.values() for row in sorted(rows, key=lambda x: x[ts])[-RECENT_ROWS:]]
        self.recent = (schema, keep)
        if self.meta is None or not old:
            return None
        return old_df, [r.asDict() for r in old]

    # -- the summaries' partial totals --------------------------------------------------
    def _new_rows(self, table: str, before: set | None):
        """The rows this run wrote to ``table``: all of it when it was replaced, else the
        files that were not there before the append."""
        path = self.path(table)
        if before is None:
            return self.spark.read.parquet(path)
        new = sorted(storage.list_files(self.spark, path) - before)
        schema = self.spark.read.parquet(path).schema
        if not new:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).option("basePath", path).parquet(*new)

    def _totals(self, name: str, new_parts, key, merge_fn) -> list:
        """This run's partial totals merged with the saved ones (an incremental run)."""
        from disque_spark import partials
        merged = {}
        old_dir = self.state_path(name)
        if self.meta is not None and storage.exists(self.spark, old_dir):
            partials.merge([r.asDict() for r in self.spark.read.parquet(old_dir).collect()], key, merge_fn, merged)
        partials.merge([r.asDict() for r in new_parts.collect()], key, merge_fn, merged)
        rows = list(merged.values())
        self.totals[name] = (new_parts.schema, rows)
        return rows

    def _frame(self, name: str, rows: list | None = None):
        from disque_spark import partials
        schema, saved = self.totals[name]
        return partials.frame(self.spark, schema, saved if rows is None else rows)

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

    def _save_state(self, state_dir: str, counts: dict, bucket: float) -> None:
        """The last sample of every worker and queue (gathered while the windows ran, merged
        with the saved ones), then meta + manifest."""
        from disque_spark import increment
        old = self.state_path()
        meta = {"run": (self.meta or {}).get("run", -1) + 1, "counts": counts, "bucket_s": bucket,
                "first_sample": self.first_sample, "nodes": self.node_t0}
        new_meta_holder, self.meta = self.meta, meta
        try:
            for name, (schema, rows) in self.tails.items():
                self.spark.createDataFrame(list(rows.values()), schema).coalesce(1).write.mode(
                    "overwrite").parquet(self.state_path(name))
            for name in self.totals:
                self._frame(name).coalesce(1).write.mode("overwrite").parquet(self.state_path(name))
            if self.recent is not None:
                self.spark.createDataFrame(self.recent[1], self.recent[0]).coalesce(1).write.mode(
                    "overwrite").parquet(self.state_path("recent_rates"))
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

    def _node_rates(self, wr_all, bucket: float, k: int, codes, incremental: bool) -> int:
        """Full: every bucket. Incremental: only the buckets from each node's first new sample
        on are recomputed and replaced (spark/buckets.py); earlier buckets stay as written."""
        from disque_spark import buckets, transform
        spark = self.spark
        known = dict((self.meta or {}).get("nodes") or {})
        if not incremental:
            # each node's first sample is known from the parse stage's counts: no pass over
            # worker_rates to find it
            self.node_t0 = dict(self._new_node_min)
            grid = spark.createDataFrame(sorted(self.node_t0.items()), "node string, t0 double")
            seen = self.observed["worker_rates"]
            return self._write("node_rates", transform.node_rates(
                wr_all, bucket, grid, k, codes, hours=buckets.hours(seen["start_ts"], seen["end_ts"], bucket)))
        # nodes first seen now anchor their grid at their first sample
        for node, t0 in self._new_node_min.items():
            known.setdefault(node, t0)
        self.node_t0 = known
        cut = buckets.cuts(self._new_node_min, known, bucket)
        src = wr_all                # the boundary's old rows from the saved recent rows when they hold them
        if self.recent_old is not None and buckets.recent_cover(self.recent_old[1], cut, bucket, RECENT_ROWS):
            src = self.written["worker_rates"].select(*transform.NODE_RATES_INPUT).unionByName(self.recent_old[0])
        buckets.replace(spark, src, self.path("node_rates"), cut, known, bucket, k, codes,
                        self.observed["worker_rates"]["end_ts"])
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
               metrics: list | None = None, drop: list | None = None) -> int:
        """Write a table (replace it, or append to it); returns the table's row count.

        The rows written (and ``metrics``, kept in self.observed[name]) are observed while
        the table is written, so a replaced table is not read back to be counted."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        path = self.path(name)
        obs = Observation(name)
        df = df.observe(obs, F.count(F.lit(1)).alias("rows"), *(metrics or []))
        if drop:
            df = df.drop(*drop)
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
