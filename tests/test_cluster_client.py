"""disque.client on a real 3-node cluster (--workers 2): failover when the node in use is
killed, a consumer that moves to the node producing its jobs (and the NEEDJOBS / YOURJOBS
traffic that stops), one that stays for a 50/50 split, job-ID commands sent to the job's
node, a leaving node, and a node list kept current."""
import threading
import time

import pytest

from disque.client import Disque, errors
from metrics_helpers import scrape, total
from support.cluster import DisqueCluster
from support.clients import Api
from support.info import parse_info
from support.ports import lease_port
from support.waits import wait_until

FEDERATION = ("NEEDJOBS", "YOURJOBS")


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


@pytest.fixture
def clients():
    made = []

    def factory(kind, *nodes, **options):
        api = Api(kind, *("127.0.0.1:%d" % n.port for n in nodes), **options)
        made.append(api)
        return api
    yield factory
    for api in made:
        api.close()


@pytest.fixture
def metrics_cluster(start_server):
    """A joined cluster whose nodes each have a metrics port (`node.metrics_port`), to read
    the bus messages by type."""
    leases = []

    def node(workers, extra_args, wait):
        lease = lease_port()
        leases.append(lease)
        srv = start_server(workers=workers, wait=wait,
                           extra_args=[*extra_args, "--metrics-port", lease.port])
        srv.metrics_port = lease.port
        return srv

    def factory(n=3, workers=2):
        return DisqueCluster(node, n, workers=workers).join()
    yield factory
    for lease in leases:
        lease.release()


def federation_messages(cluster):
    """NEEDJOBS and YOURJOBS sent, summed over the nodes."""
    count = 0
    for node in cluster.nodes:
        families = scrape(node.metrics_port)
        count += sum(total(families, "disque_bus_messages", type=t, direction="out")
                     for t in FEDERATION)
    return count


def calls(node, command):
    stats = parse_info(node.execute("INFO", "commandstats"))
    field = stats.get("cmdstat_" + command.lower())
    return 0 if field is None else int(field.split("calls=")[1].split(",")[0])


def calls_per_node(cluster, command, before, expected_total):
    """The calls of `command` each node ran since `before`, once they add up (INFO may show
    a worker's figures up to 100 ms late: docs/info-latency.md)."""
    def deltas():
        now = [calls(node, command) for node in cluster.nodes]
        diff = [y - x for x, y in zip(before, now)]
        return diff if sum(diff) == expected_total else None
    return wait_until(deltas, timeout=5, message="%s calls never added up" % command)


def test_failover_when_the_node_in_use_is_killed(start_cluster, clients, kind):
    c = start_cluster(3)
    api = clients(kind, c[0], failover_timeout=15)
    ids = [api.add_job("fo", b"%d" % i, replicate=2, retry=2) for i in range(20)]
    assert api.node == c.ids[0] and set(api.nodes) == set(c.ids)
    c.kill(0)
    t0 = time.monotonic()
    more = api.add_job("fo", b"after", replicate=2, retry=2)     # the next node, within the deadline
    assert time.monotonic() - t0 < 15
    assert api.node in c.ids[1:] and api.failovers >= 1
    got = set()
    wait_until(lambda: got.update(j.id for j in api.get_jobs("fo", count=50, timeout=0.5))
               or got >= set(ids) | {more}, timeout=30,
               message="jobs of the killed node not delivered by the others")
    assert api.ack_job(*got) >= 1


def test_a_consumer_moves_to_the_producing_node_and_federation_stops(metrics_cluster, clients,
                                                                      kind):
    c = metrics_cluster()
    producer = clients("sync", c[0], switch_window=0)
    for i in range(600):
        producer.add_job("moving", b"%d" % i, replicate=2)
    consumer = clients(kind, c[1], switch_window=100)
    received = {"before": 0, "after": 0}
    traffic = {}
    while sum(received.values()) < 600:
        before = not consumer.moves        # (the node is unknown before the first command)
        jobs = consumer.get_jobs("moving", count=10, timeout=2)
        assert jobs, "the consumer starved with %s jobs received" % received
        received["before" if before else "after"] += len(jobs)
        consumer.ack_job(*jobs)
        if consumer.moves and "move" not in traffic:
            traffic["move"] = federation_messages(c)
    traffic["end"] = federation_messages(c)
    assert consumer.moves == 1 and consumer.node == c.ids[0]
    assert received["before"] >= 100 and received["after"] > 300
    per_job_before = traffic["move"] / received["before"]
    per_job_after = (traffic["end"] - traffic["move"]) / received["after"]
    print("\nNEEDJOBS+YOURJOBS per job: %.3f on node B, %.3f after the move to A"
          % (per_job_before, per_job_after))
    assert per_job_before > 0.05
    assert per_job_after < per_job_before / 10


