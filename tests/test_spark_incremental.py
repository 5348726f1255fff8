"""Schema v2 and mixed input give the exact totals of v1; an incremental run == a full rebuild.

The scripted log of test_spark_pipeline (2 nodes x 2 workers, 60 samples, a restart of
node B's worker 1 at sample 30) is written in v2 for node A (the server's own producer,
disque.statslog.line) and mixed for node B (v1 in its rotated file, then v1 and v2 lines
alternating). It is ingested in three incremental steps while the log grows like a
server's does: new lines appended to the open file, a rotation by rename, a last line
still being written when a run starts. Then a full rebuild over the final files must give
the same tables, row by row, and the exact totals of the v1 test.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import test_spark_pipeline as base  # noqa: E402  (the scripted log and its expected totals)

from disque_spark import ingest  # noqa: E402
from disque_spark.testing import NODE_A, NODE_B, dumps, spark_session, to_v2  # noqa: E402,F401

pytestmark = [pytest.mark.spark, pytest.mark.slow]
N = base.N
TABLE_KEYS = {"worker_rates": ["node", "worker", "ts"], "queue_backlog": ["node", "worker", "queue", "ts"],
              "node_rates": ["node", "ts"], "summary": ["node"], "queue_summary": ["node", "queue"],
              "bad_lines": ["bad_reason", "line"]}


def a_line(w, k):
    return dumps(to_v2(base.node_a_record(w, k)))


def b_line(w, k):
    rec = base.node_b_record(w, k)
    return dumps(rec) if k < 20 or (k + w) % 2 else dumps(to_v2(rec))


def lines(fn, ks):
    return "".join(fn(w, k) + "\n" for k in ks for w in (0, 1))


def append(path: Path, text: str):
    with open(path, "a") as f:
        f.write(text)


def rows_of(spark, out: Path, table: str):
    df = spark.read.parquet(str(out / table))
    if table == "bad_lines":
        df = df.drop("file")          # a line's file name changes when its file is rotated
    return sorted((r.asDict(recursive=True) for r in df.collect()),
                  key=lambda r: tuple(str(r[k]) for k in TABLE_KEYS[table]))


def same(a, b):
    # floats to 1e-6: sums and regressions over the same rows in another order (other files,
    # other partitions) differ in the last bits; ts is ~1.8e9, so a least-squares slope loses more
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture(scope="module")
def runs(spark_session, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("spark-incr")
    a, b = root / "in" / "nodeA", root / "in" / "nodeB"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    inc, full = root / "inc", root / "full"
    spark = spark_session
    results = []

    # run 1: node A's first 20 samples, node B's first 30 (v1 rotated file + mixed current file)
    (a / "stats.jsonl").write_text(lines(a_line, range(20)) + base.BAD_LINES[0][0] + "\n")
    (b / "stats.jsonl.1").write_text(lines(b_line, range(20)))
    (b / "stats.jsonl").write_text(lines(b_line, range(20, 30)))
    results.append(ingest.run(str(root / "in"), str(inc), spark=spark, progress=False, report=False))

    # run 2: A grows in place then rotates by rename (the same inode keeps its offset);
    # B grows across its restart (sample 30) and ends with half a line
    append(a / "stats.jsonl", lines(a_line, range(20, 35)))
    os.replace(a / "stats.jsonl", a / "stats.jsonl.1")
    (a / "stats.jsonl").write_text(lines(a_line, range(35, 45)) + base.BAD_LINES[3][0] + "\n")
    half = b_line(0, 45)
    append(b / "stats.jsonl", lines(b_line, range(30, 45)) + half[:40])
    results.append(ingest.run(str(root / "in"), str(inc), spark=spark, progress=False, report=False))

    # run 3: the half line is finished, more lines everywhere, one more rotation of B
    append(b / "stats.jsonl", half[40:] + "\n" + b_line(1, 45) + "\n")
    os.replace(b / "stats.jsonl.1", b / "stats.jsonl.2")
    os.replace(b / "stats.jsonl", b / "stats.jsonl.1")
    (b / "stats.jsonl").write_text(lines(b_line, range(46, N)) + base.BAD_LINES[5][0] + "\n")
    append(a / "stats.jsonl", lines(a_line, range(45, N)))
    results.append(ingest.run(str(root / "in"), str(inc), spark=spark, progress=False, report=True))

    # run 4: nothing new
    results.append(ingest.run(str(root / "in"), str(inc), spark=spark, progress=False, report=False))

    full_res = ingest.run(str(root / "in"), str(full), spark=spark, progress=False, report=True, full=True)
    return spark, results, full_res, inc, full, root


def test_v2_and_mixed_input_give_the_exact_totals(runs):
    spark, _, res, _, full, _ = runs
    assert res.mode == "batch" and res.rows_read == 4 * N + 3 and res.bad_lines == 3
    assert (res.nodes, res.workers, res.restarts) == (2, 4, 1)
    s = {r["node"]: r for r in spark.read.parquet(str(full / "summary")).collect()}
    ea = base.expected_commands(NODE_A, 0) + base.expected_commands(NODE_A, 1)
    eb = base.expected_commands(NODE_B, 0) + base.expected_commands(NODE_B, 1)
    assert s[NODE_A]["commands"] == ea and s[NODE_B]["commands"] == eb and s["TOTAL"]["commands"] == ea + eb
    assert s[NODE_A]["added"] == 30 * 69 and s["TOTAL"]["samples"] == 4 * N
    assert s[NODE_A]["expired"] == 0 and s[NODE_A]["requeued"] == 4 * 69      # v2 leaves zeros out
    assert (s["TOTAL"]["lat_p50_us"], s["TOTAL"]["lat_p99_us"]) == pytest.approx((75, 99.5))
    qs = {r["queue"]: r for r in spark.read.parquet(str(full / "queue_summary")).collect()}
    assert qs["growing"]["growing"] is True and qs["steady"]["redelivery_ratio"] == pytest.approx(0.15)
    assert qs["steady"]["jobs_out"] == 20 * 69 and qs["steady"]["nacks"] == 69
    wr = spark.read.parquet(str(full / "worker_rates")).where(f"node = '{NODE_B}'").collect()
    for r in wr:      # B's lines alternate v1 and v2: the rates are the same either way
        assert r["commands_per_s"] == pytest.approx(15.0 if r["worker"] == 0 else 50.0)
        assert r["bus_in"] == 0 and r["cpu_pct"] == pytest.approx(25.0, abs=0.5)


def test_incremental_runs_read_only_what_is_new(runs):
    _, results, full_res, _, _, root = runs
    r1, r2, r3, r4 = results
    assert [r.mode for r in results] == ["batch", "incremental", "incremental", "incremental"]
    total = sum(p.stat().st_size for p in (root / "in").rglob("*.jsonl*"))
    assert r1.new_bytes + r2.new_bytes + r3.new_bytes == total        # every byte read exactly once
    assert r4.new_bytes == 0 and r4.rows_read == full_res.rows_read
    assert r3.rows_read == full_res.rows_read and r3.bad_by_reason == full_res.bad_by_reason
    assert r3.late_rows == 0 and r3.tables == full_res.tables
    assert r3.report_path and os.path.exists(r3.report_path)


@pytest.mark.parametrize("table", sorted(TABLE_KEYS))
def test_incremental_tables_equal_the_full_rebuild(runs, table):
    spark, _, _, inc, full, _ = runs
    got, want = rows_of(spark, inc, table), rows_of(spark, full, table)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert same(g, w), (table, {k: (g[k], w[k]) for k in g if not same(g[k], w[k])}, g)
