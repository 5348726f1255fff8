"""The metrics port on one node (--workers 3): exact Prometheus figures after a scripted
workload, the JSON API, requirepass on HTTP, and bad HTTP that must neither crash nor block
the node (docs/metrics.md)."""
import json
import os
import signal
import socket
import time

import pytest

from support.resp_client import RawConn
from support.slots import queues_on_distinct_workers
from support.waits import wait_until
from metrics_helpers import by_worker, get_json, http_get, metrics_node, scrape, total  # noqa: F401

pytestmark = pytest.mark.server


def workload(srv):
    """Three queues on three workers: 6 / 4 / 2 jobs; 5 delivered, 3 acked, 1 nacked."""
    r = srv.client()
    qa, qb, qc = queues_on_distinct_workers("mq", nworkers=3)
    for q, n in ((qa, 6), (qb, 4), (qc, 2)):
        for _ in range(n):
            r.execute_command("ADDJOB", q, b"body", 0)
    got = r.execute_command("GETJOB", "COUNT", 5, "FROM", qa)
    assert len(got) == 5
    ids = [j[1] for j in got]
    assert r.execute_command("ACKJOB", *ids[:3]) == 3
    assert r.execute_command("NACK", ids[3]) == 1
    return qa, qb, qc


def test_exact_counters_after_a_scripted_workload(metrics_node):
    srv, mport = metrics_node(workers=3)
    qa, qb, qc = workload(srv)
    fams = scrape(mport)
    node = srv.execute("CLUSTER", "MYID").decode()
    assert total(fams, "disque_node_info", node=node) == 1
    assert total(fams, "disque_jobs_added") == 12
    assert sorted(by_worker(fams, "disque_jobs_added").values()) == [2, 4, 6]
    assert total(fams, "disque_jobs_delivered") == 5
    assert total(fams, "disque_jobs_acked") == 3
    assert total(fams, "disque_jobs_nacked") == 1
    assert total(fams, "disque_jobs_requeued") == 0
    assert total(fams, "disque_jobs_expired") == 0
    assert total(fams, "disque_jobs_dead_lettered") == 0      # no MAXDELIVERIES in this workload
    assert total(fams, "disque_jobs") == 9                     # 12 - 3 acked
    assert total(fams, "disque_jobs_queued") == 8              # 1 + 1 nacked, 4, 2
    assert total(fams, "disque_jobs_active") == 1
    assert total(fams, "disque_queues") == 3
    assert total(fams, "disque_commands", command="addjob") == 12
    assert total(fams, "disque_commands", command="getjob") >= 1
    # the service-time histogram is a real one: cumulative buckets up to +Inf = _count
    for w in ("0", "1", "2"):
        buckets = [(s.labels["le"], s.value) for s in fams["disque_command_duration_seconds"].samples
                   if s.name.endswith("_bucket") and s.labels["worker"] == w]
        assert buckets[-1][0] == "+Inf"
        values = [v for _, v in buckets]
        assert values == sorted(values)
        count = total(fams, "disque_command_duration_seconds",
                      "disque_command_duration_seconds_count", worker=w)
        assert values[-1] == count == total(fams, "disque_commands", worker=w)
        assert total(fams, "disque_command_duration_seconds",
                     "disque_command_duration_seconds_sum", worker=w) > 0
    assert total(fams, "disque_queue_length", queue=qa) == 2
    assert total(fams, "disque_queue_length", queue=qb) == 4
    assert total(fams, "disque_queue_jobs_in", queue=qa) == 7     # 6 added + 1 nacked
    assert total(fams, "disque_queue_jobs_out", queue=qa) == 5
    assert total(fams, "disque_memory_rss_bytes") > 0
    assert total(fams, "disque_memory_data_bytes") > 0
    assert total(fams, "disque_cpu_seconds", mode="user") > 0
    assert total(fams, "disque_connected_clients") >= 1
    # the same figures as INFO workerstats
    info = srv.execute("INFO", "workerstats").decode()
    recs = [json.loads(line.split(":", 1)[1]) for line in info.splitlines()
            if line.startswith("worker")]
    # schema v2 records (docs/stats-schema.md): zero counters are left out
    assert sum(r.get("j", {}).get("add", 0) for r in recs) == 12
    assert {str(r["w"]): r.get("j", {}).get("dlv", 0) for r in recs} == \
        by_worker(fams, "disque_jobs_delivered")


