"""--follow: Structured Streaming over the input directory, updating the tables.

Semantics (also in spark/README.md):

* Source: Spark's file source in text format with the same explicit parsing as batch
  (``maxFilesPerTrigger`` files per micro-batch, oldest modification time first). Spark
  reads each file *name* once, when it first appears: files must be complete when they
  appear under their final name (write elsewhere or under a ``.``-prefixed name, then
  rename). A file that keeps growing is read as far as it was when first seen; a name that
  is reused (``stats.jsonl.1`` after the next rotation) is not read again. See the README
  for what that means with the server's rotation.
* State: after each micro-batch the last sample of every (node, worker) and of every
  (node, worker, queue) is kept under ``_follow/state/<batch>/``. The next micro-batch
  computes its deltas against that tail with exactly the batch code (window functions
  over tail + new rows), so rates across a file boundary are the same as in batch mode.
  A sample whose ts is not after its worker's tail is *late*: counted and dropped.
* Tables: worker_rates, queue_backlog and bad_lines get the micro-batch's rows appended.
  node_rates gets a node's time bucket appended once it is final, i.e. once a sample of
  that node at least one bucket later has arrived (a watermark per node); on stop the
  remaining buckets are flushed. summary and queue_summary (and the report) are
  recomputed from the tables every ``report_every`` seconds and on stop.
* Restart: the query resumes from ``_follow/checkpoint``; a micro-batch that was already
  committed is skipped if Spark replays it. Without a checkpoint the tables are rebuilt
  from every file in the input.
"""
from __future__ import annotations

import json
import os
import threading
import time

from disque_spark import storage
from disque_spark.progress import fmt_int

STATE_KEEP = 3


