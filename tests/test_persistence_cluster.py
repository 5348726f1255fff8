"""A cluster with AOF on survives a mass reboot (issue 5, upstream README "Disque and disk
persistence"): every node SIGKILLed at once, restarted, and every job is still delivered."""
import time

from support.resp_client import RawConn
from support.waits import wait_until
from support.jobs import queue_names, show
from support.resp_client import NULL_ARRAY, Status



def test_seven_nodes_sigkilled_and_restarted_deliver_every_job(start_cluster):
    c = start_cluster(7, workers=1, extra_args=["--appendonly", "yes", "--appendfsync", "always"])
    queues = queue_names("mass", 5)
    jobs = {}
    for i in range(7):
        with RawConn(c[i].port) as r:
            for k in range(6):
                q = queues[(i + k) % len(queues)]
                reply = r.execute("ADDJOB", q, b"n%d-%d" % (i, k), 5000, "REPLICATE", 3, "RETRY", 1)
                assert type(reply) is Status, reply
                jobs[bytes(reply)] = q
    # acknowledged jobs stay gone: ack a few and wait until no node knows them any more
    acked = list(jobs)[:4]
    with RawConn(c[0].port) as r:
        assert r.execute("ACKJOB", *acked) == 4

    def acked_gone():
        for node in c.nodes:
            with RawConn(node.port) as r:
                if any(show(r, jid) is not None for jid in acked):
                    return False
        return True
    wait_until(acked_gone, timeout=15, message="acked jobs still known")
    for jid in acked:
        del jobs[jid]
    for i in range(7):              # a mass reboot: the whole cluster goes down
        c.kill(i)
    for node in c.nodes:
        node.spawn(port=node.port)
    for node in c.nodes:
        node.wait_ready()
    c.wait_mesh(timeout=30)
    # loaded jobs are active; each copy requeues itself after RETRY: consume everywhere
    delivered = {}
    deadline = time.monotonic() + 30
    conns = [RawConn(node.port) for node in c.nodes]
    try:
        while len(delivered) < len(jobs) and time.monotonic() < deadline:
            got = False
            for r in conns:
                reply = r.execute("GETJOB", "NOHANG", "COUNT", 100, "FROM", *queues)
                if reply == NULL_ARRAY:
                    continue
                got = True
                for q, jid, body in reply:
                    delivered[jid] = q
                    # 0 when another copy was delivered and acked first (at least once)
                    assert r.execute("ACKJOB", jid) in (0, 1)
            if not got:
                time.sleep(0.05)
    finally:
        for r in conns:
            r.close()
    missing = set(jobs) - set(delivered)
    assert not missing, "%d of %d jobs never delivered after the restart" % (
        len(missing), len(jobs))
    assert not set(acked) & set(delivered), "an acknowledged job came back"
    assert all(delivered[jid].decode() == q for jid, q in jobs.items())
