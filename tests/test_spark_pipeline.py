"""The PySpark stats pipeline (spark/, package disque_spark) on a real local SparkSession.

One SparkSession (local[2]) for the whole test session. The input is a scripted synthetic
log whose counters are rate * uptime, so every total and rate is known exactly:

node A (2 workers, 60 samples, 1 s apart, processes started 10 s before the first sample)
  worker w: addjob 10(w+1)/s, getjob 10(w+1)/s, ackjob 8(w+1)/s  -> 28(w+1) commands/s
  worker 0 has queues "growing" (len 1, 6, 11, ...) and "steady" (len 3, redelivery 0.15)
  worker 1 has queue "other" (len alternating 7, 8: not growing)
node B (2 workers): worker 0 does 15 commands/s; worker 1 does 50/s and restarts before
  sample 30 (new pid, uptime back to 0.5 s).
All commands take 50-100 us (histogram bucket 3), so p50/p90/p99 = 75/95/99.5 us.
Plus 6 bad lines (3 malformed, 1 wrong type, 2 missing required fields), 2 blank lines
and a non-*.jsonl* file that must be ignored.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from disque_spark import ingest, schema  # noqa: E402
from disque_spark.testing import (LAT_BOUNDS, NODE_A, NODE_B, T0, dumps, record,  # noqa: E402,F401
                                  spark_session)

REPO = Path(__file__).resolve().parent.parent
N = 60

A_RATES = {w: {"addjob": 10 * (w + 1), "getjob": 10 * (w + 1), "ackjob": 8 * (w + 1)} for w in (0, 1)}
B_RATES = {0: {"addjob": 5, "getjob": 5, "ackjob": 5}, 1: {"addjob": 20, "getjob": 20, "ackjob": 10}}
BAD_LINES = [
    ('{"ts": 1795239600, "node": ', "malformed"),
    ("garbage here", "malformed"),
    ("[1, 2, 3]", "malformed"),
    ('{"v":1,"ts":1795239600.0,"node":"%s","worker":"zero"}' % NODE_A, "type"),
    ('{"v":1,"node":"%s","worker":0}' % NODE_A, "missing"),
    ('{"v":1,"ts":1795239601.0,"worker":0}', "missing"),
]


def _lat(total_per_s):
    counts = [0] * (len(LAT_BOUNDS) + 1)
    counts[3] = total_per_s          # (50, 100] us
    return counts


def node_a_record(w, k):
    uptime = 10.0 + k
    rates = A_RATES[w]
    cmds = sum(rates.values())
    if w == 0:
        queues = [
            {"queue": "growing", "len": 1 + 5 * k, "jobs_in": int(10 * uptime), "jobs_out": int(5 * uptime),
             "nacks": 0, "additional_deliveries": 0},
            {"queue": "steady", "len": 3, "jobs_in": int(20 * uptime), "jobs_out": int(20 * uptime),
             "nacks": int(1 * uptime), "additional_deliveries": int(2 * uptime)},
        ]
    else:
        queues = [{"queue": "other", "len": 7 + (k % 2), "jobs_in": int(4 * uptime), "jobs_out": int(4 * uptime),
                   "nacks": 0, "additional_deliveries": 0}]
    rec = record(NODE_A, w, T0 + k, uptime, 100 + w, uptime, cmd_rates=rates,
                 job_rates={"added": 10 * (w + 1), "delivered": 10 * (w + 1), "acked": 8 * (w + 1),
                            "nacked": 1, "requeued": 2, "deleted": 1},
                 queues=queues, lat_per_s=_lat(cmds), bus_rates={"in": {"REPLJOB": 2}, "out": {"GOTJOB": 3}})
    if w == 0 and k == 5:
        rec["some_future_field"] = {"x": [1, 2]}   # unknown fields are fine
    return rec


def node_b_record(w, k):
    if w == 1 and k >= 30:          # restarted: new pid, uptime from 0.5 s
        uptime, pid = 0.5 + (k - 30), 301
    elif w == 1:
        uptime, pid = 100.0 + k, 300
    else:
        uptime, pid = 10.0 + k, 200
    rates = B_RATES[w]
    return record(NODE_B, w, T0 + k + 0.25, uptime, pid, uptime, addr="127.0.0.1:7712", cmd_rates=rates,
                  job_rates={"added": rates["addjob"], "acked": rates["ackjob"]},
                  lat_per_s=_lat(sum(rates.values())))


def expected_commands(node, w):
    if node == NODE_A:
        return 28 * (w + 1) * (10 + N - 1)
    if w == 0:
        return 15 * (10 + N - 1)
    return 50 * (100 + 29) + 50 * (0.5 + N - 1 - 30)


def write_lines(path: Path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / ("." + path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)          # appear complete (what --follow needs)


def make_input(root: Path):
    a = [[dumps(node_a_record(w, k)) for w in (0, 1)] for k in range(N)]
    b = [[dumps(node_b_record(w, k)) for w in (0, 1)] for k in range(N)]
    write_lines(root / "nodeA" / "stats.jsonl.1", [x for k in range(30) for x in a[k]] + [BAD_LINES[0][0]])
    write_lines(root / "nodeA" / "stats.jsonl", [x for k in range(30, N) for x in a[k]] + [BAD_LINES[1][0], ""])
    write_lines(root / "nodeB" / "stats.jsonl",
                [x for k in range(N) for x in b[k]] + [bl for bl, _ in BAD_LINES[2:]] + ["", "   "])
    (root / "nodeB" / "notes.txt").write_text("not a stats file\n")
    return root


@pytest.fixture(scope="module")
def batch(spark_session, tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-batch")
    inp = make_input(root / "in")
    out = root / "out"
    t = time.monotonic()
    res = ingest.run(str(inp), str(out), spark=spark_session, progress=True)
    res.wall = time.monotonic() - t
    return spark_session, res, out


def read(spark, out, table):
    return spark.read.parquet(str(out / table))


# ---------------------------------------------------------------------------
# schema
# ---------------------------------------------------------------------------

def test_schema_is_explicit_and_documented():
    from pyspark.sql import types as T
    names = [f.name for f in schema.STATS_SCHEMA.fields]
    assert names == ["v", "ts", "node", "addr", "worker", "pid", "uptime_s", "commands", "jobs", "gauges",
                     "top_queues", "bus", "rss", "cpu_user", "cpu_sys", "latency_us"]
    s = {f.name: f.dataType for f in schema.STATS_SCHEMA.fields}
    assert s["ts"] == T.DoubleType() and s["node"] == T.StringType() and s["worker"] == T.IntegerType()
    assert s["commands"] == T.MapType(T.StringType(), T.LongType())
    assert [f.name for f in s["jobs"].fields] == list(schema.JOB_COUNTERS)
    assert [f.name for f in s["gauges"].fields] == list(schema.GAUGES)
    assert [f.name for f in s["top_queues"].elementType.fields] == ["queue", "len", "jobs_in", "jobs_out",
                                                                     "nacks", "additional_deliveries"]
    assert [f.name for f in s["bus"].fields] == ["in", "out"]
    assert [f.name for f in s["latency_us"].fields] == ["bounds", "counts"]
    # every field is documented in spark/README.md
    doc = (REPO / "spark" / "README.md").read_text()
    for n in names + list(schema.JOB_COUNTERS) + list(schema.GAUGES) + ["additional_deliveries", "bounds"]:
        assert f"`{n}`" in doc or f'"{n}"' in doc, n


def test_parse_documented_line(spark_session):
    line = ('{"v": 1, "ts": 1795239598.123, "node": "%s", "addr": "127.0.0.1:7711", "worker": 0, "pid": 1234,'
            ' "uptime_s": 12.3, "commands": {"addjob": 10, "getjob": 5, "ackjob": 4},'
            ' "jobs": {"added": 10, "delivered": 9, "acked": 8, "nacked": 1, "requeued": 2, "expired": 0,'
            ' "deleted": 1}, "gauges": {"jobs": 3, "queued": 1, "active": 2, "queues": 2, "blocked": 0},'
            ' "top_queues": [{"queue": "q1", "len": 120, "jobs_in": 500, "jobs_out": 380, "nacks": 3,'
            ' "additional_deliveries": 7}], "bus": {"in": {"REPLJOB": 3}, "out": {"GOTJOB": 3}},'
            ' "rss": 23367680, "cpu_user": 1.25, "cpu_sys": 0.31, "latency_us": {"bounds": [10, 20],'
            ' "counts": [1, 2, 3]}, "new_field": true}') % NODE_A
    df = spark_session.createDataFrame([(line,), ('{"ts": 1, "node": "x"}',)], "value string")
    rows = schema.parse_lines(df).collect()
    r = rows[0].asDict()
    assert r["bad_reason"] is None and r["line"] is None
    assert r["ts"] == pytest.approx(1795239598.123) and r["node"] == NODE_A and r["worker"] == 0
    assert r["pid"] == 1234 and r["uptime_s"] == pytest.approx(12.3)
    assert r["commands"] == {"addjob": 10, "getjob": 5, "ackjob": 4}
    assert (r["added"], r["delivered"], r["acked"], r["nacked"], r["requeued"], r["expired"], r["deleted"]) == \
        (10, 9, 8, 1, 2, 0, 1)
    assert (r["jobs"], r["queued"], r["active"], r["queues"], r["blocked"]) == (3, 1, 2, 2, 0)
    assert r["top_queues"][0].asDict() == {"queue": "q1", "len": 120, "jobs_in": 500, "jobs_out": 380,
                                           "nacks": 3, "additional_deliveries": 7}
    assert r["bus_in"] == {"REPLJOB": 3} and r["bus_out"] == {"GOTJOB": 3}
    assert r["rss"] == 23367680 and r["cpu_user"] == 1.25 and r["cpu_sys"] == 0.31
    assert r["lat_bounds"] == [10, 20] and r["lat_counts"] == [1, 2, 3]
    assert rows[1]["bad_reason"] == "missing"


def test_parses_the_servers_own_lines(spark_session):
    """The server's producer (disque.statslog.line) writes lines this schema accepts."""
    statslog = pytest.importorskip("disque.statslog")
    w = {"index": 1, "pid": 4242, "uptime_s": 3.5, "commands": {"addjob": 7, "getjob": 2},
         "added": 7, "delivered": 2, "acked": 1, "nacked": 1, "requeued": 1, "expired": 0, "deleted": 0,
         "jobs": 6, "queued": 5, "queues": 1, "blocked": 0,
         "top_queues": [{"queue": "q", "len": 5, "jobs_in": 7, "jobs_out": 2, "nacks": 1,
                         "additional_deliveries": 1}],
         "bus_in": {"REPLJOB": 1}, "bus_out": {"GOTJOB": 2}, "rss": 23367680, "cpu_user": 0.5, "cpu_sys": 0.1}
    recs = [statslog.line(T0, NODE_A, "127.0.0.1:7711", w), statslog.line_v1(T0, NODE_A, "127.0.0.1:7711", w)]
    assert [rec["v"] for rec in recs] == [2, 1]
    df = spark_session.createDataFrame([(json.dumps(rec),) for rec in recs], "value string")
    v2, v1 = schema.parse_lines(df).collect()
    for r in (v2, v1):
        assert r["bad_reason"] is None, r["line"]
        assert (r["node"], r["worker"], r["pid"], r["commands"]["addjob"], r["added"]) == (NODE_A, 1, 4242, 7, 7)
        assert (r["expired"], r["blocked"], r["active"]) == (0, 0, 1)        # v2 left them out: 0
        assert r["bus_in"] == {"REPLJOB": 1} and r["cpu_user"] == 0.5
        assert r["lat_bounds"] == list(statslog.LATENCY_BOUNDS_US) and r["lat_counts"] == [0] * 14
    assert v1["top_queues"][0]["additional_deliveries"] == 1 and v1["qmap"] is None
    assert v2["qmap"] == {"q": [5, 7, 2, 1, 1]} and v2["top_queues"] is None


