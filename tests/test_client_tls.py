"""The Python client over TLS (docs/client.md, "TLS"): `Disque` and `AsyncDisque` with client
certificates against a real node of two workers with a `tls-port`, in the three forms of
`tls=` and as a `disques://` URL; a wrong CA refused with an error naming the certificate;
a 3-node TLS-only cluster where the client reaches the nodes HELLO lists over TLS (job-ID
commands, a consumer moving to the producing node, failover); `disque-worker` with its
--tls flags; and the kombu transport and the Dramatiq broker on a `disques://` URL."""
import asyncio
import os
import signal
import sys
import textwrap
from urllib.parse import quote

import dramatiq
import kombu
import pytest

import disque.integrations.kombu  # noqa: F401  (registers disque:// and disques://)
from disque.client import AsyncDisque, Disque, ServerSpecError, UnavailableError
from disque.client.tls import SyncSSLConnection
from disque.integrations.dramatiq import DisqueBroker
from disque.integrations.kombu_config import settings_from_connection
from support.processes import WorkerProcesses
from support.server import stop_servers
from support.tls import Certs, TlsServer, tls_only_cluster
from support.waits import wait_until

WORKER = os.path.join(os.path.dirname(sys.executable), "disque-worker")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(certs, tmp_path_factory):
    """One node of two workers, a plaintext port and a TLS port (tls-auth-clients yes)."""
    srv = TlsServer(certs, workers=2, workdir=tmp_path_factory.mktemp("tls-node"))
    try:
        srv.start()
        yield srv
    finally:
        stop_servers([srv])


def ssl_options(certs, client="client", ca="ca"):
    return dict(ssl_ca_certs=certs.path(ca + ".crt"), ssl_certfile=certs.path(client + ".crt"),
                ssl_keyfile=certs.path(client + ".key"))


def tls_url(certs, *ports):
    query = "&".join("%s=%s" % (k, quote(v, safe="/")) for k, v in ssl_options(certs).items())
    return "disques://%s?%s" % (",".join("127.0.0.1:%d" % p for p in ports), query)


def round_trip(client, queue):
    jid = client.add_job(queue, b"over tls", retry=30)
    job = client.get_job(queue, timeout=2.0)
    assert (job.id, job.body) == (jid, b"over tls")
    assert job.ack() == 1
    assert client.show(jid) is None


# -- one node ------------------------------------------------------------------------
def test_sync_client_over_tls_in_every_form(node, certs):
    forms = [
        Disque("127.0.0.1:%d" % node.tls_port, tls=ssl_options(certs)),
        Disque(tls_url(certs, node.tls_port)),
        Disque("127.0.0.1:%d" % node.tls_port, tls=certs.client_context()),
        # the URL turns TLS on, the keyword adds the files
        Disque("disques://127.0.0.1:%d" % node.tls_port, tls=ssl_options(certs)),
    ]
    for n, client in enumerate(forms):
        with client:
            assert client.tls is not None
            round_trip(client, "tls-sync-%d" % n)
            # redis-py's own TLS connections (HELLO's pool and the commands' pool)
            assert {type(c) for p in client._pools.values() for c in p._available_connections
                    } == {SyncSSLConnection}
    # the plaintext port is the same node
    assert Disque("127.0.0.1:%d" % node.port).qlen("tls-sync-0") == 0


def test_asyncio_client_over_tls(node, certs):
    async def main():
        for n, tls in enumerate((ssl_options(certs), certs.client_context())):
            async with AsyncDisque("127.0.0.1:%d" % node.tls_port, tls=tls) as client:
                jids = [await client.add_job("tls-aio-%d" % n, b"%d" % i) for i in range(20)]
                jobs = await client.get_jobs("tls-aio-%d" % n, count=20, timeout=2.0)
                assert sorted(j.id for j in jobs) == sorted(jids)
                assert await client.ack_job(*jobs) == 20
                assert await client.qlen("tls-aio-%d" % n) == 0
    asyncio.run(main())


