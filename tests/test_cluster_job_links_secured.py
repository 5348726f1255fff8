"""Direct job links on a secured cluster (docs/design.md, "Direct job links"; docs/security.md):
TLS 1.3 with a certificate every node derives from `cluster-secret` (disque/bus/link_keys.py),
required of both ends. The members link and replicate over them; a peer without the secret
can neither open a link nor slip a job message in, whether it speaks plaintext, TLS without
a certificate, with one of its own, or with one derived from another secret.

Real nodes on loopback; the outsider is this test process, speaking TCP and TLS itself."""
import os
import ssl
import socket
import struct
import time

import pytest

from support.jobs import show
from support.resp_client import RawConn
from support.waits import wait_until
from test_cluster_job_links import (DIRECT, counter, frame, job_link_port, links_info,
                                    replicate_and_ack, send_raw, wait_closed, wait_links_up)
from disque._fast.job import ACTIVE, Job
from disque._fast.jobid import IdMaker, queue_slot
from disque.bus.link_keys import identity
from disque.bus.secret import derive_keypair, link_seed, stretch, KDF_SALT
from disque.contracts import bus_messages as bus_msg
from disque.contracts.job_codec import serialize
from disque.contracts.job_link import HELLO, MAX_FRAME, VERSION
from support.cluster import CLUSTER_NODE_TIMEOUT
from support.jobs import addjob

SECRET = "links-secret-A-0123456789abcdef"
OTHER = "links-secret-B-0123456789abcdef"
SECURED = ["--cluster-secret", SECRET, *DIRECT]


# ---- the derivation (no server) -------------------------------------------------------------

@pytest.mark.unit
def test_the_derived_identity_is_a_function_of_the_secret_alone():
    from cryptography import x509
    key_a, cert_a = identity(link_seed(SECRET))
    assert (key_a, cert_a) == identity(link_seed(SECRET))      # every node: the same bytes
    key_b, cert_b = identity(link_seed(OTHER))
    assert key_a != key_b and cert_a != cert_b
    # domain-separated from the bus' CURVE key of the same secret
    assert link_seed(SECRET) != stretch(SECRET, KDF_SALT)
    assert derive_keypair(SECRET).secret not in key_a
    cert = x509.load_pem_x509_certificate(cert_a)
    assert cert.serial_number == 1 and cert.subject == cert.issuer
    assert cert.not_valid_after_utc.year == 9999
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


# ---- a secured cluster keeps its links ----------------------------------------------------

@pytest.mark.cluster
def test_a_secured_cluster_replicates_over_tls_job_links(start_cluster):
    c = start_cluster(3, workers=2, extra_args=SECURED)
    wait_links_up(c, per_node=2 * 2 * 2)
    before = [links_info(node) for node in c.nodes]
    for origin in range(3):
        replicate_and_ack(c, origin, "tls-q%d" % origin)
    for i, node in enumerate(c.nodes):
        info = links_info(node)
        assert info["cluster_job_links"] == "direct" and info["cluster_job_links_tls"] == "1"
        assert info["cluster_bus_secured"] == "1"
        assert int(info["cluster_job_messages_direct_sent"]) >= \
            int(before[i]["cluster_job_messages_direct_sent"]) + 20, info
        assert int(info["cluster_job_messages_direct_received"]) >= \
            int(before[i]["cluster_job_messages_direct_received"]) + 20, info
        assert info["cluster_job_links_refused"] == "0"
        assert "(TLS, certificates derived from the cluster secret)" in node.log_text()
        # the workers get the derived files, never the secret
        for pid in node.worker_pids():
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            assert SECRET.encode() not in b" ".join(argv)
            tls_dir = argv[argv.index(b"--job-links-tls") + 1].decode()
            for name in os.listdir(tls_dir):
                assert os.stat(os.path.join(tls_dir, name)).st_mode & 0o077 == 0, name


@pytest.mark.cluster
def test_nodes_mid_rotation_still_link(start_cluster, start_server):
    """Pass 2 of a rotation (docs/security.md): nodes serving A (previous B) and nodes
    serving B (previous A) accept each other's certificates."""
    c = start_cluster(2, workers=1, join=False, extra_args=[
        "--cluster-secret", SECRET, "--cluster-secret-previous", OTHER, *DIRECT])
    c.nodes.append(start_server(workers=1, extra_args=[
        "--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT),
        "--cluster-secret", OTHER, "--cluster-secret-previous", SECRET, *DIRECT]))
    c.ids.append(c.nodes[2].execute("CLUSTER", "MYID").decode())
    c.join()
    wait_links_up(c, per_node=2)
    for origin in range(3):
        replicate_and_ack(c, origin, "rot-q%d" % origin, n=10)
    for node in c.nodes:
        info = links_info(node)
        assert int(info["cluster_job_messages_direct_received"]) >= 10, info
        assert info["cluster_job_links_refused"] == "0"


