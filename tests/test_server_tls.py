"""TLS on the client port (issue 34; docs/security.md "TLS on the client port"): redis-cli
--tls, redis-py with client certificates (and its hiredis parser), redis-benchmark (hiredis)
and `openssl s_client` against a node of two workers; the connection served by the worker
that runs its TLS; refusals (wrong CA, expired certificate, no certificate, plaintext on the
TLS port) logged and nothing else affected; certificates reloaded under load."""
import contextlib
import os
import select
import shutil
import signal
import socket
import ssl
import subprocess
import threading

import pytest
import redis

from support.info import parse_info
from support.resp_client import Incomplete, encode_command, parse_resp
from support.server import stop_servers
from support.slots import queues_on_distinct_workers
from support.tls import Certs, TlsServer, tls_ping
from support.waits import wait_until

REDIS_CLI = shutil.which("redis-cli")
REDIS_BENCHMARK = shutil.which("redis-benchmark")
OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def start_tls(tmp_path, certs):
    started = []

    def start(workers=2, extra_args=(), tls_only=False, wait=True):
        srv = TlsServer(certs, workers=workers, extra_args=extra_args, tls_only=tls_only,
                        workdir=tmp_path / ("tls%d" % len(started)))
        started.append(srv)
        if wait:
            srv.start()
        else:
            srv.spawn()
        return srv
    yield start
    stop_servers(started)


@pytest.fixture
def node(start_tls):
    return start_tls()


def cli(srv, *args, client="client", port=None):
    return subprocess.run([REDIS_CLI, "-p", str(port or srv.tls_port), *srv.certs.cli_args(client),
                           *args], capture_output=True, text=True, timeout=20)


@pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli is not installed")
def test_redis_cli_over_tls_runs_a_job_through(node):
    jid = cli(node, "ADDJOB", "tlsq", "over tls", "0").stdout.strip()
    assert jid.startswith("D-"), jid
    got = cli(node, "GETJOB", "FROM", "tlsq").stdout.split()
    assert got == ["tlsq", jid, "over", "tls"] or got[:2] == ["tlsq", jid]
    assert cli(node, "ACKJOB", jid).stdout.strip() == "1"
    assert cli(node, "QLEN", "tlsq").stdout.strip() == "0"
    # the plaintext port serves the same node
    assert node.execute("PING") == b"PONG"


def test_redis_py_with_client_certificates_is_served_by_a_worker(node):
    c = node.tls_client()
    assert c.execute_command("PING") in (b"PONG", True)
    q = queues_on_distinct_workers("tlsw", 1, 2)
    ids = [c.execute_command("ADDJOB", q[i % 2], b"body-%d" % i, 0) for i in range(200)]
    # the connection went to the worker running its TLS, which serves it (no hop)
    wait_until(lambda: int(node.info_fields()["connections_served_by_workers"]) >= 1, 10,
               message="the TLS connection is not served by its worker")
    # commands of both workers' queues on it: the other worker's go over a peer link
    p = c.pipeline(transaction=False)
    for i in range(100):
        p.execute_command("ADDJOB", q[i % 2], b"piped-%d" % i, 0)
    assert all(r.startswith(b"D-") for r in p.execute())
    assert int(c.execute_command("QLEN", q[0])) + int(c.execute_command("QLEN", q[1])) == 300
    # a node command hands it back (the front-end serves it through the worker's pump)
    info = c.execute_command("INFO", "server")
    assert b"tcp_port" in info
    clients = c.execute_command("CLIENT", "LIST").decode()
    assert "addr=127.0.0.1:" in clients
    # and jobs keep flowing after that, in order
    for jid in ids[:50]:
        assert c.execute_command("ACKJOB", jid) == 1
    job = c.execute_command("GETJOB", "NOHANG", "FROM", q[0], q[1])
    assert job and job[0][0] in (q[0].encode(), q[1].encode())


def test_hiredis_parser_over_tls(node):
    from redis.utils import HIREDIS_AVAILABLE
    if not HIREDIS_AVAILABLE:
        pytest.skip("hiredis is not installed")
    c = node.tls_client()
    big = b"x" * 200000
    jid = c.execute_command("ADDJOB", "tlsbig", big, 0)
    assert c.execute_command("SHOW", jid)[c.execute_command("SHOW", jid).index(b"body") + 1] == big


