"""An ADDJOB still waiting for its copies while the cluster already delivered and
acknowledged the job (issue 13). A partition keeps the producer's node short of copies;
another node's copy is requeued after RETRY, handed back to the producer's node through
federation (YOURJOBS), delivered there and acknowledged on the other side (SETACK).

The node used to crash in repl_cron (`job.nodes_confirmed` was None after the SETACK).
Like the original, the producer now gets -NOREPL at its timeout, the job stays acknowledged
(no DELJOB of an acknowledged job, no REPLJOB sent for it any more) and the node lives."""
import time

import pytest

from support.jobs import show
from support.resp_client import RawConn, Status
from support.waits import wait_until
from support.resp_client import Err, encode_command

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _waiting_addjob(cluster, cut, queue, timeout_ms):
    """ADDJOB REPLICATE 3 on node 0 while node `cut` drops its bus traffic: node 0 gets
    one confirmed copy (node 1) and keeps waiting. Returns the producer's connection."""
    assert cluster[cut].execute("DEBUG", "BUS", "DROP-ALL") == Status(b"OK")
    prod = RawConn(cluster[0].port, timeout=timeout_ms / 1000 + 10)
    prod.send(encode_command("ADDJOB", queue, b"racy", timeout_ms,
                                "REPLICATE", 3, "RETRY", 1))
    return prod


def _job_id_on(node, queue):
    with RawConn(node.port) as r:
        listed = r.execute("JSCAN", "QUEUE", queue, "COUNT", 100)
        return listed[1][0] if listed[1] else None


def test_setack_for_a_delivered_job_still_waiting_for_copies(start_cluster):
    c = start_cluster(3, workers=1)
    timeout_ms = 6000
    prod = _waiting_addjob(c, 2, "wr", timeout_ms)
    t0 = time.monotonic()
    try:
        wait_until(lambda: _job_id_on(c[1], "wr") is not None, timeout=5,
                   message="node 1 never got its copy")
        jid = _job_id_on(c[1], "wr")
        with RawConn(c[0].port) as r:
            assert show(r, jid)[b"state"] == b"wait-repl"
        # node 1 requeues its copy after RETRY 1; a consumer blocked on node 0 imports it
        # (NEEDJOBS / YOURJOBS) and node 0 delivers its own still-waiting job
        with RawConn(c[0].port, timeout=10) as cons:
            got = cons.execute("GETJOB", "TIMEOUT", 5000, "FROM", "wr")
            assert got is not None and got[0][1] == jid, got
        # acknowledged on node 1: node 0 receives SETACK for a job it delivered
        with RawConn(c[1].port) as r:
            assert r.execute("ACKJOB", jid) == 1
        wait_until(lambda: show(RawConn(c[0].port), jid)[b"state"] == b"acked", timeout=5,
                   message="node 0 never heard of the ack")
        # the producer: -NOREPL at its timeout, as the original does
        reply = prod.read_parsed(timeout=timeout_ms / 1000 + 5)
        waited = time.monotonic() - t0
        assert isinstance(reply, Err) and reply.startswith(b"NOREPL"), reply
        assert waited >= timeout_ms / 1000 - 0.5
        assert c[0].all_alive(), c[0].log_text()[-2000:]
        with RawConn(c[0].port) as r:
            assert r.execute("PING") == Status(b"PONG")
            s = show(r, jid)
            assert s is None or s[b"state"] == b"acked"     # acked, being collected
    finally:
        prod.close()
        c[2].execute("DEBUG", "BUS", "RESTORE")
    assert "Traceback" not in c[0].log_text()


def test_local_ack_of_a_waiting_job_keeps_it_acked(start_cluster):
    """ACKJOB on the producer's node while its ADDJOB waits: the original keeps the client
    blocked until -NOREPL at the timeout and does not delete the acknowledged job from the
    cluster; no more REPLJOB is sent for it either."""
    c = start_cluster(3, workers=1)
    timeout_ms = 3000
    prod = _waiting_addjob(c, 2, "wl", timeout_ms)
    try:
        wait_until(lambda: _job_id_on(c[1], "wl") is not None, timeout=5,
                   message="node 1 never got its copy")
        jid = _job_id_on(c[1], "wl")
        with RawConn(c[0].port) as r:
            assert r.execute("ACKJOB", jid) == 1
            assert show(r, jid)[b"state"] == b"acked"
        reply = prod.read_parsed(timeout=timeout_ms / 1000 + 5)
        assert isinstance(reply, Err) and reply.startswith(b"NOREPL"), reply
        # the acknowledgement survives on node 1 (not deleted as a failed ADDJOB would be;
        # its GC cannot finish while node 2 is cut off)
        time.sleep(0.3)
        with RawConn(c[1].port) as r:
            s = show(r, jid)
            assert s is not None and s[b"state"] == b"acked", s
        assert c[0].all_alive()
    finally:
        prod.close()
        c[2].execute("DEBUG", "BUS", "RESTORE")
    assert "Traceback" not in c[0].log_text()


def test_fastack_of_a_waiting_job_answers_at_once(start_cluster):
    """FASTACK deletes the job on the producer's node: the waiting ADDJOB gets -NOREPL
    (removed) right away and no copy is sent again for the deleted job."""
    c = start_cluster(3, workers=1)
    prod = _waiting_addjob(c, 2, "wf", 8000)
    try:
        wait_until(lambda: _job_id_on(c[1], "wf") is not None, timeout=5,
                   message="node 1 never got its copy")
        jid = _job_id_on(c[1], "wf")
        t0 = time.monotonic()
        with RawConn(c[0].port) as r:
            assert r.execute("FASTACK", jid) == 1
        reply = prod.read_parsed(timeout=5)
        assert isinstance(reply, Err) and reply.startswith(b"NOREPL"), reply
        assert time.monotonic() - t0 < 2.0
        with RawConn(c[0].port) as r:
            assert show(r, jid) is None
        assert c[0].all_alive()
    finally:
        prod.close()
        c[2].execute("DEBUG", "BUS", "RESTORE")