# ---- outsiders ----------------------------------------------------------------------------

def forged_copy(origin_id, server_id, queue):
    """A REPLJOB payload as member `origin_id` would send it."""
    jid = IdMaker(origin_id).make(queue_slot(queue), 600, 30)
    job = Job(jid, queue, b"forged")
    now_s = int(time.time())
    job.state, job.repl, job.etime = ACTIVE, 2, now_s + 600
    job.ctime, job.retry = time.time_ns(), 30
    job.nodes_delivered = (origin_id.encode(), server_id.encode())
    return jid, serialize(job, False, now_s)


def tls_client(tmp_path, name, key_pem=None, cert_pem=None):
    """A TLS client context that takes any server, with this certificate (or none)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if key_pem is not None:
        (tmp_path / (name + ".key")).write_bytes(key_pem)
        (tmp_path / (name + ".crt")).write_bytes(cert_pem)
        ctx.load_cert_chain(tmp_path / (name + ".crt"), tmp_path / (name + ".key"))
    return ctx


def send_tls(ctx, port, data):
    """Handshake, send `data` and wait for the server to close. (TLS 1.3 tells a client
    that its certificate was refused after the client's handshake is over.)"""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        tls = ctx.wrap_socket(sock)
        tls.sendall(data)
        while tls.recv(4096):
            pass
    except (ssl.SSLError, OSError):
        pass
    sock.close()


@pytest.mark.cluster
def test_outsiders_can_neither_link_nor_inject(start_cluster, tmp_path):
    c = start_cluster(2, workers=1, extra_args=SECURED)
    wait_links_up(c, per_node=1)
    server_id, member_id = c.ids[0], c.ids[1]
    port = job_link_port(c[0])
    with RawConn(c[0].port) as r:
        kept = addjob(r, "kept-q", b"kept", 5000, "REPLICATE", 2)
    forged_id, copy = forged_copy(member_id, server_id, b"forged-q")
    # a hello as the member would send it, then a copy to create and a DELJOB of a real job
    hello = frame([HELLO, VERSION, member_id.encode(), server_id.encode(), 0])
    forged = hello + frame([[bus_msg.REPLJOB, 0, copy], [bus_msg.DELJOB, 0, [kept, 0]]])
    refused = counter(c[0], "cluster_job_links_refused")

    # plaintext on a TLS port
    wait_closed(send_raw(port, forged, close=False))
    refused += 1
    wait_until(lambda: counter(c[0], "cluster_job_links_refused") == refused, timeout=10)
    # TLS without a certificate, with a self-made one, with one from another secret
    attempts = [tls_client(tmp_path, "none"),
                tls_client(tmp_path, "own", *identity(os.urandom(32))),
                tls_client(tmp_path, "other", *identity(link_seed(OTHER)))]
    for ctx in attempts:
        send_tls(ctx, port, forged)
        refused += 1
        wait_until(lambda: counter(c[0], "cluster_job_links_refused") == refused, timeout=10)

    for node in c.nodes:
        with RawConn(node.port) as r:
            assert show(r, kept) is not None            # the DELJOBs did nothing
            assert show(r, forged_id) is None           # the REPLJOBs neither
    log = c[0].log_text()
    # one warning for the address, however many attempts
    assert log.count("TLS handshake failed") == 1, log
    assert "refused: TLS handshake failed" in log and "no cluster secret or another one" in log
    assert "Traceback" not in log

    # the control: the same bytes with the secret's certificate are taken (so what was
    # refused above was refused for want of the secret, not for a malformed frame)
    ctx = tls_client(tmp_path, "right", *identity(link_seed(SECRET)))
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10)) as tls:
        tls.sendall(forged)

        def taken():
            with RawConn(c[0].port) as r:
                return show(r, kept) is None and show(r, forged_id) is not None
        wait_until(taken, timeout=10, message="the forged frames with the right certificate")
    # the frame limits hold inside TLS as on plaintext links: closed on the header alone
    send_tls(ctx, port, hello + struct.pack("<I", MAX_FRAME + 1) + b"x" * 100)
    wait_until(lambda: "closed: a frame too long" in c[0].log_text(), timeout=10)
    assert c[0].all_alive() and c[1].all_alive()
    wait_links_up(c, per_node=1)        # the members' own links never went down
