"""Stats log: the schema-v2 record (and v1, still produced by line_v1), size-based rotation."""
import json

from disque.statslog import LATENCY_BOUNDS_US, LatencyHistogram, StatsLog, line, line_v1

WORKER = {"index": 1, "pid": 42, "uptime_s": 3.5, "commands": {"addjob": 7}, "added": 7,
          "delivered": 5, "acked": 4, "jobs": 3, "queued": 1, "queues": 2, "blocked": 0,
          "top_queues": [{"queue": "q", "len": 1, "jobs_in": 7, "jobs_out": 5, "nacks": 0,
                          "additional_deliveries": 1}],
          "bus_in": {"REPLJOB": 2}, "rss": 1000, "cpu_user": 0.25, "cpu_sys": 0.125}

SCHEMA_KEYS = {"v", "ts", "node", "addr", "worker", "pid", "uptime_s", "commands", "jobs", "gauges",
               "top_queues", "bus", "rss", "cpu_user", "cpu_sys", "latency_us", "dead_lettered"}
#: v2: always present / present only when not zero or empty
V2_KEYS = {"v", "t", "n", "a", "w", "p", "up", "m"}
V2_SPARSE = {"c", "j", "g", "q", "bi", "bo", "cu", "cs", "l", "lb", "dl"}