def test_a_consumer_fed_evenly_by_two_nodes_stays(start_cluster):
    c = start_cluster(3)
    a = Disque("127.0.0.1:%d" % c[0].port, switch_window=0)
    b = Disque("127.0.0.1:%d" % c[1].port, switch_window=0)
    consumer = Disque("127.0.0.1:%d" % c[1].port, switch_window=100)
    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set() and i < 2000:
            a.add_job("even", b"a", replicate=1)
            b.add_job("even", b"b", replicate=1)
            i += 1
            time.sleep(0.002)
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    got = {b"a": 0, b"b": 0}
    try:
        while sum(got.values()) < 1000:
            jobs = consumer.get_jobs("even", count=20, timeout=2)
            for job in jobs:
                got[job.body] += 1
            if jobs:
                consumer.ack_job(*jobs)
    finally:
        stop.set()
        producer.join(10)
        for client in (a, b, consumer):
            client.close()
    print("\njobs received from A and B: %d / %d" % (got[b"a"], got[b"b"]))
    assert consumer.moves == 0 and consumer.node == c.ids[1]


def test_job_id_commands_go_to_the_jobs_node(start_cluster, clients, kind):
    c = start_cluster(3)
    on_a = clients(kind, c[0])
    on_b = clients(kind, c[1])
    jid = on_a.add_job("routed", b"x", replicate=3)
    on_b.ping()
    assert on_b.node == c.ids[1]
    before = [calls(node, "ACKJOB") for node in c.nodes]
    assert on_b.ack_job(jid) == 1                  # a bare ID: the node its prefix names
    assert calls_per_node(c, "ACKJOB", before, 1) == [1, 0, 0]
    # a fetched job goes back to the node that delivered it
    on_b.add_job("routed2", b"y", replicate=3)
    [job] = on_b.get_jobs("routed2", timeout=1)
    assert job.node == c.ids[1]
    before = [calls(node, "WORKING") for node in c.nodes]
    on_b.working(job)
    assert calls_per_node(c, "WORKING", before, 1) == [0, 1, 0]


def test_a_leaving_node_is_left(start_cluster, clients, kind):
    c = start_cluster(3)
    api = clients(kind, c[1], hello_interval=0.2)
    jid = api.add_job("leave", b"x", replicate=3)
    c[1].execute("CLUSTER", "LEAVING", "yes")
    job = api.get_job("leave", timeout=5)           # a leaving node still serves its queue
    assert job.id == jid and api.wait(job.ack()) == 1
    assert api.get_job("leave", timeout=0.5) is None    # -LEAVING: asked of another node
    assert api.node != c.ids[1]
    # the other nodes learn that B leaves by gossip; the client by its next HELLOs
    wait_until(lambda: api.ping() and api.nodes[c.ids[1]].priority == 100, timeout=10,
               message="the client never saw the node leave")


def test_the_node_list_follows_the_cluster(start_cluster, start_server, clients, kind):
    c = start_cluster(2)
    api = clients(kind, c[0], hello_interval=0.2)
    api.ping()
    assert set(api.nodes) == set(c.ids)
    newcomer = start_server(workers=1, extra_args=["--cluster-node-timeout", "2000"])
    new_id = newcomer.execute("CLUSTER", "MYID").decode()
    newcomer.execute("CLUSTER", "MEET", "127.0.0.1", c[0].port)

    def knows():
        api.ping()
        return new_id in api.nodes and api.nodes[new_id].priority == 1
    wait_until(knows, timeout=20, message="the client never learnt the new node")
    newcomer.stop()

    def flagged():
        api.ping()
        node = api.nodes.get(new_id)
        return node is None or node.priority >= 10
    wait_until(flagged, timeout=20, message="the client still sees the dead node as good")
    c[0].execute("CLUSTER", "FORGET", new_id)
    c[1].execute("CLUSTER", "FORGET", new_id)

    def dropped():
        api.ping()
        return new_id not in api.nodes
    wait_until(dropped, timeout=10, message="a forgotten node is still in the client's list")


def test_unreachable_cluster_raises_unavailable():
    lease = lease_port()
    try:
        api = Api("sync", "127.0.0.1:%d" % lease.port, failover_timeout=0.3, connect_timeout=0.1)
        with pytest.raises(errors.UnavailableError):
            api.add_job("x", b"y")
        api.close()
    finally:
        lease.release()
