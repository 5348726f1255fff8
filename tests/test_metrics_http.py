"""The metrics port on one node (--workers 3): exact Prometheus figures after a scripted
workload, the JSON API, requirepass on HTTP, and bad HTTP that must neither crash nor block
the node (docs/metrics.md)."""
import json
import os
import signal
import socket
import time

import pytest
from metrics_helpers import by_worker, get_json, http_get, metrics_node, scrape, total  # noqa: F401
from support.resp_client import RawConn
from support.slots import queues_on_distinct_workers
from support.waits import wait_until

from disque.metrics.http import BODY_LIMIT, MAX_CONNECTIONS

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
    assert total(fams, "disque_job_groups") == 0 and total(fams, "disque_jobs_held") == 0
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
    # every worker's CPU, as the kernel counts it (a worker forked at start-up may have
    # used less than the kernel's 10 ms tick on this small workload)
    cpu = by_worker(fams, "disque_cpu_seconds", mode="user")
    assert sorted(cpu) == ["0", "1", "2"] and all(v >= 0 for v in cpu.values()), cpu
    for pid in srv.worker_pids():
        with open("/proc/%d/stat" % pid) as f:
            utime = int(f.read().rsplit(")", 1)[1].split()[11]) / os.sysconf("SC_CLK_TCK")
        assert min(cpu.values()) <= utime + 0.05
    assert total(fams, "disque_connected_clients") >= 1
    # the same figures as INFO workerstats
    info = srv.execute("INFO", "workerstats").decode()
    recs = [json.loads(line.split(":", 1)[1]) for line in info.splitlines()
            if line.startswith("worker")]
    # schema v2 records (docs/stats-schema.md): zero counters are left out
    assert sum(r.get("j", {}).get("add", 0) for r in recs) == 12
    assert {str(r["w"]): r.get("j", {}).get("dlv", 0) for r in recs} == \
        by_worker(fams, "disque_jobs_delivered")


def test_job_groups_and_held_jobs_are_gauges(metrics_node):
    """docs/job-groups.md: groups with jobs, jobs held behind their head; a held job is not
    counted active (it was never delivered)."""
    srv, mport = metrics_node(workers=2)
    r = srv.client()
    for key in ("a", "b"):
        for _ in range(3):
            r.execute_command("ADDJOB", "mg", b"x", 0, "GROUP", key)
    assert len(r.execute_command("GETJOB", "COUNT", 5, "FROM", "mg")) == 2     # the heads
    fams = scrape(mport)
    assert total(fams, "disque_job_groups") == 2
    assert total(fams, "disque_jobs_held") == 4
    assert total(fams, "disque_jobs_active") == 2
    assert total(fams, "disque_jobs_queued") == 0


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
    assert len(get_json(mport, "/api/queues?limit=3&limit=%32")) == 2    # decoded, last wins
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
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (BODY_LIMIT + 1)
     + b"x" * (BODY_LIMIT + 1), b"413"),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"400"),
    (b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"405"),
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
        wait_until(lambda: raw_http(mport, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 2).startswith(b"HTTP/1.1 503"),
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


def status_of(reply):
    """The status code of the first answer in `reply` (HTTP/1.0 or 1.1), or None."""
    head = reply.split(b"\r\n", 1)[0].split(b" ")
    return int(head[1]) if len(head) > 1 and head[0] in (b"HTTP/1.0", b"HTTP/1.1") else None


def answers(reply):
    """[(status, {lower-case header: [values]}, body)] of the answers in `reply`."""
    out = []
    while reply:
        head, _, reply = reply.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), []).append(value.strip())
        n = int(headers.get("content-length", ["0"])[0])
        body, reply = reply[:n], reply[n:]
        out.append((int(lines[0].split(" ")[1]), headers, body))
    return out


SERVER_405 = b"only GET, HEAD and POST\n"
SECURITY = {"x-content-type-options": ["nosniff"], "x-frame-options": ["DENY"],
            "referrer-policy": ["no-referrer"], "cache-control": ["no-store"]}