def test_v2_record_is_short_and_sparse():
    w = dict(WORKER, latency_counts=[0, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    r = line(1795239598.1234, "a" * 40, "127.0.0.1:7711", w)
    assert V2_KEYS <= set(r) <= V2_KEYS | V2_SPARSE
    assert r["v"] == 2 and r["t"] == 1795239598.123 and r["w"] == 1 and r["p"] == 42 and r["up"] == 3.5
    assert r["c"] == {"addjob": 7}
    assert r["j"] == {"add": 7, "dlv": 5, "ack": 4}                       # zero counters left out
    assert r["g"] == {"jobs": 3, "qd": 1, "act": 2, "qs": 2}              # blocked 0: left out
    assert r["q"] == {"q": [1, 7, 5, 0, 1]}                              # trailing zeros trimmed only
    assert r["bi"] == {"REPLJOB": 2} and "bo" not in r
    assert r["m"] == 1000 and r["cu"] == 0.25 and r["cs"] == 0.125
    assert r["l"] == [0, 3, 5] and "lb" not in r                          # bounds: the version's
    idle = line(1.0, "a" * 40, "x:1", {"index": 0, "pid": 1, "rss": 5})
    assert set(idle) == V2_KEYS
    v1 = json.dumps(line_v1(1795239598.1234, "a" * 40, "127.0.0.1:7711", w), separators=(",", ":"))
    v2 = json.dumps(r, separators=(",", ":"))
    assert len(v2) < len(v1) / 2, (len(v2), len(v1))


def test_v1_record_has_every_schema_field_with_types():
    r = line_v1(1795239598.1234, "a" * 40, "127.0.0.1:7711", WORKER)
    assert set(r) == SCHEMA_KEYS
    assert r["v"] == 1 and r["worker"] == 1 and r["pid"] == 42 and r["ts"] == 1795239598.123
    assert set(r["jobs"]) == {"added", "delivered", "acked", "nacked", "requeued", "expired", "deleted"}
    assert r["jobs"]["added"] == 7 and r["jobs"]["nacked"] == 0
    assert r["gauges"] == {"jobs": 3, "queued": 1, "active": 2, "queues": 2, "blocked": 0}
    assert r["bus"] == {"in": {"REPLJOB": 2}, "out": {}}
    assert r["latency_us"]["bounds"] == list(LATENCY_BOUNDS_US)
    assert len(r["latency_us"]["counts"]) == len(LATENCY_BOUNDS_US) + 1
    json.dumps(r)


def test_rotation_by_size(tmp_path):
    path = str(tmp_path / "stats.jsonl")
    log = StatsLog(path, max_bytes=2000, keep=2)
    rec = line(1.0, "a" * 40, "x:1", WORKER)
    for _ in range(40):
        assert log.write([rec])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["stats.jsonl", "stats.jsonl.1", "stats.jsonl.2"]
    for name in files:
        text = (tmp_path / name).read_text()
        assert len(text) <= 2000
        for raw in text.splitlines():
            assert json.loads(raw)["v"] == 2
    assert log.lines_written == 40


def test_latency_histogram_buckets():
    h = LatencyHistogram()
    for us in (1, 10, 11, 100000, 100001, 10 ** 9):
        h.add(us)
    assert h.counts[0] == 2 and h.counts[1] == 1 and h.counts[-2] == 1 and h.counts[-1] == 2


def test_info_workerstats_and_collector_match_a_scripted_workload(start_server, tmp_path):
    """A real 2-worker server: the records `disque-stats-collect` writes count exactly what
    the test did."""
    from disque import stats_collect

    srv = start_server(workers=2)
    r = srv.client()
    queues = [b"stats-a", b"stats-b", b"stats-c", b"stats-d"]
    for q in queues:
        for _ in range(5):
            r.execute_command("ADDJOB", q, b"x" * 10, 0)
    got = r.execute_command("GETJOB", "COUNT", 20, "FROM", *queues)
    assert len(got) == 20
    assert r.execute_command("ACKJOB", *[j[1] for j in got[:8]]) == 8
    assert r.execute_command("DELJOB", got[8][1], got[9][1]) == 2
    out = tmp_path / "collected"
    assert stats_collect.main(["--nodes", "127.0.0.1:%d" % srv.port, "--interval", "0.1",
                               "--count", "1", "--output", str(out)]) == 0
    files = list(out.iterdir())
    assert len(files) == 1
    records = [json.loads(x) for x in files[0].read_text().splitlines()]
    assert sorted(rec["w"] for rec in records) == [0, 1]
    for rec in records:
        assert V2_KEYS <= set(rec) <= V2_KEYS | V2_SPARSE and rec["v"] == 2 and len(rec["n"]) == 40
        assert rec["a"] == "127.0.0.1:%d" % srv.port and rec["up"] > 0
        assert sum(rec.get("l", [])) == sum(rec.get("c", {}).values())
    total = lambda f: sum(f(rec) for rec in records)
    assert total(lambda rec: rec.get("j", {}).get("add", 0)) == 20
    assert total(lambda rec: rec.get("c", {}).get("addjob", 0)) == 20
    assert total(lambda rec: rec.get("j", {}).get("dlv", 0)) == 20
    assert total(lambda rec: rec.get("j", {}).get("ack", 0)) == 8
    assert total(lambda rec: rec.get("j", {}).get("del", 0)) == 2
    assert total(lambda rec: rec.get("g", {}).get("jobs", 0)) == 10
    assert total(lambda rec: sum(q[1] for q in rec.get("q", {}).values())) == 20


def test_server_writes_the_stats_log_and_config_set_turns_it_on(start_server, tmp_path):
    import time as _time
    from support.waits import wait_until

    path = tmp_path / "stats.jsonl"
    srv = start_server(workers=2)
    r = srv.client()
    for _ in range(7):
        r.execute_command("ADDJOB", "slq", b"body", 0)
    assert not path.exists()
    assert r.execute_command("CONFIG", "SET", "stats-log-interval", "1") in (b"OK", "OK", True)
    assert r.execute_command("CONFIG", "SET", "stats-log-file", str(path)) in (b"OK", "OK", True)

    def lines():
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines()]

    wait_until(lambda: len(lines()) >= 4, timeout=10)        # two intervals x two workers
    recs = lines()
    assert {rec["w"] for rec in recs} == {0, 1}
    by_worker = {}
    for rec in recs:
        assert V2_KEYS <= set(rec) <= V2_KEYS | V2_SPARSE and rec["v"] == 2
        by_worker.setdefault(rec["w"], []).append(rec)
    added = lambda rec: rec.get("j", {}).get("add", 0)
    latest = [v[-1] for v in by_worker.values()]
    assert sum(added(rec) for rec in latest) == 7
    for v in by_worker.values():           # counters are monotonic, timestamps increase
        assert [x["t"] for x in v] == sorted(x["t"] for x in v)
        assert [added(x) for x in v] == sorted(added(x) for x in v)
    r.execute_command("CONFIG", "SET", "stats-log-file", "")
    count = len(lines())
    _time.sleep(1.5)                        # a full interval: nothing more may appear
    assert len(lines()) == count
