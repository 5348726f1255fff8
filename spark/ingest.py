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
from disque_spark.batch import (FOLLOW_DIR, PARTITIONED, REPORT_DIR, STAGING, TABLES,  # noqa: F401
                                  BatchPipeline, IngestError, bucket_from_median)
from disque_spark.progress import Progress, fmt_int, human_bytes


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


def detect_bucket(wr, default: float | None = 1.0) -> float | None:
    """The typical sampling interval: median interval of non-fresh samples, in ms resolution
    (``default`` when no worker has two consecutive samples)."""
    from pyspark.sql import functions as F
    v = (wr.where(~F.col("first_sample") & ~F.col("restart") & (F.col("interval_s") > 0))
         .agg(F.percentile_approx("interval_s", 0.5, 10000)).first()[0])
    return bucket_from_median(v, default)


def write_report(spark, output: str, result: IngestResult, worker_totals: list | None = None) -> str:
    """``worker_totals``: the run's partial totals per (node, worker) (spark/partials.py),
    so the report does not aggregate worker_rates again for its per-worker table."""
    from disque_spark import report
    if storage.is_local(output):
        out = os.path.join(storage.local_path(output), REPORT_DIR)
        return report.make_report(spark, output, out, result, worker_totals)
    import tempfile
    tmp = tempfile.mkdtemp(prefix="disque-report-")
    report.make_report(spark, output, tmp, result, worker_totals)
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
    p.add_argument("--keep-staging", action="store_true",
                   help="(kept for old scripts: the parsed samples are always kept, under OUTPUT/samples/)")
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