def assert_common_headers(headers):
    assert {k: headers.get(k) for k in SECURITY} == SECURITY, headers
    assert headers["content-type"] and headers["content-length"] and headers["date"]
    assert "content-security-policy" not in headers


# the heads the hand-written parser's unit test checked, now through aiohttp on the real
# port (what differs: HTTP/1.1 needs Host (RFC 9112: 400), "HTTP/3" is a malformed version
# (400), a GET with a body gets 400 instead of 413)
HEADS = [
    (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 200),
    (b"GET /metrics?x=1 HTTP/1.0\r\nHost: a\r\nAuthorization: Basic eDp5\r\n\r\n", 200),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 200),
    (b"GET / HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/1.1 extra\r\nHost: a\r\n\r\n", 400),
    (b"G\x00T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    (b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    (b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505),
    (b"GET / HTTP/3\r\nHost: a\r\n\r\n", 400),
    (b"GET / FTP/1.1\r\nHost: a\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789", 400),
    (b"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab", 400),
    (b"GET / HTTP/1.1\r\nHost: a" + b"\r\nX: y" * 64 + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\nHost: a" + b"\r\nX: " + b"y" * 500 * 20 + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\nHost: a" + (b"\r\nX: " + b"y" * 500) * 20 + b"\r\n\r\n", 431),
]


def test_request_heads_and_keep_alive_rules_on_the_port(metrics_node):
    srv, mport = metrics_node(workers=1)
    for data, status in HEADS:
        reply = raw_http(mport, data)
        assert status_of(reply) == status, (data[:60], reply[:120])
        assert_common_headers(answers(reply)[0][1])
    assert srv.all_alive()

    def exchange(s, data, n):
        s.sendall(data)
        out = b""
        while len(answers_or_none(out)) < n:
            chunk = s.recv(65536)
            assert chunk, out
            out += chunk
        return answers(out)

    def closed(s):
        s.settimeout(2)
        try:
            return s.recv(1) == b""
        except ConnectionResetError:
            return True

    get11 = b"GET /api/cluster HTTP/1.1\r\nHost: a\r\n\r\n"
    cases = [(get11, True), (b"GET /api/cluster HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", False),
             (b"GET /api/cluster HTTP/1.0\r\n\r\n", False),
             (b"GET /api/cluster HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", True)]
    for data, keep in cases:
        with socket.create_connection(("127.0.0.1", mport), timeout=5) as s:
            assert exchange(s, data, 1)[0][0] == 200
            if keep:
                assert exchange(s, get11, 1)[0][0] == 200       # the same connection again
            else:
                assert closed(s), data


def answers_or_none(reply):
    """answers() of the complete answers at the start of `reply`."""
    try:
        got = answers(reply)
    except (ValueError, IndexError):
        return []
    if got and int(got[-1][1].get("content-length", ["0"])[0]) > len(got[-1][2]):
        got.pop()
    return got


