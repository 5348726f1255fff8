"""The metrics port on a 3-node cluster: each node's /metrics counts exactly what the
workload did on it (copies, acks propagated), and /api/cluster lists the nodes."""
import pytest

from support.cluster import CLUSTER_NODE_TIMEOUT
from support.info import parse_info
from support.waits import wait_until
from metrics_helpers import get_json, metrics_node, scrape, total  # noqa: F401

pytestmark = pytest.mark.cluster


def test_three_nodes_expose_exact_figures(metrics_node):
    nodes = [metrics_node(workers=2, extra_args=["--cluster-node-timeout", CLUSTER_NODE_TIMEOUT,
                                                 "--cluster-job-links", "direct"])
             for _ in range(3)]
    for i in (1, 2):
        assert nodes[i][0].execute("CLUSTER", "MEET", "127.0.0.1", nodes[i - 1][0].port) == b"OK"
    wait_until(lambda: all(int(parse_info(srv.execute("CLUSTER", "INFO"))["cluster_reachable_nodes"]) == 2
                           for srv, _ in nodes), timeout=20, message="cluster mesh did not form")
    (n0, m0), (n1, m1), (n2, m2) = nodes
    # every worker linked to the 2 workers of each other node (docs/design.md, "Direct job links")
    wait_until(lambda: all(total(scrape(m), "disque_job_links_up") == 8 for _, m in nodes),
               timeout=15, message="direct job links did not come up")
    r = n0.client()
    for _ in range(10):
        r.execute_command("ADDJOB", "cq", b"body", 0, "REPLICATE", 3)
    got = r.execute_command("GETJOB", "COUNT", 4, "FROM", "cq")
    assert r.execute_command("ACKJOB", *[j[1] for j in got]) == 4

    # acks reach the copies: every node ends with the 6 jobs left
    wait_until(lambda: all(total(scrape(m), "disque_jobs") == 6 for m in (m0, m1, m2)),
               timeout=15, message="acks did not propagate")
    f0, f1, f2 = scrape(m0), scrape(m1), scrape(m2)
    assert total(f0, "disque_jobs_added") == 10
    assert total(f0, "disque_jobs_delivered") == 4
    assert total(f0, "disque_jobs_acked") == 4
    assert total(f0, "disque_jobs_queued") == 6
    assert total(f0, "disque_queue_length", queue="cq") == 6
    assert total(f0, "disque_commands", command="addjob") == 10
    assert total(f0, "disque_cluster_reachable_nodes") == 2
    for f in (f1, f2):
        assert total(f, "disque_jobs_added") == 0
        assert total(f, "disque_jobs_queued") == 0                # copies wait, not queued
        assert total(f, "disque_jobs_active") == 6
        assert total(f, "disque_bus_messages", type="REPLJOB", direction="in") == 10
        assert total(f, "disque_cluster_known_nodes") == 3
        # the copies came worker to worker, and the GOTJOBs went back the same way
        assert total(f, "disque_job_link_messages", direction="in", path="direct") >= 10
        assert total(f, "disque_job_link_messages", direction="out", path="direct") >= 10
    assert total(f0, "disque_job_link_messages", direction="out", path="direct") >= 20
    # counted once per job: one bus entry is addressed to both replicas
    assert total(f0, "disque_bus_messages", type="REPLJOB", direction="out") == 10
    ids = {srv.execute("CLUSTER", "MYID").decode() for srv, _ in nodes}
    for f in (f0, f1, f2):
        assert {s.labels["node"] for s in f["disque_jobs_added"].samples} <= ids

    cluster = get_json(m1, "/api/cluster")
    assert cluster["size"] == 3 and cluster["reachable"] == 2
    assert {n["id"] for n in cluster["nodes"]} == ids
    assert all(n["state"] == "ok" for n in cluster["nodes"])
    assert [n["myself"] for n in cluster["nodes"]].count(True) == 1