# ---------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------

def test_batch_counts(batch):
    spark, res, out = batch
    assert res.files == 3                       # notes.txt is not a *.jsonl* file
    assert res.rows_read == 4 * N + len(BAD_LINES)
    assert res.bad_lines == len(BAD_LINES)
    assert res.bad_by_reason == {"malformed": 3, "type": 1, "missing": 2}
    assert res.rows_ok == 4 * N
    assert (res.nodes, res.workers, res.restarts) == (2, 4, 1)
    assert res.bucket_s == 1.0
    assert res.tables["worker_rates"] == 4 * N
    assert res.tables["node_rates"] == 2 * N
    assert res.tables["summary"] == 3
    assert res.tables["bad_lines"] == len(BAD_LINES)
    bad = read(spark, out, "bad_lines").collect()
    assert sorted(r["bad_reason"] for r in bad) == sorted(r for _, r in BAD_LINES)
    assert all(r["file"].endswith(".jsonl") or r["file"].endswith(".jsonl.1") for r in bad)
    assert not (out / "_staging").exists()
    # partitioned by date
    assert sorted(p.name for p in (out / "worker_rates").iterdir() if p.name.startswith("date=")) == \
        ["date=2026-11-21"]


def test_worker_totals_and_rates(batch):
    spark, res, out = batch
    from pyspark.sql import functions as F
    wr = read(spark, out, "worker_rates")
    tot = {(r["node"], r["worker"]): r for r in wr.groupBy("node", "worker").agg(
        F.sum("commands").alias("c"), F.sum("added").alias("added"), F.sum("acked").alias("acked")).collect()}
    for node in (NODE_A, NODE_B):
        for w in (0, 1):
            assert tot[(node, w)]["c"] == expected_commands(node, w), (node, w)
    assert tot[(NODE_A, 1)]["added"] == 20 * 69 and tot[(NODE_A, 1)]["acked"] == 16 * 69
    rows = wr.collect()
    for r in rows:
        rate = 28 * (r["worker"] + 1) if r["node"] == NODE_A else (15 if r["worker"] == 0 else 50)
        assert r["commands_per_s"] == pytest.approx(rate, rel=1e-6), r
        assert r["cmd_per_s"]["addjob"] == pytest.approx(
            (A_RATES if r["node"] == NODE_A else B_RATES)[r["worker"]]["addjob"], rel=1e-6)
        assert r["cpu_pct"] == pytest.approx(25.0, abs=0.5)
        assert r["lat_p50_us"] == pytest.approx(75.0)
        assert r["lat_p90_us"] == pytest.approx(95.0)
        assert r["lat_p99_us"] == pytest.approx(99.5)
        if r["node"] == NODE_A:
            assert r["bus_in_per_s"] == pytest.approx(2.0) and r["bus_out_per_s"] == pytest.approx(3.0)
            assert r["added_per_s"] == pytest.approx(10 * (r["worker"] + 1))
            assert r["requeued_per_s"] == pytest.approx(2.0)
    firsts = [r for r in rows if r["first_sample"]]
    assert len(firsts) == 4 and all(r["interval_s"] == pytest.approx(r["uptime_s"]) for r in firsts)


