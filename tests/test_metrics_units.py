"""Metrics exposition and HTTP parsing, in process (no server)."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from disque.metrics import prom
from disque.metrics.http import BadRequest, parse_head

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


@pytest.mark.parametrize("head, status", [
    (b"GET / HTTP/1.1", None),
    (b"GET /metrics?x=1 HTTP/1.0\r\nHost: a\r\nAuthorization: Basic eDp5", None),
    (b"GET / HTTP/1.1\r\nContent-Length: 0", None),
    (b"", 400),
    (b"GET  / HTTP/1.1", 400),
    (b"GET / HTTP/1.1 extra", 400),
    (b"G\x00T / HTTP/1.1", 400),
    (b"GET /\xff HTTP/1.1", 400),
    (b"GET * HTTP/1.1", 400),
    (b"GET / HTTP/3", 505),
    (b"GET / FTP/1.1", 400),
    (b"GET / HTTP/1.1\r\nNoColon", 400),
    (b"GET / HTTP/1.1\r\n: empty", 400),
    (b"GET / HTTP/1.1\r\nX: a\x01b", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: -1", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: 10", 413),
    (b"GET / HTTP/1.1" + b"\r\nX: y" * 65, 431),
])
def test_request_head_parser(head, status):
    if status is None:
        req = parse_head(head)
        assert req.method == "GET" and req.path.startswith("/")
    else:
        with pytest.raises(BadRequest) as e:
            parse_head(head)
        assert e.value.status == status


def test_keep_alive_rules():
    assert parse_head(b"GET / HTTP/1.1").keep_alive
    assert not parse_head(b"GET / HTTP/1.1\r\nConnection: close").keep_alive
    assert not parse_head(b"GET / HTTP/1.0").keep_alive
    assert parse_head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive").keep_alive
    assert parse_head(b"GET /api/queues?limit=5&x HTTP/1.1").query == {"limit": "5", "x": ""}


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