class Follower:
    def __init__(self, spark, input_path: str, output: str, progress, result, first_sample: str = "start",
                 bucket_s: float | None = None, report: bool = True, max_files_per_trigger: int = 10,
                 trigger_seconds: float = 2.0, report_every: float = 60.0):
        self.spark = spark
        self.input = input_path
        self.output = output
        self.progress = progress
        self.result = result
        self.first_sample = first_sample
        self.fixed_bucket = bucket_s
        self.report = report
        self.max_files = max_files_per_trigger
        self.trigger = trigger_seconds
        self.report_every = report_every
        self.query = None
        self.last_data = time.monotonic()
        self.started = time.monotonic()
        self.last_refresh = 0.0
        self._in_batch = False
        self._lock = threading.Lock()
        self.meta = None

    # -- paths ------------------------------------------------------------------
    def path(self, *p):
        return storage.join(self.output, *p)

    def state_path(self, batch_id, *p):
        return self.path("_follow", "state", f"{int(batch_id):012d}", *p)

    # -- lifecycle --------------------------------------------------------------
    def start(self):
        from pyspark.sql import functions as F

        from disque_spark import ingest, schema

        spark, pr = self.spark, self.progress
        ckpt = self.path("_follow", "checkpoint")
        if not storage.exists(spark, ckpt):
            from disque_spark.increment import STATE_DIR     # a later batch run must not append to these
            from disque_spark.samples import SAMPLES
            for name in ingest.TABLES + (SAMPLES, ingest.STAGING, ingest.FOLLOW_DIR, ingest.REPORT_DIR, STATE_DIR):
                storage.delete(spark, self.path(name))
            pr.say(f"follow: fresh start, tables under {self.output}")
        else:
            pr.say(f"follow: resuming from {ckpt}")
        self.meta = self._load_meta()

        src = self.input
        reader = spark.readStream.format("text").option("maxFilesPerTrigger", int(self.max_files))
        if storage.is_local(src):
            lp = storage.local_path(src)
            if not any(c in lp for c in "*?[{"):
                if not os.path.isdir(lp):
                    raise ingest.IngestError(f"--follow needs an existing directory or a glob: {src!r}")
                reader = reader.option("recursiveFileLookup", "true").option("pathGlobFilter", storage.DIR_PATTERN)
        text = reader.load(src).select("value", F.col("_metadata.file_path").alias("_file"))
        parsed = schema.parse_lines(text, file_col="_file", file_for_all=True)
        self.query = (parsed.writeStream.foreachBatch(self._batch)
                      .option("checkpointLocation", ckpt)
                      .trigger(processingTime=f"{self.trigger} seconds")
                      .queryName(f"disque-stats-follow-{os.getpid()}-{id(self)}")
                      .start())
        pr.say(f"follow: watching {src} (maxFilesPerTrigger={self.max_files}, trigger {self.trigger:g}s)")
        return self

    def wait(self, stop_event=None, idle_timeout=None, max_seconds=None):
        """Block until stop_event is set, idle_timeout without new rows, max_seconds, or Ctrl-C."""
        try:
            while True:
                if self.query.awaitTermination(0.5):
                    break
                if stop_event is not None and stop_event.is_set():
                    break
                now = time.monotonic()
                if idle_timeout is not None and now - self.last_data > idle_timeout and not self._in_batch:
                    self.progress.say(f"follow: no new input for {idle_timeout:g}s, stopping")
                    break
                if max_seconds is not None and now - self.started > max_seconds:
                    break
                if self.report_every and now - self.last_refresh > self.report_every and self.meta["batches"]:
                    self.refresh()
        except KeyboardInterrupt:
            self.progress.say("follow: interrupted, stopping")
        exc = self.query.exception()
        if exc is not None:
            raise RuntimeError(f"follow query failed: {exc}")

    def process_all_available(self):
        self.query.processAllAvailable()

    def stop(self, final: bool = True):
        """Stop after the running micro-batch, flush node buckets, refresh summaries/report."""
        if self.query is None:
            return self.result
        self.progress.say("follow: stopping")
        deadline = time.monotonic() + 120
        quiet = 0
        while time.monotonic() < deadline and quiet < 3:
            busy = self._in_batch or self.query.status.get("isTriggerActive", False)
            quiet = 0 if busy else quiet + 1
            time.sleep(0.1)
        self.query.stop()
        self.query = None
        if final and self.meta["batches"]:
            with self._lock:
                self._emit_node_buckets(flush=True)
                self._save_meta_latest()
            self.refresh()
        self._count_tables()
        self.result.stages = list(self.progress.done)
        self.result.seconds = time.monotonic() - self.started
        return self.result

    # -- state ------------------------------------------------------------------
    def _committed(self):
        names = storage.list_names(self.spark, self.path("_follow", "state"))
        ids = []
        for n in names:
            if n.isdigit() and storage.exists(self.spark, self.path("_follow", "state", n, "_COMMITTED")):
                ids.append(int(n))
        return sorted(ids)

    def _load_meta(self):
        ids = self._committed()
        if ids:
            txt = storage.read_text(self.spark, self.state_path(ids[-1], "meta.json"))
            meta = json.loads(txt)
        else:
            meta = {"batch_id": -1, "batches": 0, "bucket_s": self.fixed_bucket, "k": 0, "nodes": {},
                    "counts": {"rows": 0, "bad": {}, "late": 0, "files": 0}}
        if self.fixed_bucket and not meta.get("bucket_s"):
            meta["bucket_s"] = self.fixed_bucket
        self._apply_counts(meta)
        return meta

    def _apply_counts(self, meta):
        c = meta["counts"]
        r = self.result
        r.rows_read = c["rows"]
        r.bad_by_reason = dict(c["bad"])
        r.bad_lines = sum(c["bad"].values())
        r.rows_ok = r.rows_read - r.bad_lines
        r.late_rows = c["late"]
        r.files = c["files"]
        r.input_bytes = None
        r.batches = meta["batches"]
        r.bucket_s = meta.get("bucket_s")
        r.nodes = len(meta["nodes"])

    def _save_meta_latest(self):
        bid = self.meta["batch_id"]
        if bid >= 0:
            storage.write_text(self.spark, self.state_path(bid, "meta.json"), json.dumps(self.meta))

    # -- one micro-batch -------------------------------------------------------
    def _batch(self, df, batch_id):
        with self._lock:
            self._in_batch = True
            try:
                self._batch_locked(df, int(batch_id))
            finally:
                self._in_batch = False

    def _batch_locked(self, df, batch_id):
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        from disque_spark import schema, transform

        spark, meta = self.spark, self.meta
        if batch_id <= meta["batch_id"]:
            self.progress.say(f"follow: batch {batch_id} already committed, skipped")
            return
        t0 = time.monotonic()
        df = df.persist()
        try:
            good = F.col("bad_reason").isNull()
            agg = df.agg(F.count(F.lit(1)).alias("rows"),
                         *[F.sum(F.when(F.col("bad_reason") == r, 1).otherwise(0)).alias(r)
                           for r in schema.BAD_REASONS],
                         F.countDistinct("file").alias("files"),
                         F.max(F.when(good, F.size("lat_counts"))).alias("k")).first()
            rows = int(agg["rows"] or 0)
            if rows == 0:
                return
            self.last_data = time.monotonic()
            counts = meta["counts"]
            counts["rows"] += rows
            counts["files"] += int(agg["files"] or 0)
            for r in schema.BAD_REASONS:
                if agg[r]:
                    counts["bad"][r] = counts["bad"].get(r, 0) + int(agg[r])
            meta["k"] = max(int(meta.get("k") or 0), int(agg["k"] or 0))
            k = meta["k"]
            nbad = sum(int(agg[r] or 0) for r in schema.BAD_REASONS)
            if nbad:
                df.where(~good).select("file", "bad_reason", "line").write.mode("append").parquet(
                    self.path("bad_lines"))
                if len(self.result.bad_examples) < 5:
                    self.result.bad_examples += [tuple(r) for r in df.where(~good).select(
                        "file", "bad_reason", "line").limit(5 - len(self.result.bad_examples)).collect()]

            new = df.where(good).drop("bad_reason", "line", "file")
            prev_ids = self._committed()
            prev = prev_ids[-1] if prev_ids else None

            # ---- worker samples: tail + new, drop late rows --------------------------
            wcols = [c for c in new.columns if c not in ("top_queues", "qmap")]
            if prev is not None and storage.exists(spark, self.state_path(prev, "worker_tail")):
                tail = spark.read.parquet(self.state_path(prev, "worker_tail")).select(*wcols).withColumn(
                    "_tail", F.lit(True))
                marks = tail.select("node", "worker", F.col("ts").alias("_tail_ts"))
                joined = new.join(F.broadcast(marks), ["node", "worker"], "left")
                late_cond = F.coalesce(F.col("ts") <= F.col("_tail_ts"), F.lit(False))
                late = joined.where(late_cond).count()
                new_ok = joined.where(~late_cond).drop("_tail_ts")
                combined = tail.unionByName(new_ok.select(*wcols, F.lit(False).alias("_tail")))
            else:
                late = 0
                new_ok = new
                combined = new.select(*wcols, F.lit(False).alias("_tail"))
            counts["late"] += late
            combined = combined.persist()
            wr = transform.worker_rates(combined, self.first_sample, k).where(~F.col("_tail")).drop("_tail").persist()
            wr.write.mode("append").partitionBy("date").parquet(self.path("worker_rates"))
            last = Window.partitionBy("node", "worker").orderBy(F.desc("ts"))
            (combined.select("*", F.row_number().over(last).alias("_rn")).where("_rn = 1").drop("_rn", "_tail")
             .write.mode("overwrite").parquet(self.state_path(batch_id, "worker_tail")))

            # ---- queues ---------------------------------------------------------------
            qnew = transform.queue_samples(new_ok.select("node", "worker", "pid", "ts", "uptime_s", "top_queues", "qmap")
                                           .withColumn("_tail", F.lit(False)))
            if prev is not None and storage.exists(spark, self.state_path(prev, "queue_tail")):
                qtail = spark.read.parquet(self.state_path(prev, "queue_tail")).withColumn("_tail", F.lit(True))
                qcomb = qtail.unionByName(qnew)
            else:
                qcomb = qnew
            qcomb = qcomb.persist()
            qb = transform.queue_backlog(qcomb, self.first_sample).where(~F.col("_tail")).drop("_tail")
            qb.write.mode("append").partitionBy("date").parquet(self.path("queue_backlog"))
            qlast = Window.partitionBy("node", "worker", "queue").orderBy(F.desc("ts"))
            (qcomb.select("*", F.row_number().over(qlast).alias("_rn")).where("_rn = 1").drop("_rn", "_tail")
             .write.mode("overwrite").parquet(self.state_path(batch_id, "queue_tail")))

            # ---- per-node grid and node buckets ---------------------------------------
            nstats = wr.groupBy("node").agg(F.min("ts").alias("t0"), F.max("ts").alias("t1")).collect()
            for r in nstats:
                n = meta["nodes"].setdefault(r["node"], {"t0": r["t0"], "last_idx": None, "max_ts": r["t1"]})
                n["max_ts"] = max(n["max_ts"], r["t1"])
            if not meta.get("bucket_s"):
                from disque_spark.ingest import detect_bucket
                meta["bucket_s"] = detect_bucket(wr, default=None)
            nwr = rows - nbad - late
            wr.unpersist()
            combined.unpersist()
            qcomb.unpersist()
            emitted = self._emit_node_buckets(flush=False)

            meta["batch_id"] = batch_id
            meta["batches"] += 1
            storage.write_text(spark, self.state_path(batch_id, "meta.json"), json.dumps(meta))
            storage.write_text(spark, self.state_path(batch_id, "_COMMITTED"), "")
            for old in self._committed()[:-STATE_KEEP]:
                storage.delete(spark, self.state_path(old))
            self._apply_counts(meta)
            self.progress.say(
                f"follow: batch {batch_id}: {fmt_int(agg['files'])} files, {fmt_int(rows)} lines, "
                f"{fmt_int(nbad)} bad, {fmt_int(late)} late, {fmt_int(nwr)} worker rows, "
                f"{fmt_int(emitted)} node buckets ({time.monotonic() - t0:.1f}s)")
        finally:
            df.unpersist()

    def _emit_node_buckets(self, flush: bool) -> int:
        """Append the node_rates buckets that became final (all of them when flushing)."""
        from pyspark.sql import functions as F

        from disque_spark import transform

        spark, meta = self.spark, self.meta
        b = meta.get("bucket_s")
        if not b or not meta["nodes"]:
            return 0
        ranges = []
        for node, n in meta["nodes"].items():
            top = round((n["max_ts"] - n["t0"]) / b)
            hi = top if flush else top - 1
            lo = -1 if n["last_idx"] is None else n["last_idx"]
            if hi > lo:
                ranges.append((node, float(n["t0"]), int(lo), int(hi)))
        if not ranges:
            return 0
        ts_lo = min(t0 + (lo + 0.5) * b for _, t0, lo, _ in ranges) - b
        ts_hi = max(t0 + (hi + 0.5) * b for _, t0, _, hi in ranges) + b
        wr = spark.read.parquet(self.path("worker_rates"))
        d_lo, d_hi = int(ts_lo // 86400), int(ts_hi // 86400)
        wr = wr.where((F.col("date") >= transform.date_of(F.lit(d_lo * 86400.0)))
                      & (F.col("date") <= transform.date_of(F.lit(d_hi * 86400.0)))
                      & (F.col("ts") >= ts_lo) & (F.col("ts") < ts_hi))
        grid = spark.createDataFrame([(n, t0) for n, t0, _, _ in ranges], "node string, t0 double")
        rng = spark.createDataFrame([(n, lo, hi) for n, _, lo, hi in ranges], "node string, _lo long, _hi long")
        nr = transform.node_rates(wr, b, grid, int(meta.get("k") or 0))
        nr = nr.join(F.broadcast(rng), "node").join(F.broadcast(grid), "node")
        idx = F.round((F.col("ts") - F.col("t0")) / F.lit(float(b))).cast("long")
        nr = nr.where((idx > F.col("_lo")) & (idx <= F.col("_hi"))).drop("_lo", "_hi", "t0").persist()
        n_out = nr.count()
        if n_out:
            nr.write.mode("append").partitionBy("date").parquet(self.path("node_rates"))
        nr.unpersist()
        for node, _, _, hi in ranges:
            meta["nodes"][node]["last_idx"] = hi
        return n_out

    # -- summaries / report -----------------------------------------------------
    def refresh(self):
        """Recompute summary + queue_summary from the tables and rewrite the report."""
        from disque_spark import ingest, partials, transform
        spark = self.spark
        self.last_refresh = time.monotonic()
        with self._lock:
            b = self.meta.get("bucket_s") or 1.0
            k = int(self.meta.get("k") or 0)
            paths = {t: self.path(t) for t in ("worker_rates", "node_rates", "queue_backlog")}
            if not storage.exists(spark, paths["worker_rates"]):
                return
            wr = spark.read.parquet(paths["worker_rates"])
            if storage.exists(spark, paths["node_rates"]):
                nr = spark.read.parquet(paths["node_rates"])
                transform.summary(partials.worker_partials(wr), nr, b, k).write.mode("overwrite").parquet(self.path("summary"))
            if storage.exists(spark, paths["queue_backlog"]):
                qb = spark.read.parquet(paths["queue_backlog"])
                transform.queue_summary(partials.queue_summary_input(spark, qb)).write.mode("overwrite").parquet(self.path("queue_summary"))
            self._count_tables()
            if self.report and storage.exists(spark, self.path("summary")):
                self.result.report_path = ingest.write_report(spark, self.output, self.result)
                self.progress.say(f"follow: report refreshed: {self.result.report_path}")

    def _count_tables(self):
        from pyspark.sql import functions as F
        from disque_spark import ingest
        spark, res = self.spark, self.result
        for t in ingest.TABLES:
            p = self.path(t)
            if storage.exists(spark, p):
                res.tables[t] = spark.read.parquet(p).count()
                res.table_paths[t] = p
        if "worker_rates" in res.tables:
            agg = spark.read.parquet(self.path("worker_rates")).agg(
                F.countDistinct("node", "worker").alias("w"), F.sum(F.col("restart").cast("int")).alias("r"),
                F.min("ts").alias("t0"), F.max("ts").alias("t1")).first()
            res.workers, res.restarts = int(agg["w"] or 0), int(agg["r"] or 0)
            res.start_ts, res.end_ts = agg["t0"], agg["t1"]