def test_counter_reset_after_restart(batch):
    spark, res, out = batch
    wr = read(spark, out, "worker_rates").where(f"node = '{NODE_B}' AND worker = 1").orderBy("ts").collect()
    assert len(wr) == N
    restarts = [r for r in wr if r["restart"]]
    assert len(restarts) == 1
    r = restarts[0]
    assert r["ts"] == pytest.approx(T0 + 30.25) and r["pid"] == 301
    assert r["interval_s"] == pytest.approx(0.5)           # since the new process started
    assert r["commands"] == 25 and r["commands_per_s"] == pytest.approx(50.0)
    assert all(x["commands"] >= 0 for x in wr)
    assert sum(x["commands"] for x in wr) == expected_commands(NODE_B, 1)


def test_node_rates_and_skew(batch):
    spark, res, out = batch
    nr = read(spark, out, "node_rates").orderBy("node", "ts").collect()
    a = [r for r in nr if r["node"] == NODE_A]
    b = [r for r in nr if r["node"] == NODE_B]
    assert len(a) == N and len(b) == N
    for r in a:
        assert r["workers"] == 2
        assert r["commands_per_s"] == pytest.approx(84.0)
        assert r["skew"] == pytest.approx(56.0 / 42.0)
        assert r["busiest_worker"] == 1
        assert r["cpu_pct"] == pytest.approx(50.0, abs=1.0)
        assert r["lat_p50_us"] == pytest.approx(75.0)
    for r in b:
        assert r["commands_per_s"] == pytest.approx(65.0)
        assert r["skew"] == pytest.approx(50.0 / 32.5)
    assert sum(r["restarts"] for r in b) == 1
    assert sum(r["commands"] for r in a) == expected_commands(NODE_A, 0) + expected_commands(NODE_A, 1)