def test_a_wrong_ca_or_no_certificate_is_a_clear_error(node, certs):
    wrong_ca = ssl_options(certs, ca="other-ca")
    client = Disque("127.0.0.1:%d" % node.tls_port, tls=wrong_ca, failover_timeout=0.5)
    with pytest.raises(UnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        client.ping()
    client.close()

    async def main():
        aclient = AsyncDisque("127.0.0.1:%d" % node.tls_port, tls=wrong_ca,
                              failover_timeout=0.5)
        with pytest.raises(UnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            await aclient.ping()
        await aclient.aclose()
    asyncio.run(main())

    # the node requires a client certificate (tls-auth-clients yes)
    bare = Disque("127.0.0.1:%d" % node.tls_port, failover_timeout=0.5,
                  tls={"ssl_ca_certs": certs.path("ca.crt")})
    with pytest.raises(UnavailableError, match="no Disque node answered"):
        bare.ping()
    bare.close()


def test_tls_arguments_are_checked_before_anything_is_sent():
    with pytest.raises(ValueError, match="unknown TLS option ssl_cafile"):
        Disque(tls={"ssl_cafile": "x"})
    with pytest.raises(ServerSpecError, match="unknown TLS option 'ssl_cafile'"):
        Disque("disques://h:1?ssl_cafile=x")
    with pytest.raises(ServerSpecError, match="for a disques:// URL"):
        Disque("disque://h:1?ssl_ca_certs=x")
    with pytest.raises(ServerSpecError, match="mixed"):
        Disque("disque://a:1", "disques://b:2")
    assert Disque("disques://h:1").tls == {}
    assert Disque("h:1").tls is None
    assert Disque("disques://h:1?ssl_check_hostname=false&ssl_cert_reqs=none").tls == {
        "ssl_check_hostname": False, "ssl_cert_reqs": "none"}


# -- a TLS-only cluster ------------------------------------------------------------------
@pytest.fixture
def tls_cluster(certs, tmp_path):
    with tls_only_cluster(certs, tmp_path) as nodes:
        yield nodes


@pytest.mark.cluster
def test_the_client_follows_hello_over_tls(tls_cluster, certs):
    a, b, c = tls_cluster
    address = {n: ("127.0.0.1", n.tls_port) for n in tls_cluster}
    producer = Disque("127.0.0.1:%d" % a.tls_port, tls=ssl_options(certs))
    # seeded with B only: every other node is known from HELLO, reached over TLS
    consumer = Disque("127.0.0.1:%d" % b.tls_port, tls=ssl_options(certs), switch_window=10)
    hello = consumer.hello()
    assert sorted(n.port for n in hello.nodes) == sorted(n.tls_port for n in tls_cluster)
    assert consumer.address == address[b]

    # job-ID commands go to the creating node (REPLICATE 1: only A has the job)
    jid = producer.add_job("tls-hello", b"only on A", replicate=1, retry=60)
    assert consumer.show(jid).body == b"only on A"
    assert consumer.del_job(jid) == 1 and producer.show(jid) is None

    # a consumer on B gets jobs added on A, then moves to A, where they are produced
    jids = {producer.add_job("tls-move", b"%d" % i, replicate=1, retry=60) for i in range(30)}
    got = set()
    while len(got) < 30:
        jobs = consumer.get_jobs("tls-move", count=1, timeout=5.0)
        assert jobs, "no job came to the consumer (got %d of 30)" % len(got)
        got.update(j.id for j in jobs)
        assert consumer.ack_job(*jobs) == 1
    assert got == jids
    assert consumer.moves == 1 and consumer.address == address[a]

    # the node in use dies: the client goes on with another node HELLO listed
    a.stop()
    consumer.failover_timeout = 20
    assert consumer.add_job("tls-failover", b"after A", replicate=1) is not None
    assert consumer.address in (address[b], address[c]) and consumer.failovers >= 1
    producer.close()
    consumer.close()


# -- disque-worker ----------------------------------------------------------------------
TASKS = textwrap.dedent('''
    import json, os

    def note(job):
        with open(os.environ["RECORD"], "a") as f:
            f.write(json.dumps(["done", job.id]) + "\\n")
''')


@pytest.fixture
def workers(tmp_path):
    w = WorkerProcesses(tmp_path)
    (tmp_path / "tasks.py").write_text(TASKS)
    yield w
    w.kill_all()


def start_worker(workers, *args):
    env = dict(os.environ, RECORD=str(workers.record), PYTHONUNBUFFERED="1")
    return workers.launch([WORKER, "tasks:note", "--stats-interval", "1", *args], env)


def test_disque_worker_with_the_tls_flags(node, certs, workers):
    flags = ["--tls-ca-cert-file", certs.path("ca.crt"),
             "--tls-cert-file", certs.path("client.crt"),
             "--tls-key-file", certs.path("client.key")]
    client = Disque("127.0.0.1:%d" % node.port)
    jid = client.add_job("tls-worker", b"x", retry=30)
    proc = start_worker(workers, "-q", "tls-worker", "--servers",
                        "127.0.0.1:%d" % node.tls_port, "--tls", *flags)
    wait_until(lambda: workers.events("done"), timeout=20,
               message="the worker ran no job over TLS")
    wait_until(lambda: client.show(jid) is None, timeout=5, message="the job was not acked")
    assert workers.events("done") == [["done", jid]]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0, workers.log(proc)
    # a certificate without its key is bad usage: one line, exit 2
    bad = start_worker(workers, "-q", "q", "--tls-cert-file", certs.path("client.crt"))
    assert bad.wait(10) == 2
    assert "--tls-cert-file and --tls-key-file go together" in workers.log(bad)
    client.close()


# -- the brokers ----------------------------------------------------------------------------
def test_kombu_transport_on_a_disques_url(node, certs):
    # the CA in the URL, the client certificate in Celery's broker_use_ssl (kombu's ssl)
    url = "disques://127.0.0.1:%d?ssl_ca_certs=%s" % (node.tls_port, certs.path("ca.crt"))
    cert = {"ssl_certfile": certs.path("client.crt"), "ssl_keyfile": certs.path("client.key")}
    settings = settings_from_connection(kombu.Connection(url, ssl=cert))
    assert settings.tls == {"ssl_ca_certs": certs.path("ca.crt"), **cert}
    assert settings_from_connection(kombu.Connection("disque://h:1", ssl=True)).tls == {}
    assert settings_from_connection(kombu.Connection("disque://h:1")).tls is None
    conn = kombu.Connection(url, ssl=cert, transport_options={"visibility_timeout": 60})
    try:
        queue = conn.SimpleQueue("tls-kombu")
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
        assert queue.qsize() == 0
        assert conn.transport.disque.tls == settings.tls
        queue.close()
    finally:
        conn.release()
    assert Disque("127.0.0.1:%d" % node.port).qlen("tls-kombu") == 0


def test_dramatiq_broker_on_a_disques_url(node, certs):
    broker = DisqueBroker(tls_url(certs, node.tls_port), retry=30)
    actor = dramatiq.actor(lambda value: None, actor_name="tls_record", queue_name="tls-dq",
                           broker=broker)
    try:
        actor.send(7)
        consumer = broker.consume("tls-dq", prefetch=1, timeout=2000)
        message = next(consumer)
        assert message is not None and message.args == (7,)
        consumer.ack(message)
        consumer.close()
        broker.join("tls-dq", timeout=5000)
    finally:
        broker.close()