def test_post_bodies_methods_head_and_security_headers(metrics_node):
    srv, mport = metrics_node(workers=1)
    # a POST with a small body reaches the endpoint, which answers by path (404 here, or
    # its own 405 for a path that takes no POST): not the server's refusal
    post = b"POST /nope HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello=world"
    status, headers, body = answers(raw_http(mport, post))[0]
    assert status in (404, 405) and body != SERVER_405, (status, body)
    assert_common_headers(headers)
    chunked = b"POST /nope HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert status_of(raw_http(mport, chunked)) == status
    # one byte over the limit: 413, the connection is closed, the node keeps serving
    for n, expect in ((BODY_LIMIT, status), (BODY_LIMIT + 1, 413)):
        big = b"POST /nope HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % n + b"x" * n
        reply = raw_http(mport, big)
        assert status_of(reply) == expect, reply[:100]
    assert answers(reply)[0][1]["connection"] == ["close"]
    big_chunked = (b"POST /nope HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                   + b"%x\r\n" % (BODY_LIMIT + 1) + b"x" * (BODY_LIMIT + 1) + b"\r\n0\r\n\r\n")
    assert status_of(raw_http(mport, big_chunked)) == 413
    assert_node_serves(srv, mport)
    # other methods: 405 with Allow
    for method in (b"PUT", b"DELETE", b"PATCH", b"OPTIONS"):
        status, headers, body = answers(raw_http(mport, method + b" /metrics HTTP/1.1\r\nHost: a\r\n\r\n"))[0]
        assert status == 405 and headers["allow"] == ["GET, HEAD, POST"], method
        assert body == SERVER_405
        assert_common_headers(headers)
    # HEAD: the headers of GET (Content-Length included), no body; the next answer follows
    # right after the head
    with socket.create_connection(("127.0.0.1", mport), timeout=5) as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /nope HTTP/1.1\r\nHost: a\r\n\r\n")
        out = b""
        while out.count(b"not found\n") < 1:
            chunk = s.recv(65536)
            assert chunk
            out += chunk
    head, rest = out.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and rest.startswith(b"HTTP/1.1 404")
    dashboard = http_get(mport, "/")
    assert b"content-length: %d" % len(dashboard[2]) in head.lower()
    assert http_get(mport, "/metrics")[1]["x-frame-options"] == "DENY"
    assert srv.all_alive()


def test_a_head_sent_byte_by_byte_gets_408_after_the_head_timeout(metrics_node, monkeypatch):
    monkeypatch.setenv("DISQUE_METRICS_HEAD_TIMEOUT", "1")
    srv, mport = metrics_node(workers=1)
    head = b"GET /metrics HTTP/1.1\r\nHost: a\r\nUser-Agent: slow\r\n\r\n"
    with socket.create_connection(("127.0.0.1", mport), timeout=5) as s:
        t0 = time.monotonic()
        try:
            for byte in head:                   # 0.1 s a byte: 5 s for the head
                s.sendall(bytes([byte]))
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(5)
        reply = b""
        while True:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            reply += chunk
        assert status_of(reply) == 408, reply[:100]
        assert_common_headers(answers(reply)[0][1])
        assert time.monotonic() - t0 < 4.5      # not stretched by the trickle
    # the same, on a keep-alive connection after a first request
    with socket.create_connection(("127.0.0.1", mport), timeout=5) as s:
        s.sendall(b"GET /api/cluster HTTP/1.1\r\nHost: a\r\n\r\nGET /met")
        s.settimeout(5)
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        assert [a[0] for a in answers(reply)] == [200, 408]
    assert_node_serves(srv, mport)


def test_the_connection_after_the_limit_gets_503_and_close(metrics_node):
    srv, mport = metrics_node(workers=1)
    held = []
    try:
        for _ in range(MAX_CONNECTIONS):        # all held, each answered once
            s = socket.create_connection(("127.0.0.1", mport), timeout=5)
            held.append(s)
            s.sendall(b"GET /api/cluster HTTP/1.1\r\nHost: a\r\n\r\n")
            out = b""
            while not answers_or_none(out):
                out += s.recv(65536)
            assert status_of(out) == 200
        reply = raw_http(mport, b"GET /api/cluster HTTP/1.1\r\nHost: a\r\n\r\n", 2)
        status, headers, _ = answers(reply)[0]
        assert status == 503 and headers["connection"] == ["close"], reply[:200]
        assert_common_headers(headers)
        with RawConn(srv.port, timeout=2.0) as c:
            assert c.execute("PING") == b"PONG"
        held.pop().close()                      # one leaves: the next one is served
        wait_until(lambda: status_of(raw_http(mport, b"GET /api/cluster HTTP/1.1\r\nHost: a\r\n\r\n", 2)) == 200,
                   timeout=5)
    finally:
        for s in held:
            s.close()
    assert srv.all_alive()