@pytest.mark.skipif(REDIS_BENCHMARK is None, reason="redis-benchmark is not installed")
def test_redis_benchmark_pipelined_over_tls(node):
    out = subprocess.run([REDIS_BENCHMARK, "-p", str(node.tls_port), *node.certs.cli_args(),
                          "-c", "8", "-P", "16", "-n", "20000", "-q", "ADDJOB", "benchq",
                          "0123456789", "0"], capture_output=True, text=True, timeout=60)
    assert "requests per second" in out.stdout, out.stdout + out.stderr
    assert int(node.execute("QLEN", "benchq")) == 20000


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
def test_openssl_s_client_speaks_inline_commands(node):
    certs = node.certs
    proc = subprocess.run(
        [OPENSSL, "s_client", "-connect", "127.0.0.1:%d" % node.tls_port, "-quiet",
         "-CAfile", certs.path("ca.crt"), "-cert", certs.path("client.crt"),
         "-key", certs.path("client.key"), "-verify_return_error"],
        input=b"PING\r\nADDJOB sq hello 0\r\nQUIT\r\n", capture_output=True, timeout=20)
    lines = proc.stdout.split(b"\r\n")
    assert lines[0] == b"+PONG", proc.stdout + proc.stderr
    assert lines[1].startswith(b"+D-")
    assert lines[2] == b"+OK"


def refused(srv, client):
    """A client with certificate `client` (None: none) gets no reply: its handshake fails
    (with TLS 1.3 the client learns it at its first read, as an alert or the close)."""
    try:
        reply = tls_ping(srv.certs, srv.tls_port, client=client)
    except (ssl.SSLError, OSError):
        return
    assert reply == b"", reply


def test_refusals_are_logged_and_affect_nothing_else(node):
    good = node.tls_client()
    assert good.execute_command("PING") in (b"PONG", True)
    refused(node, "other-client")                # signed by another CA
    refused(node, "expired-client")
    refused(node, None)                          # tls-auth-clients yes: a certificate is needed
    with socket.create_connection(("127.0.0.1", node.tls_port), timeout=5) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")      # plaintext on the TLS port: closed
        try:
            while s.recv(100):
                pass
        except ConnectionResetError:
            pass
    log = lambda: node.log_text()              # noqa: E731
    wait_until(lambda: log().count("TLS handshake with 127.0.0.1:") >= 4, 10,
               message="no log line for each refusal:\n" + node.log_tail())
    text = log()
    assert "certificate" in text
    assert "(plaintext on the TLS port?)" in text
    # the node and the connection made before are unaffected
    assert good.execute_command("ADDJOB", "after", "x", 0).startswith(b"D-")
    assert node.execute("PING") == b"PONG"
    assert all(p.is_running() for p in node.procs())


def test_auth_clients_optional_and_no(start_tls, certs):
    opt = start_tls(extra_args=["--tls-auth-clients", "optional"])
    assert tls_ping(certs, opt.tls_port, client=None) == b"+PONG\r\n"
    refused(opt, "other-client")                 # a certificate given is still checked
    no = start_tls(extra_args=["--tls-auth-clients", "no"])
    assert tls_ping(certs, no.tls_port, client=None) == b"+PONG\r\n"


def test_bad_tls_settings_stop_the_start_with_one_line(start_tls, certs, tmp_path):
    srv = TlsServer(certs, workdir=tmp_path / "bad",
                    extra_args=["--tls-cert-file", str(tmp_path / "missing.crt")])
    try:
        srv.spawn()
        rc = srv.proc.wait(30)
    finally:
        srv.kill()
    assert rc != 0
    assert "missing.crt" in srv.log_text()
    srv = TlsServer(certs, workdir=tmp_path / "zmq", extra_args=["--worker-link", "zmq"])
    try:
        srv.spawn()
        rc = srv.proc.wait(30)
    finally:
        srv.kill()
    assert rc != 0 and "tls-port needs worker-link unix" in srv.log_text()