def test_summary_table(batch):
    spark, res, out = batch
    s = {r["node"]: r for r in read(spark, out, "summary").collect()}
    assert set(s) == {NODE_A, NODE_B, "TOTAL"}
    ea = expected_commands(NODE_A, 0) + expected_commands(NODE_A, 1)
    eb = expected_commands(NODE_B, 0) + expected_commands(NODE_B, 1)
    assert s[NODE_A]["commands"] == ea and s[NODE_B]["commands"] == eb
    assert s["TOTAL"]["commands"] == ea + eb
    assert s[NODE_A]["workers"] == 2 and s["TOTAL"]["workers"] == 4
    assert s[NODE_B]["restarts"] == 1 and s["TOTAL"]["restarts"] == 1
    assert s[NODE_A]["added"] == 30 * 69 and s["TOTAL"]["samples"] == 4 * N
    assert s[NODE_A]["addr"] == "127.0.0.1:7711"
    assert s[NODE_A]["avg_commands_per_s"] == pytest.approx(84.0)
    assert s[NODE_B]["avg_commands_per_s"] == pytest.approx(65.0)
    assert s["TOTAL"]["avg_commands_per_s"] == pytest.approx(84.0 + 65.0)
    assert s[NODE_A]["peak_commands_per_s"] == pytest.approx(84.0)
    assert s["TOTAL"]["peak_commands_per_s"] == pytest.approx(84.0 + 65.0)
    assert s[NODE_A]["mean_skew"] == pytest.approx(4 / 3)
    for n in s:
        assert (s[n]["lat_p50_us"], s[n]["lat_p90_us"], s[n]["lat_p99_us"]) == pytest.approx((75, 95, 99.5))


