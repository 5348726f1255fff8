"""The Spark pipeline over stats logs written by two real nodes under a scripted load."""
import json

import pytest

pytest.importorskip("pyspark")

from support.waits import wait_until  # noqa: E402
from disque_spark import ingest  # noqa: E402
from disque_spark.testing import spark_session  # noqa: E402,F401


def latest_totals(path, field):
    """Sum over workers of the latest record's job counter in one node's log (schema v2)."""
    short = {"added": "add", "acked": "ack"}[field]
    latest = {}
    if not path.exists():
        return -1
    for raw in path.read_text().splitlines():
        rec = json.loads(raw)
        latest[rec["w"]] = rec.get("j", {}).get(short, 0)
    return sum(latest.values())


def test_spark_over_logs_of_a_real_two_node_run(start_server, spark_session, tmp_path):  # noqa: F811
    logs = tmp_path / "logs"
    logs.mkdir()
    opts = lambda name: ["--stats-log-file", str(logs / name), "--stats-log-interval", "1"]
    a = start_server(workers=2, extra_args=opts("a.jsonl"))
    b = start_server(workers=1, extra_args=opts("b.jsonl"))
    ra, rb = a.client(), b.client()
    queues = ["sp-a0", "sp-a1", "sp-a2", "sp-a3"]
    for i in range(30):
        ra.execute_command("ADDJOB", queues[i % 4], b"job", 0)
    got = ra.execute_command("GETJOB", "COUNT", 10, "FROM", *queues)
    assert ra.execute_command("ACKJOB", *[j[1] for j in got]) == 10
    for _ in range(20):
        rb.execute_command("ADDJOB", "sp-b", b"job", 0)
    wait_until(lambda: latest_totals(logs / "a.jsonl", "acked") == 10
               and latest_totals(logs / "b.jsonl", "added") == 20, timeout=15)
    wait_until(lambda: len((logs / "b.jsonl").read_text().splitlines()) >= 3, timeout=15)
    node_a = a.client().execute_command("HELLO")[1]
    node_b = b.client().execute_command("HELLO")[1]
    a.stop()
    b.stop()
    (logs / "a.jsonl").write_text((logs / "a.jsonl").read_text() + "not json at all\n")

    res = ingest.run(str(logs), str(tmp_path / "out"), spark=spark_session, progress=False)
    assert res.nodes == 2 and res.workers == 3
    assert res.bad_lines == 1
    summary = {row["node"]: row.asDict()
               for row in spark_session.read.parquet(str(tmp_path / "out" / "summary")).collect()}
    sa, sb = summary[node_a.decode()], summary[node_b.decode()]
    assert sa["added"] == 30 and sa["delivered"] == 10 and sa["acked"] == 10
    assert sb["added"] == 20 and sb["acked"] == 0
    assert summary["TOTAL"]["added"] == 50
    assert res.report_path and (tmp_path / "out" / "report").exists()
    pngs = list((tmp_path / "out" / "report").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
