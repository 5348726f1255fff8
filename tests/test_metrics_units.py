"""Metrics exposition, and the HTTP server's request interface, in process (no disque
server; the HTTP server listens on a real socket)."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from disque.metrics import prom

pytestmark = pytest.mark.unit

NODE = {"id": "a" * 40, "addr": "127.0.0.1:7711", "uptime_s": 1.5, "clients": 3, "commands": 10,
        "connections": 4, "net_in": 100, "net_out": 200, "fe_rss": 1 << 20, "fe_cpu_user": 0.5,
        "fe_cpu_sys": 0.25, "cluster_known": 3, "cluster_reachable": 2}


def worker(i, **extra):
    return dict({
        "index": i, "pid": 100 + i, "jobs": 5, "queued": 3, "queues": 2, "blocked": 1, "ops": 77,
        "added": 9, "delivered": 4, "acked": 2, "nacked": 1, "requeued": 1, "expired": 0,
        "deleted": 1, "data_bytes": 1234, "bus_in": {"REPLJOB": 2}, "bus_out": {"GOTJOB": 2},
        "command_usec": {"addjob": 30, "getjob": 12}, "commands": {"addjob": 9, "getjob": 3},
        "latency_counts": [5, 4, 2, 1] + [0] * 10,
        "top_queues": [{"queue": 'we"ird\\q\nx', "len": 3, "jobs_in": 9, "jobs_out": 6},
                       {"queue": "ünïcode", "len": 1, "jobs_in": 1, "jobs_out": 0}],
        "rss": 2 << 20, "cpu_user": 1.25, "cpu_sys": 0.5, "uptime_s": 3.0}, **extra)


def test_our_writer_gives_the_bytes_of_prometheus_client():
    collector = prom.NodeCollector(NODE, [worker(0), worker(1, dead_lettered=4)])
    assert prom.write_text(collector) == prom.render_with_prometheus_client(collector)


def test_histogram_is_cumulative_with_sum_and_count():
    text = prom.render(NODE, [worker(0)]).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    h = fams["disque_command_duration_seconds"]
    assert h.type == "histogram"
    buckets = [(s.labels["le"], s.value) for s in h.samples if s.name.endswith("_bucket")]
    assert buckets[0] == ("1e-05", 5.0) and buckets[1] == ("2e-05", 9.0)
    assert buckets[-1] == ("+Inf", 12.0)
    count = [s.value for s in h.samples if s.name.endswith("_count")]
    total = [s.value for s in h.samples if s.name.endswith("_sum")]
    assert count == [12.0] and total == [pytest.approx(42e-6)]


def test_dead_letter_counter_appears_when_a_worker_counts_it():
    text = prom.render(NODE, [worker(0)]).decode()
    assert "disque_jobs_dead_lettered" not in text
    text = prom.render(NODE, [worker(0), worker(1, dead_lettered=4)]).decode()
    assert 'disque_jobs_dead_lettered_total{node="%s",worker="1"} 4.0' % ("a" * 40) in text
    # what the workers really report: counts by origin queue (docs/job-features.md)
    text = prom.render(NODE, [worker(0, dead_lettered={}),
                              worker(1, dead_lettered={"q1": 3, "q2": 1})]).decode()
    assert 'disque_jobs_dead_lettered_total{node="%s",worker="1"} 4.0' % ("a" * 40) in text
    assert 'disque_queue_dead_lettered_total{node="%s",queue="q1",worker="1"} 3.0' % ("a" * 40) in text


class FakeFrontend:
    """Records control_all calls; the test answers them (the real one is tested over TCP)."""

    def __init__(self):
        self.calls = []

    def control_all(self, name, arg, done):
        self.calls.append((name, arg, done))


def test_concurrent_requests_share_one_round_per_argument():
    from disque.metrics.endpoint import Coalesced
    fe = FakeFrontend()
    c = Coalesced(fe, "queues")
    got = []
    c.get(20, lambda r: got.append(("a", r)))
    c.get(20, lambda r: got.append(("b", r)))
    c.get(50, lambda r: got.append(("c", r)))
    assert [(n, a) for n, a, _ in fe.calls] == [("queues", 20), ("queues", 50)]
    fe.calls[0][2](["x"])
    assert got == [("a", ["x"]), ("b", ["x"])]
    c.get(20, lambda r: got.append(("d", r)))       # a new round once the first answered
    assert len(fe.calls) == 3
    fe.calls[1][2](["y"])
    assert got[-1] == ("c", ["y"])


def test_http_request_interface_on_a_real_socket():
    """What endpoint handlers see of a request (docs/metrics.md) and what they may answer:
    url-decoded query (the last value wins), percent-decoded path, cookies, the body of a
    POST, the client's address, keep-alive, repeated answer headers; respond() later."""
    import asyncio
    import http.client
    import socket
    import threading

    import uvloop

    from disque.metrics.http import HttpServer

    loop = uvloop.new_event_loop()
    seen = []

    def handler(req, respond):
        seen.append(req)
        loop.call_later(0.01, respond, 200, "text/plain", b"ok\n",
                        (("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")))

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    srv = HttpServer(loop, handler)
    loop.run_until_complete(srv.listen([sock]))
    out = {}

    def client():
        try:
            c = http.client.HTTPConnection("127.0.0.1", sock.getsockname()[1], timeout=5)
            c.request("GET", "/a%20b?x=1&x=%32&y=a+b&z", headers={"Cookie": "s=1; t=two"})
            r = c.getresponse()
            out["get"] = (r.status, r.msg.get_all("Set-Cookie"), r.read(), c.sock.getsockname())
            c.request("POST", "/p", body=b"k=v&w", headers={"Content-Type": "text/plain"})
            r = c.getresponse()
            out["post"] = (r.status, r.read())
            c.request("GET", "/after-the-body")         # the body was framed right
            r = c.getresponse()
            out["next"] = (r.status, r.read())
            c.close()
        finally:
            loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=client)
    t.start()
    loop.run_forever()
    t.join()
    srv.close()
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    sock.close()
    status, cookies, body, local = out["get"]
    assert status == 200 and body == b"ok\n" and cookies == ["a=1", "b=2"]
    get, post, after = seen
    assert (get.method, get.path, get.body) == ("GET", "/a b", b"")
    assert get.query == {"x": "2", "y": "a b", "z": ""}
    assert get.cookies == {"s": "1", "t": "two"}
    assert get.headers.get("cookie") == "s=1; t=two" and get.headers.get("COOKIE")
    assert get.remote == "%s:%d" % local[:2] and get.keep_alive
    assert out["post"] == (200, b"ok\n")
    assert (post.method, post.path, post.body, post.cookies) == ("POST", "/p", b"k=v&w", {})
    assert out["next"] == (200, b"ok\n") and after.path == "/after-the-body"
    assert srv.stats["requests"] == 3 and srv.stats["bad_requests"] == 0