def test_queue_backlog_growth_and_redelivery(batch):
    spark, res, out = batch
    qs = {r["queue"]: r for r in read(spark, out, "queue_summary").collect()}
    assert set(qs) == {"growing", "steady", "other"}
    assert qs["growing"]["growing"] is True
    assert qs["growing"]["len_slope_per_s"] == pytest.approx(5.0)
    assert (qs["growing"]["first_len"], qs["growing"]["last_len"]) == (1, 1 + 5 * (N - 1))
    assert qs["steady"]["growing"] is False and qs["other"]["growing"] is False
    assert qs["steady"]["redelivery_ratio"] == pytest.approx(0.15)
    assert qs["steady"]["jobs_out"] == 20 * 69 and qs["steady"]["nacks"] == 69
    assert qs["growing"]["redelivery_ratio"] == 0.0
    qb = read(spark, out, "queue_backlog").where("queue = 'growing'").orderBy("ts").collect()
    assert len(qb) == N
    assert all(r["growth"] == 5 and r["growth_per_s"] == pytest.approx(5.0) for r in qb[1:])
    assert all(r["in_per_s"] == pytest.approx(10.0) and r["out_per_s"] == pytest.approx(5.0) for r in qb)


def _png_ok(path: Path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    w, h = struct.unpack(">II", data[16:24])
    assert w >= 400 and h >= 200, (path, w, h)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.size == (w, h)
        lo, hi = im.convert("L").getextrema()
        assert hi - lo > 50                       # not a blank image


def test_report_files(batch):
    spark, res, out = batch
    report = out / "report"
    assert res.report_path == str(report / "index.html")
    page = (report / "index.html").read_text()
    for png in ("throughput.png", "workers.png", "skew.png", "backlog.png", "latency.png"):
        assert f'src="{png}"' in page
        _png_ok(report / png)
    for heading in ("Summary", "Throughput per node and worker", "Load skew", "backlog keeps growing",
                    "Redelivery ratio", "latency", "Bad lines"):
        assert heading.lower() in page.lower(), heading
    assert "growing" in page and "0.150" in page     # growing queue and the redelivery ratio
    assert "127.0.0.1:7711" in page


def test_progress_and_summary_output(batch):
    spark, res, out = batch
    lines = res.summary_lines()
    assert any("bad" in x and "6" in x for x in lines)
    assert any(x.startswith("report:") for x in lines)
    names = [n for n, _ in res.stages]
    assert names[0] == "list input" and any("worker_rates" in n for n in names) and "report" in names[-1]
    # the stages' times are parts of the run's own total, which the caller's clock contains
    assert 0 < sum(t for _, t in res.stages) <= res.seconds + 0.01 <= res.wall + 0.02


def test_rate_edge_cases(spark_session):
    """Baseline first sample, duplicate sample, counter reset without restart, a command
    type appearing later, a histogram whose quantiles fall in the open last bucket."""
    from pyspark.sql import functions as F

    from disque_spark import transform
    last_bucket = [0] * len(LAT_BOUNDS) + [1]
    recs = [
        record(NODE_A, 0, T0, 100.0, 1, 100.0, cmd_rates={"addjob": 1}),
        record(NODE_A, 0, T0 + 1, 101.0, 1, 101.0, cmd_rates={"addjob": 1}),
        record(NODE_A, 0, T0 + 1, 101.0, 1, 101.0, cmd_rates={"addjob": 1}),            # duplicate
        record(NODE_A, 0, T0 + 2, 102.0, 1, 2.0, cmd_rates={"addjob": 1}),              # RESETSTAT
        record(NODE_A, 0, T0 + 3, 103.0, 1, 3.0, cmd_rates={"addjob": 1, "qlen": 5}),   # new command
        record(NODE_A, 1, T0, 0.0, 2, 5.0, cmd_rates={"addjob": 1}),                    # uptime_s 0
    ]
    recs[4]["latency_us"]["counts"] = [int(x * 1000) for x in last_bucket]
    df = spark_session.createDataFrame([(dumps(r),) for r in recs], "value string")
    samples = schema.parse_lines(df).drop("bad_reason", "line", "top_queues")
    for mode in ("start", "baseline"):
        wr = transform.worker_rates(samples, mode, 14)
        rows = wr.where("worker = 0").orderBy("ts", F.desc_nulls_last("interval_s")).collect()
        [w1] = wr.where("worker = 1").collect()
        if mode == "start":   # a first sample with no elapsed time keeps its counts, no rate
            assert w1["interval_s"] == 0 and w1["commands"] == 5 and w1["commands_per_s"] is None
        first = rows[0]
        if mode == "baseline":
            assert first["interval_s"] is None and first["commands_per_s"] is None and first["commands"] is None
        else:
            assert first["interval_s"] == pytest.approx(100.0) and first["commands"] == 100
        assert rows[1]["commands"] == 1 and rows[1]["commands_per_s"] == pytest.approx(1.0)
        assert rows[2]["interval_s"] == 0 and rows[2]["commands"] == 0 and rows[2]["commands_per_s"] is None
        assert rows[3]["restart"] is False and rows[3]["commands"] == 2      # went down: counts the new value
        assert rows[4]["cmd"] == {"addjob": 1, "qlen": 15} and rows[4]["commands_per_s"] == pytest.approx(16.0)
        assert rows[4]["latency_count"] == 1000
        assert rows[4]["lat_p50_us"] == rows[4]["lat_p99_us"] == LAT_BOUNDS[-1]   # open bucket: its lower edge


def test_no_input_is_a_clear_error(spark_session, tmp_path):
    with pytest.raises(ingest.IngestError, match="no input files"):
        ingest.run(str(tmp_path / "nothing-here"), str(tmp_path / "out"), spark=spark_session, progress=False)


# ---------------------------------------------------------------------------
# --follow
# ---------------------------------------------------------------------------

def _wait_rows(spark, path: Path, n: int, timeout: float, follower):
    deadline = time.monotonic() + timeout
    got = -1
    while time.monotonic() < deadline:
        if follower.query is not None and follower.query.exception() is not None:
            raise AssertionError(f"stream failed: {follower.query.exception()}")
        if (path / "_SUCCESS").exists() or path.exists():
            try:
                got = spark.read.parquet(str(path)).count()
            except Exception:
                got = -1
            if got >= n:
                return got
        time.sleep(0.3)
    raise AssertionError(f"{path}: {got} rows after {timeout}s, wanted {n}")


def test_follow_processes_new_files(spark_session, tmp_path):
    spark = spark_session
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    a = [[dumps(node_a_record(w, k)) for w in (0, 1)] for k in range(N)]
    f = ingest.start_follow(str(inp), str(out), spark=spark, trigger_seconds=0.5, report=False,
                            report_every=0)
    try:
        write_lines(inp / "a-0001.jsonl", [x for k in range(30) for x in a[k]])
        _wait_rows(spark, out / "worker_rates", 60, 240, f)
        # with it, a copy of part of the first file: those samples are late (dropped, counted)
        write_lines(inp / "a-0001-copy.jsonl", [x for k in range(10) for x in a[k]])
        write_lines(inp / "a-0002.jsonl", [x for k in range(30, N) for x in a[k]] + ["{oops"])
        _wait_rows(spark, out / "worker_rates", 120, 240, f)
        deadline = time.monotonic() + 60
        while f.result.late_rows < 20 and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        res = f.stop()
    assert res.late_rows == 20
    assert res.rows_read == 2 * N + 1 + 20 and res.bad_lines == 1 and res.bad_by_reason == {"malformed": 1}
    assert res.batches >= 2 and res.files == 3
    wr = spark.read.parquet(str(out / "worker_rates")).orderBy("worker", "ts").collect()
    assert len(wr) == 2 * N
    for r in wr:   # the state carried across files: no first sample at the boundary
        assert r["commands_per_s"] == pytest.approx(28 * (r["worker"] + 1)), r
        assert r["first_sample"] == (r["ts"] == T0)
    assert sum(r["commands"] for r in wr) == expected_commands(NODE_A, 0) + expected_commands(NODE_A, 1)
    nr = spark.read.parquet(str(out / "node_rates")).orderBy("ts").collect()
    assert len(nr) == N                      # every bucket once, the last one flushed on stop
    assert all(r["commands_per_s"] == pytest.approx(84.0) for r in nr)
    s = {r["node"]: r for r in spark.read.parquet(str(out / "summary")).collect()}
    assert s["TOTAL"]["commands"] == expected_commands(NODE_A, 0) + expected_commands(NODE_A, 1)
    assert res.tables["bad_lines"] == 1
    assert res.tables["queue_backlog"] == 3 * N


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------

def test_cli_help():
    exe = Path(sys.executable).with_name("disque-stats-ingest")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "disque_spark.ingest"]
    p = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--follow" in p.stdout and "--master" in p.stdout


def test_script_mode_and_spark_submit(tmp_path):
    """spark/ingest.py runs as a plain script and through spark-submit (its own JVM).

    Only --help goes through spark-submit: the pipeline behind it is the same run() that
    the other tests exercise, and a second SparkContext would double this file's time.
    """
    script = str(REPO / "spark" / "ingest.py")
    p = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60,
                       cwd=str(tmp_path))
    assert p.returncode == 0 and "--follow" in p.stdout, p.stderr
    submit = Path(sys.executable).with_name("spark-submit")
    if not submit.exists():
        pytest.skip("spark-submit not next to the interpreter")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    p = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                        "--driver-memory", "256m", script, "--help"],
                       capture_output=True, text=True, timeout=180, env=env, cwd=str(tmp_path))
    out = p.stdout + p.stderr          # spark-submit merges the script's stderr into its stdout
    assert p.returncode == 0 and "--input" in out and "--follow" in out, out[-3000:]