def test_api_endpoints_and_dashboard_page(metrics_node):
    srv, mport = metrics_node(workers=3)
    qa, qb, qc = workload(srv)
    srv.execute("PAUSE", qc, "out")
    node = get_json(mport, "/api/node")
    assert node["workers"] == 3 and node["added"] == 12 and node["queued"] == 8
    assert node["id"] == srv.execute("CLUSTER", "MYID").decode()
    workers = get_json(mport, "/api/workers")
    assert sorted(w["worker"] for w in workers) == [0, 1, 2]
    assert sum(w["added"] for w in workers) == 12
    queues = get_json(mport, "/api/queues")
    assert [q["queue"] for q in queues] == [qb] + sorted([qa, qc])    # by length, then name
    by_name = {q["queue"]: q for q in queues}
    assert by_name[qa]["len"] == 2 and by_name[qa]["jobs_in"] == 7 and by_name[qa]["jobs_out"] == 5
    assert by_name[qc]["paused"] == "out" and by_name[qa]["paused"] == "none"
    assert by_name[qb]["oldest_ms"] >= 0
    assert len(get_json(mport, "/api/queues?limit=1")) == 1
    cluster = get_json(mport, "/api/cluster")
    assert cluster["nodes"][0]["myself"] and cluster["nodes"][0]["state"] == "ok"
    overview = get_json(mport, "/api/overview")
    assert set(overview) == {"node", "cluster", "workers", "queues"}
    status, headers, body = http_get(mport, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"api/overview" in body and b"http://" not in body and b"https://" not in body
    assert http_get(mport, "/nope")[0] == 404


def test_requirepass_is_enforced_on_http_unless_metrics_auth_no(metrics_node):
    srv, mport = metrics_node(workers=1)
    assert http_get(mport, "/metrics")[0] == 200
    r = srv.raw()
    assert r.execute("CONFIG", "SET", "requirepass", "s3cret") == b"OK"     # read per request
    for path in ("/metrics", "/", "/api/overview"):
        status, headers, _ = http_get(mport, path)
        assert status == 401 and headers["www-authenticate"].startswith("Basic")
        assert http_get(mport, path, password="wrong")[0] == 401
        assert http_get(mport, path, password="s3cret")[0] == 200
    assert r.execute("AUTH", "s3cret") == b"OK"
    assert r.execute("CONFIG", "SET", "metrics-auth", "no") == b"OK"
    assert http_get(mport, "/metrics")[0] == 200
    assert r.execute("CONFIG", "SET", "metrics-auth", "yes") == b"OK"
    assert http_get(mport, "/metrics")[0] == 401
    assert r.execute("CONFIG", "SET", "requirepass", "") == b"OK"      # the fixture's PINGs


def raw_http(port, data, timeout=5.0):
    """Send raw bytes; return everything received until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
        return out


def assert_node_serves(srv, mport):
    with RawConn(srv.port, timeout=2.0) as c:
        assert c.execute("PING") == b"PONG"
    assert http_get(mport, "/metrics", timeout=2.0)[0] == 200


BAD_REQUESTS = [
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"\x00\xff\xfe binary\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/2.0\r\n\r\n", b"505"),
    (b"GET metrics HTTP/1.1\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n", b"400"),
    (b"GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n", b"400"),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"413"),
    (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"400"),
    (b"DELETE /metrics HTTP/1.1\r\n\r\n", b"405"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
    (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n", b"431"),
    (b"GET /" + b"a" * 20000, b"431"),
]


def test_bad_requests_get_an_error_and_the_node_keeps_serving(metrics_node):
    srv, mport = metrics_node(workers=1)
    for data, status in BAD_REQUESTS:
        reply = raw_http(mport, data)
        assert reply.startswith(b"HTTP/1.1 " + status), (data[:40], reply[:100])
        assert srv.all_alive()
        assert_node_serves(srv, mport)


def test_keep_alive_and_pipelined_requests_are_answered_in_order(metrics_node):
    srv, mport = metrics_node(workers=2)
    with socket.create_connection(("127.0.0.1", mport), timeout=5) as s:
        s.sendall(b"GET /api/cluster HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
        out = b""
        while out.count(b"HTTP/1.1 ") < 2:
            chunk = s.recv(65536)
            assert chunk
            out += chunk
    first, second = out.split(b"HTTP/1.1 ")[1:3]
    assert first.startswith(b"200") and second.startswith(b"404")


def test_slow_and_idle_http_clients_neither_block_nor_exhaust_the_node(metrics_node, monkeypatch):
    monkeypatch.setenv("DISQUE_METRICS_HEAD_TIMEOUT", "1")
    srv, mport = metrics_node(workers=1)
    slow = [socket.create_connection(("127.0.0.1", mport), timeout=5) for _ in range(10)]
    try:
        for s in slow:
            s.sendall(b"GET /metr")             # a head that never ends (slowloris)
        # meanwhile clients and scrapes are served at once
        t0 = time.monotonic()
        for _ in range(5):
            assert_node_serves(srv, mport)
        assert time.monotonic() - t0 < 2.0
        # each slow client gets 408 and is closed after the head timeout
        for s in slow:
            s.settimeout(5)
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            assert data.startswith(b"HTTP/1.1 408")
    finally:
        for s in slow:
            s.close()
    # connections beyond the limit are refused with 503, the node stays up
    held = [socket.create_connection(("127.0.0.1", mport), timeout=5) for _ in range(70)]
    try:
        wait_until(lambda: raw_http(mport, b"GET / HTTP/1.1\r\n\r\n", 2).startswith(b"HTTP/1.1 503"),
                   timeout=5)
        with RawConn(srv.port, timeout=2.0) as c:
            assert c.execute("PING") == b"PONG"
    finally:
        for s in held:
            s.close()
    wait_until(lambda: http_get(mport, "/metrics", timeout=2.0)[0] == 200, timeout=5)
    assert srv.all_alive()


def test_busy_metrics_port_fails_fast_with_one_line(start_server):
    from support.ports import lease_port
    lease = lease_port()
    blocker = socket.socket()
    try:
        blocker.bind(("127.0.0.1", lease.port))
        blocker.listen(1)
        srv = start_server(workers=1, extra_args=["--metrics-port", lease.port], wait=False)
        srv.proc.wait(timeout=30)
        assert srv.proc.returncode == 1
        assert "metrics listening socket" in srv.log_text()
    finally:
        blocker.close()
        lease.release()


def test_a_stuck_worker_gets_503_after_the_response_timeout(metrics_node, monkeypatch):
    monkeypatch.setenv("DISQUE_METRICS_RESPONSE_TIMEOUT", "1")
    srv, mport = metrics_node(workers=2)
    stuck = srv.worker_pids()[0]
    os.kill(stuck, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        status, _, body = http_get(mport, "/metrics", timeout=10)
        assert status == 503 and 0.9 < time.monotonic() - t0 < 5, (status, body)
        assert http_get(mport, "/api/cluster")[0] == 200          # needs no worker
        assert http_get(mport, "/")[0] == 200
    finally:
        os.kill(stuck, signal.SIGCONT)
    wait_until(lambda: http_get(mport, "/metrics")[0] == 200, timeout=10)
    assert srv.all_alive()
