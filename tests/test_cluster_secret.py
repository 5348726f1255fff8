"""The secured cluster bus (docs/security.md): CURVE keys from `cluster-secret`, outsiders kept
out, forged bus frames ignored, rotation with `cluster-secret-previous` node by node."""
import struct
import time

import msgpack
import pytest
import zmq

from support.info import parse_info
from support.jobs import show
from support.resp_client import RawConn
from support.waits import wait_until
from disque.contracts import bus_messages as bus_msg
from disque.bus.secret import derive_keypair
from support.cluster import CLUSTER_NODE_TIMEOUT
from support.jobs import addjob
from support.ports import BUS_OFFSET
from support.resp_client import Err

pytestmark = pytest.mark.cluster

SECRET = "secret-A-0123456789abcdef"
OTHER = "secret-B-0123456789abcdef"
BUS = BUS_OFFSET


def info_cluster(node):
    return parse_info(node.execute("INFO", "cluster"))


def registered_jobs(node):
    return int(parse_info(node.execute("INFO", "jobs"))["registered_jobs"])


def known_ids(node):
    """Node IDs in CLUSTER NODES, handshakes (random IDs) excluded."""
    return {line.split(" ")[0] for line in node.execute("CLUSTER", "NODES").decode().splitlines()
            if "handshake" not in line}


def replicates_everywhere(c, queue="rq"):
    """ADDJOB REPLICATE <all> works from every node: the mesh is whole in both directions."""
    def ok():
        for node in c.nodes:
            with RawConn(node.port) as r:
                reply = r.execute("ADDJOB", queue, "x", 2000, "REPLICATE", len(c))
                if isinstance(reply, Err):
                    return False
        return True
    return ok


def test_cluster_with_a_secret_forms_replicates_and_hides_the_secret(start_cluster):
    c = start_cluster(3, extra_args=["--cluster-secret", SECRET])
    with RawConn(c[0].port) as r:
        jid = addjob(r, "sq", b"secured body", 5000, "REPLICATE", 3)
        assert sorted(x.decode() for x in show(r, jid)[b"nodes-delivered"]) == sorted(c.ids)
        assert r.execute("CONFIG", "GET", "cluster-secret") == [b"cluster-secret", b"(hidden)"]
        assert SECRET.encode() not in b"".join(r.execute("CONFIG", "GET", "*"))
        err = r.execute("CONFIG", "SET", "cluster-secret", OTHER)
        assert isinstance(err, Err) and b"Unsupported CONFIG parameter" in err
    for i in (1, 2):
        with RawConn(c[i].port) as r:
            assert show(r, jid)[b"body"] == b"secured body"
    fields = info_cluster(c[0])
    assert fields["cluster_bus_secured"] == "1" and fields["cluster_bus_accepted_secrets"] == "1"
    assert "Cluster bus secured with CURVE" in c[0].log_text()


def test_open_node_reports_an_open_bus(start_server):
    srv = start_server()
    assert info_cluster(srv)["cluster_bus_secured"] == "0"
    assert srv.execute("CONFIG", "GET", "cluster-secret") == [b"cluster-secret", b""]