def peer_serial(srv):
    ctx = srv.certs.client_context()
    with socket.create_connection(("127.0.0.1", srv.tls_port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            from cryptography import x509
            return x509.load_der_x509_certificate(s.getpeercert(binary_form=True)).serial_number


def test_certificates_reload_under_load_without_dropping_connections(node):
    certs = node.certs
    assert peer_serial(node) == certs.server_serial
    busy = [node.tls_client() for _ in range(4)]
    stop = threading.Event()
    errors, done = [], [0]

    def load(c, q):
        try:
            while not stop.is_set():
                jid = c.execute_command("ADDJOB", q, "x", 0)
                c.execute_command("ACKJOB", jid)
                done[0] += 1
        except Exception as e:          # a dropped connection fails the test below
            errors.append(e)
    threads = [threading.Thread(target=load, args=(c, "reload-%d" % i)) for i, c in enumerate(busy)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: done[0] > 200, 20)
        # the busy connections are served by their workers while the certificate changes
        wait_until(lambda: int(node.info_fields()["connections_served_by_workers"]) >= 4, 10,
                   message="the busy TLS connections are not served by their workers")
        handbacks = int(node.info_fields()["connection_handbacks"])
        admin = node.tls_client()
        # a certificate without its key: refused, the old settings kept
        with pytest.raises(redis.ResponseError, match="key values mismatch"):
            admin.execute_command("CONFIG", "SET", "tls-cert-file", certs.path("server2.crt"))
        assert admin.execute_command("CONFIG", "GET", "tls-cert-file")[1] == \
            certs.path("server.crt").encode()
        assert peer_serial(node) == certs.server_serial
        # both in one CONFIG SET (as Redis 7): the connections after the OK get the new one
        assert admin.execute_command("CONFIG", "SET", "tls-cert-file", certs.path("server2.crt"),
                                     "tls-key-file", certs.path("server2.key")) in (b"OK", True)
        assert peer_serial(node) == certs.server2_serial
        with pytest.raises(redis.ResponseError, match="tls-ca-cert-file"):
            admin.execute_command("CONFIG", "SET", "tls-ca-cert-file", certs.path("nothing.crt"))
        assert peer_serial(node) == certs.server2_serial
        before = done[0]
        wait_until(lambda: done[0] > before + 200, 20)
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert not errors, errors
    # and they stayed there: the reload neither dropped nor moved them
    assert int(node.info_fields()["connection_handbacks"]) == handbacks


def test_a_tls_connection_dies_with_the_worker_running_it_and_the_node_goes_on(node):
    ctx = node.certs.client_context()
    raw = socket.create_connection(("127.0.0.1", node.tls_port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b"+PONG\r\n"
        for pid in node.worker_pids():
            os.kill(pid, signal.SIGKILL)
        try:
            while s.recv(100):
                pass
        except (ssl.SSLError, OSError):
            pass            # closed, with or without a close_notify
    wait_until(lambda: tls_ping(node.certs, node.tls_port) == b"+PONG\r\n", 30,
               message="no TLS after the workers were restarted:\n" + node.log_tail())


@contextlib.contextmanager
def served_tls_connection(node, queue, body):
    """A TLS connection whose first command, an ADDJOB of `body` to `queue`, brought it to
    the queue's worker, which serves it from then on."""
    raw = socket.create_connection(("127.0.0.1", node.tls_port), timeout=30)
    with node.certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(encode_command("ADDJOB", queue, body, 0))
        assert s.recv(100).startswith(b"+D-")
        wait_until(lambda: int(node.info_fields()["connections_served_by_workers"]) == 1, 10,
                   message="the connection is not served by its worker")
        yield s


def read_replies(s, n):
    """`n` replies read off socket `s`, parsed."""
    replies, buf, pos = [], b"", 0
    while len(replies) < n:
        chunk = s.recv(1 << 20)
        assert chunk, "closed after %d replies" % len(replies)
        buf = buf[pos:] + chunk
        pos = 0
        while True:
            try:
                value, pos = parse_resp(buf, pos)
            except Incomplete:
                break
            replies.append(value)
    return replies


def test_a_slow_tls_reader_gets_every_reply_in_order(node):
    """Replies that do not fit in the socket: the worker hands the connection back, its
    pump carries what the front-end buffers; nothing is lost or reordered."""
    body = b"b" * 300000
    n = 150
    with served_tls_connection(node, "slowq", body) as s:
        # all of it sent before a byte is read: 45 MB of replies wait on the node
        s.sendall(b"".join(b"QPEEK slowq 1\r\nPING %d\r\n" % i for i in range(n)))
        # nothing read yet: the replies cannot all fit, the slow reader goes back (a
        # reader that starts at once may keep up on a busy machine, and never go back)
        wait_until(lambda: int(node.info_fields()["connection_handbacks"]) >= 1, 10,
                   message="the worker did not hand the slow reader back")
        replies = read_replies(s, 2 * n)
    assert [r for r in replies[1::2]] == [b"%d" % i for i in range(n)]
    assert all(r[0][2] == body for r in replies[0::2])


def test_a_big_tls_reply_is_made_a_chunk_at_a_time_and_survives_a_hand_back(node):
    """A 6 MB body over TLS becomes records a chunk at a time as the socket drains (the
    rest kept as plaintext, ServedClient.tls_plain); replies piling up behind it make the
    worker hand the connection back, the records made first and the plaintext not made
    into records yet going before the later replies. The client reads every byte in order."""
    body = os.urandom(6 << 20)
    mid = os.urandom(300_000)
    before = int(node.info_fields()["connection_handbacks"])
    with served_tls_connection(node, "chunkq", body) as s:
        s.sendall(encode_command("ADDJOB", "chunkq", mid, 0))
        assert s.recv(100).startswith(b"+D-")
        s.sendall(encode_command("GETJOB", "FROM", "chunkq"))
        wait_until(lambda: select.select([s], [], [], 0)[0], 10, message="no reply started")
        s.sendall(encode_command("QPEEK", "chunkq", 1) * 8)     # 2.4 MB behind it
        wait_until(lambda: int(node.info_fields()["connection_handbacks"]) > before, 10,
                   message="replies piled up behind a big TLS reply stayed in the worker")
        replies = read_replies(s, 9)
    assert replies[0][0][2] == body
    assert all(r[0][2] == mid for r in replies[1:])


def test_metrics_tls_serves_the_metrics_port_over_https(start_tls, certs):
    import urllib.error
    import urllib.request
    from disque.harness.ports import lease_port
    lease = lease_port()
    try:
        node = start_tls(extra_args=["--metrics-port", lease.port, "--metrics-tls", "yes"])
        url = "https://127.0.0.1:%d" % lease.port
        ctx = ssl.create_default_context(cafile=certs.path("ca.crt"))
        with urllib.request.urlopen(url + "/metrics", context=ctx, timeout=10) as r:
            assert r.status == 200 and b"disque_" in r.read()
        with urllib.request.urlopen(url + "/api/console/session", context=ctx, timeout=10) as r:
            assert "; Secure" in r.headers["Set-Cookie"]
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % lease.port, timeout=10).read()
        # the certificate follows CONFIG SET, as the client port's
        c = node.tls_client()
        c.execute_command("CONFIG", "SET", "tls-cert-file", certs.path("server2.crt"),
                          "tls-key-file", certs.path("server2.key"))
        raw = socket.create_connection(("127.0.0.1", lease.port), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            from cryptography import x509
            got = x509.load_der_x509_certificate(s.getpeercert(binary_form=True)).serial_number
        assert got == certs.server2_serial
    finally:
        lease.release()


def test_tls_with_connection_affinity_off_and_client_kill(start_tls):
    """With connection-affinity no every TLS connection stays pumped to the front-end:
    the same replies; CLIENT KILL closes a TLS connection wherever it is."""
    node = start_tls(extra_args=["--connection-affinity", "no"])
    c = node.tls_client()
    ids = [c.execute_command("ADDJOB", "offq", "x%d" % i, 0) for i in range(50)]
    assert int(c.execute_command("QLEN", "offq")) == 50
    assert c.execute_command("ACKJOB", *ids) == 50
    info = node.info_fields()
    assert int(info["connections_served_by_workers"]) == 0
    assert int(info["tls_connections_accepted"]) >= 2
    ctx = node.certs.client_context()
    raw = socket.create_connection(("127.0.0.1", node.tls_port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as victim:
        victim.sendall(b"CLIENT ID\r\n")
        vid = int(victim.recv(100)[1:].strip())
        assert c.execute_command("CLIENT", "KILL", "ID", vid) == 1
        try:
            assert victim.recv(100) == b""      # closed (with a close_notify or without)
        except (ssl.SSLError, OSError):
            pass


def test_tls_with_requirepass_authenticates_then_is_served(start_tls):
    node = start_tls(extra_args=["--requirepass", "tls-secret-pass"])
    anon = node.tls_client()
    with pytest.raises(redis.AuthenticationError):
        anon.execute_command("ADDJOB", "authq", "x", 0)
    c = node.tls_client(password="tls-secret-pass")
    for i in range(20):
        assert c.execute_command("ADDJOB", "authq", "x%d" % i, 0).startswith(b"D-")
    admin = node.client(password="tls-secret-pass")     # plaintext port, authenticated

    def served():
        info = parse_info(admin.execute_command("INFO"))
        return int(info["connections_served_by_workers"])
    wait_until(lambda: served() >= 1, 10,
               message="the authenticated TLS connection is not served by its worker")
    assert int(c.execute_command("QLEN", "authq")) == 20
