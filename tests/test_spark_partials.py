"""The driver-side rules of incremental runs: merging the summaries' partial totals
(spark/partials.py) and choosing the node_rates buckets to recompute (spark/buckets.py).

No SparkSession: these are the parts that run in Python on the driver. That merged totals give
the same tables as a full rebuild is checked end to end in tests/test_spark_incremental.py.
"""
from __future__ import annotations

import math
import random

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.unit

from disque_spark import buckets, partials  # noqa: E402


def _fit(points, origin=0.0):
    """A partial's fit state as Spark computes it: count, means, co-moment, second moments
    (exact sums: the reference)."""
    n = float(len(points))
    if not points:
        return {"fit_origin": origin, "fit_n": 0.0, "fit_x": None, "fit_y": None, "fit_ck": None,
                "fit_m2x": None, "fit_m2y": None}
    xs = [x - origin for x, _ in points]
    ys = [y for _, y in points]
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    return {"fit_origin": origin, "fit_n": n, "fit_x": mx, "fit_y": my,
            "fit_ck": math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)),
            "fit_m2x": math.fsum((x - mx) ** 2 for x in xs),
            "fit_m2y": math.fsum((y - my) ** 2 for y in ys)}


def _queue(points, worker=0, origin=0.0, **extra):
    row = {"node": "n", "queue": "q", "worker": worker, "samples": len(points),
           "first_ts": points[0][0] if points else None, "first_len": points[0][1] if points else None,
           "last_ts": points[-1][0] if points else None, "last_len": points[-1][1] if points else None,
           "max_len": max((y for _, y in points), default=None), "intervals_up": 1, "intervals_down": 2,
           "intervals": 3, "jobs_in": 10, "jobs_out": 8, "nacks": None, "additional_deliveries": 1}
    row.update(_fit(points, origin))
    row.update(extra)
    return row


def test_merged_fit_equals_the_fit_of_all_points():
    rng = random.Random(7)
    pts = [(1795219200.0 + i + rng.random(), float(rng.randint(0, 500))) for i in range(3000)]
    whole = _fit(pts, 1795219200.0)
    # two runs, each with its own origin (its first whole second)
    merged = partials.merge_queue(_queue(pts[:1234], origin=1795219200.0), _queue(pts[1234:], origin=1795220434.0))
    for k in ("fit_n", "fit_x", "fit_y", "fit_ck", "fit_m2x", "fit_m2y"):
        assert merged[k] == pytest.approx(whole[k], rel=1e-12), k


def test_a_constant_backlog_keeps_a_zero_co_moment():
    pts = [(1795219200.0 + i, 42.0) for i in range(100)]
    merged = partials.merge_queue(_queue(pts[:37]), _queue(pts[37:]))
    assert merged["fit_ck"] == 0.0 and merged["fit_m2y"] == 0.0      # slope 0 and R² 1, exactly


def test_merge_takes_first_and_last_samples_sums_and_extremes():
    a = _queue([(10.0, 5.0), (11.0, 9.0)], max_len=9.0)
    b = _queue([(12.0, 7.0), (13.0, 3.0)], max_len=7.0, nacks=4)
    m = partials.merge_queue(a, b)
    assert (m["first_ts"], m["first_len"], m["last_ts"], m["last_len"]) == (10.0, 5.0, 13.0, 3.0)
    assert (m["samples"], m["max_len"], m["intervals"], m["jobs_in"], m["nacks"]) == (4, 9.0, 6, 20, 4)
    m2 = partials.merge_queue(b, a)           # the order of the runs does not matter
    assert (m2["first_ts"], m2["last_ts"], m2["samples"]) == (10.0, 13.0, 4)
    empty = _queue([])
    assert partials.merge_queue(empty, a)["fit_n"] == 2.0


def test_per_queue_counts_the_workers_that_reported_it():
    rows = [_queue([(1.0, 1.0)], worker=0), _queue([(2.0, 2.0)], worker=3)]
    (q,) = partials.per_queue(rows)
    assert q["workers"] == 2 and q["samples"] == 2


def test_worker_totals_merge():
    a = {"node": "n", "worker": 0, "addr": "b:1", "samples": 3, "start_ts": 5.0, "end_ts": 9.0, "restarts": 1,
         "cpu_s": 0.5, "seconds": 3.0, "rss": 10, "peak_commands_per_s": 4.0,
         **{c: 2 for c in partials.WORKER_SUMS}}
    b = dict(a, addr="a:1", samples=2, start_ts=9.0, end_ts=11.0, restarts=0, cpu_s=None, rss=20,
             peak_commands_per_s=3.0, commands=None)
    m = partials.merge_worker(a, b)
    assert (m["addr"], m["samples"], m["start_ts"], m["end_ts"], m["restarts"]) == ("a:1", 5, 5.0, 11.0, 1)
    assert (m["cpu_s"], m["rss"], m["peak_commands_per_s"], m["commands"], m["added"]) == (0.5, 20, 4.0, 2, 4)


def test_bucket_index_rounds_half_away_from_zero_like_spark():
    assert buckets.bucket_index(100.5, 100.0, 1.0) == 1
    assert buckets.bucket_index(99.5, 100.0, 1.0) == -1
    assert buckets.bucket_index(101.49, 100.0, 1.0) == 1
    assert buckets.cuts({"n": 130.2}, {"n": 100.0}, 10.0) == {"n": 130.0}


def test_hours_counts_the_clock_hours_of_the_buckets():
    assert buckets.hours(7200.5, 7300.0, 1.0) == 2          # 7199.5 falls in the hour before
    assert buckets.hours(3600 * 5 + 10, 3600 * 8 + 10, 1.0) == 4
    assert buckets.hours(None, 5.0, 1.0) == 0


def _recent(worker, times):
    return [{"node": "n", "worker": worker, "ts": t} for t in times]


def test_recent_rows_cover_the_boundary_when_they_start_before_it():
    rows = _recent(0, [float(t) for t in range(100, 164)]) + _recent(1, [float(t) for t in range(90, 154)])
    assert buckets.recent_cover(rows, {"n": 160.0}, 1.0, 64)
    # the boundary bucket reaches back before worker 0's first saved row: a scan is needed
    assert not buckets.recent_cover(rows, {"n": 100.0}, 1.0, 64)
    # a worker with fewer rows than kept has all of them saved
    short = _recent(0, [50.0, 51.0])
    assert buckets.recent_cover(short, {"n": 50.0}, 1.0, 64)
    # a node without new samples is not recomputed
    assert buckets.recent_cover(rows, {"other": 0.0}, 1.0, 64)