def test_nodes_with_another_secret_or_none_stay_out(start_cluster, start_server):
    c = start_cluster(2, extra_args=["--cluster-secret", SECRET])
    args = ["--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT)]
    wrong = start_server(extra_args=args + ["--cluster-secret", OTHER])
    none = start_server(extra_args=args)
    # both directions: outsiders meet members, members meet outsiders
    assert wrong.execute("CLUSTER", "MEET", "127.0.0.1", c[0].port) == b"OK"
    assert none.execute("CLUSTER", "MEET", "127.0.0.1", c[1].port) == b"OK"
    assert c[0].execute("CLUSTER", "MEET", "127.0.0.1", wrong.port) == b"OK"
    assert c[1].execute("CLUSTER", "MEET", "127.0.0.1", none.port) == b"OK"
    wait_until(lambda: "another cluster secret" in c[0].log_text(), timeout=10,
               message="the wrong-secret node was not logged")
    # which side of a mechanism mismatch hangs up first is a race: either reason is logged
    wait_until(lambda: "refused" in c[1].log_text(), timeout=10,
               message="the node without a secret was not logged")
    line = [ln for ln in c[0].log_text().splitlines() if "refused" in ln][0]
    assert "from 127.0.0.1" in line, line              # the address of the refused peer
    for node in (c[0], c[1], wrong, none):
        assert int(info_cluster(node)["cluster_bus_handshakes_refused"]) > 0
    # handshakes expire (max(node timeout, 1 s)); nobody ever learned an outsider's ID
    outsider_ids = {wrong.execute("CLUSTER", "MYID").decode(),
                    none.execute("CLUSTER", "MYID").decode()}
    wait_until(lambda: all(int(c.cluster_info(i)["cluster_known_nodes"]) == 2 for i in (0, 1)),
               timeout=10, message="handshakes with outsiders did not expire")
    assert "Handshake with 127.0.0.1:%d timed out" % wrong.port in c[0].log_text()
    for member in c.nodes:
        assert known_ids(member) == set(c.ids)
        assert registered_jobs(member) == 0
    for outsider in (wrong, none):
        assert not (known_ids(outsider) & set(c.ids))
        with RawConn(outsider.port) as r:
            err = r.execute("ADDJOB", "q", "x", 0, "REPLICATE", 2)
            assert isinstance(err, Err) and err.startswith(b"NOREPL")
    for member in c.nodes:
        assert registered_jobs(member) == 0


def forged_frames(sender_id, victim_jid, forged_jid):
    """A DELJOB of a real job and a REPLJOB of an invented one, in the bus format
    (disque/contracts/bus_messages.py), as if sent by node `sender_id`."""
    queue, body = b"forged", b"injected"
    rest = struct.pack("<I", len(queue)) + queue + struct.pack("<I", len(body)) + body \
        + struct.pack("<I", 1) + sender_id.encode()
    head = struct.pack("<40sBBHIQIIHH", forged_jid, 1, 0, 2, 300, time.time_ns(),
                       0, 60, 0, 0)
    job = struct.pack("<I", len(head) + len(rest)) + head + rest
    header = [sender_id, "127.0.0.1", 1, 0, 0]
    return [msgpack.packb([bus_msg.DELJOB, *header, [victim_jid, 0]], use_bin_type=True),
            msgpack.packb([bus_msg.REPLJOB, *header, job], use_bin_type=True)]


def forge(ctx, bus_port, sender_id, frames, keys=None, server_key=None):
    """A raw ZeroMQ DEALER claiming to be node `sender_id`; returns it (the caller closes)."""
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.setsockopt(zmq.IDENTITY, sender_id.encode())
    if keys is not None:
        d.setsockopt(zmq.CURVE_SERVERKEY, server_key)
        d.setsockopt(zmq.CURVE_PUBLICKEY, keys[0])
        d.setsockopt(zmq.CURVE_SECRETKEY, keys[1])
    d.connect("tcp://127.0.0.1:%d" % bus_port)
    for f in frames:
        d.send(f)               # queued until (if ever) the handshake completes
    return d


def job_pair(c):
    """A job replicated on both nodes, and an unused ID from the same node (for REPLJOB)."""
    with RawConn(c[0].port) as r:
        jid = addjob(r, "victim", b"v", 5000, "REPLICATE", 2)
        other = addjob(r, "victim2", b"w", 5000, "REPLICATE", 1)
        assert r.execute("DELJOB", other) == 1          # a well-formed ID no node holds
    with RawConn(c[1].port) as r:
        assert show(r, jid) is not None
    return jid, other


def test_forged_bus_frames_change_an_open_cluster(start_cluster):
    """The control for the next test: the same frames do act on a node without a secret."""
    c = start_cluster(2)
    jid, forged = job_pair(c)
    ctx = zmq.Context()
    try:
        d = forge(ctx, c[1].port + BUS, c.ids[0], forged_frames(c.ids[0], jid, forged))
        with RawConn(c[1].port) as r:
            wait_until(lambda: show(r, jid) is None, timeout=5, message="forged DELJOB ignored")
            wait_until(lambda: show(r, forged) is not None, timeout=5,
                       message="forged REPLJOB ignored")
        d.close()
    finally:
        ctx.term()


def test_forged_bus_frames_change_nothing_on_a_secured_node(start_cluster):
    c = start_cluster(2, extra_args=["--cluster-secret", SECRET])
    jid, forged = job_pair(c)
    before = registered_jobs(c[1])
    frames = forged_frames(c.ids[0], jid, forged)
    right = derive_keypair(SECRET)
    ctx = zmq.Context()
    try:
        dealers = [
            forge(ctx, c[1].port + BUS, c.ids[0], frames),                     # no CURVE
            forge(ctx, c[1].port + BUS, c.ids[0], frames,                      # other secret
                  keys=(derive_keypair(OTHER).public, derive_keypair(OTHER).secret),
                  server_key=derive_keypair(OTHER).public),
            # the server's public key leaked, but the client key is of no accepted secret
            forge(ctx, c[1].port + BUS, c.ids[0], frames, keys=zmq.curve_keypair(),
                  server_key=right.public),
        ]
        wait_until(lambda: "a client key of no secret we accept" in c[1].log_text()
                   or int(info_cluster(c[1])["cluster_bus_handshakes_refused"]) >= 3,
                   timeout=15, message="forgers were not refused")
        wait_until(lambda: int(info_cluster(c[1])["cluster_bus_handshakes_refused"]) >= 3,
                   timeout=10)
        # ZeroMQ would have delivered by now; give the node a cron tick or two anyway
        time.sleep(0.3)
        with RawConn(c[1].port) as r:
            assert show(r, jid) is not None
            assert show(r, forged) is None
        assert registered_jobs(c[1]) == before
        for d in dealers:
            d.close()
    finally:
        ctx.term()
    # the cluster itself still works
    wait_until(replicates_everywhere(c), timeout=10, message="secured cluster broken")


def restart_with(c, i, args):
    node = c[i]
    c.kill(i)
    node.extra_args = ["--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT), *args]
    c.restart(i)


@pytest.mark.slow
def test_rotation_node_by_node_keeps_the_cluster_whole(start_cluster, tmp_path):
    c = start_cluster(3, extra_args=["--cluster-secret", SECRET])
    secret_file = tmp_path / "bus.secret"
    secret_file.write_text(OTHER + "\n" + SECRET + "\n")
    secret_file.chmod(0o600)
    passes = [
        ["--cluster-secret", SECRET, "--cluster-secret-previous", OTHER],  # 1: learn the new one
        ["--cluster-secret-file", str(secret_file)],                        # 2: serve the new one
        ["--cluster-secret", OTHER],                                        # 3: forget the old one
    ]
    for args in passes:
        for i in range(len(c)):
            restart_with(c, i, args)
            wait_until(replicates_everywhere(c), timeout=20,
                       message="cluster not whole after restarting node %d with %s" % (i, args))
    c.wait_mesh()
    for node in c.nodes:
        fields = info_cluster(node)
        assert fields["cluster_bus_secured"] == "1" and fields["cluster_bus_accepted_secrets"] == "1"
        assert known_ids(node) == set(c.ids)


@pytest.mark.slow
def test_skipping_the_serving_pass_splits_the_cluster(start_cluster):
    """Why rotation needs its middle pass: a node that knows only the new secret cannot reach
    a node that still serves the old one (one CURVE keypair per server socket)."""
    c = start_cluster(2, extra_args=["--cluster-secret", SECRET])
    restart_with(c, 1, ["--cluster-secret", SECRET, "--cluster-secret-previous", OTHER])
    wait_until(replicates_everywhere(c), timeout=20, message="pass 1 broke the cluster")
    restart_with(c, 0, ["--cluster-secret", OTHER])         # pass 2 skipped
    with RawConn(c[0].port) as r:
        err = r.execute("ADDJOB", "split", "x", 1000, "REPLICATE", 2)
        assert isinstance(err, Err) and err.startswith(b"NOREPL"), err
    wait_until(lambda: "another cluster secret" in c[1].log_text(), timeout=10)
