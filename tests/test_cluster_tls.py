"""A cluster whose nodes talk only TLS to clients (issue 34): `--port 0 --tls-port P`, so
the node is named by its TLS port (the bus on P + 10000, HELLO and CLUSTER NODES tell P),
and jobs replicate and are consumed across it over TLS alone."""
import socket

import pytest

from support.tls import Certs, tls_only_cluster
from support.waits import wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture
def tls_cluster(tmp_path):
    with tls_only_cluster(Certs(tmp_path / "certs"), tmp_path) as nodes:
        yield nodes


def test_tls_only_nodes_form_a_cluster_and_replicate_jobs(tls_cluster):
    a, b, c = tls_cluster
    ca = a.tls_client()
    # HELLO tells the TLS ports: the ones clients can use
    hello = ca.execute_command("HELLO")
    assert sorted(int(n[2]) for n in hello[2:]) == sorted(n.tls_port for n in tls_cluster)
    myself = [line for line in ca.execute_command("CLUSTER", "NODES").splitlines()
              if b"myself" in line][0]
    assert myself.split()[1] == b"127.0.0.1:%d" % a.tls_port
    jid = ca.execute_command("ADDJOB", "tlsq", "across", 0, "REPLICATE", 3)
    assert jid.startswith(b"D-")
    for n in (b, c):
        show = n.tls_client().execute_command("SHOW", jid)
        assert show and show[show.index(b"body") + 1] == b"across"
    got = c.tls_client().execute_command("GETJOB", "TIMEOUT", 5000, "FROM", "tlsq")
    assert got[0][1] == jid
    assert c.tls_client().execute_command("ACKJOB", jid) == 1
    wait_until(lambda: all(n.tls_client().execute_command("SHOW", jid) is None
                           for n in tls_cluster), 20, message="the ack did not reach every node")


def test_a_tls_only_node_has_no_plaintext_port(tls_cluster):
    a = tls_cluster[0]
    with socket.create_connection(("127.0.0.1", a.tls_port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
    assert b"PONG" not in data
    assert a.tls_client().execute_command("CONFIG", "GET", "port")[1] == b"0"
