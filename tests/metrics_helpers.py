"""Shared by the metrics-port tests: start a node with the HTTP endpoint, fetch and parse
/metrics with prometheus_client's own parser."""
import base64
import http.client
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.ports import lease_port


@pytest.fixture
def metrics_node(start_server):
    """Factory: metrics_node(workers=3, extra_args=()) -> (server, metrics port). The metrics
    port is leased like the client ports, and released at teardown."""
    leases = []

    def factory(workers=3, extra_args=()):
        lease = lease_port()
        leases.append(lease)
        srv = start_server(workers=workers,
                           extra_args=["--metrics-port", lease.port, *extra_args])
        return srv, lease.port

    yield factory
    for lease in leases:
        lease.release()


def http_get(port, path, password=None, timeout=10.0):
    """(status, headers dict, body bytes) of one GET."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {}
    if password is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(b"any:" + password.encode()).decode()
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get_json(port, path, password=None):
    status, _, body = http_get(port, path, password)
    assert status == 200, (status, body[:200])
    return json.loads(body)


def scrape(port, password=None):
    """{family name: family} parsed by prometheus_client."""
    status, headers, body = http_get(port, "/metrics", password)
    assert status == 200, (status, body[:200])
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def total(families, family, sample=None, **labels):
    """Sum of the samples of `family` (sample name defaults to the family's own, or
    <family>_total for counters) whose labels include `labels`."""
    fam = families[family]
    name = sample or (family + "_total" if fam.type == "counter" else family)
    return sum(s.value for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def by_worker(families, family, **labels):
    out = {}
    fam = families[family]
    name = family + "_total" if fam.type == "counter" else family
    for s in fam.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            out[s.labels["worker"]] = out.get(s.labels["worker"], 0) + s.value
    return out
