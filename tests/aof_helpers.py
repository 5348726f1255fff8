"""Helpers shared by the persistence tests (tests/test_persistence_*.py)."""
import os
import signal
import time

from disque.contracts import job_codec as codec
from disque.contracts.aof_format import LOADJOB, record
from disque._fast.job import Job, QUEUED
from support.info import parse_info
from support.resp_client import NULL_ARRAY, Status, encode_command
from support.waits import wait_until



def aof_files(srv):
    """{worker index: path} of the node's AOF files in its dir."""
    out = {}
    prefix = "disque.%d.w" % srv.port
    for name in os.listdir(srv.workdir):
        if name.startswith(prefix) and name.endswith(".aof"):
            out[int(name[len(prefix):-4])] = srv.workdir / name
    return dict(sorted(out.items()))


def kill_node(srv):
    """SIGKILL the front-end and every worker at once (their process group, which the
    test harness created for this server), as a power cut of the node would."""
    srv.record_descendants()
    os.killpg(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(10)
    assert not srv.surviving_descendants(), "processes survived SIGKILL"
    srv.close_clients()


def restart(srv, workers=None, extra_args=None, wait=True):
    """Start the server again on the same port, in the same dir (same AOF files)."""
    if workers is not None:
        srv.workers = workers
    if extra_args is not None:
        srv.extra_args = [str(a) for a in extra_args]
    srv.spawn(port=srv.port)
    if wait:
        srv.wait_ready()
    return srv


def wait_exit(srv, timeout=15):
    rc = srv.wait_exit(timeout)
    assert rc is not None, "server did not exit; log:\n" + srv.log_tail()
    return rc


def info(srv, section="persistence"):
    return parse_info(srv.execute("INFO", section))


def wait_rewrite_done(srv, timeout=20):
    """Until no worker rewrites and the last rewrite went well."""
    def done():
        i = info(srv)
        return i["aof_rewrite_in_progress"] == "0" and i["aof_state"] != "wait-rewrite"
    wait_until(done, timeout, 0.05, "AOF rewrite did not finish")
    i = info(srv)
    assert i["aof_last_bgrewrite_status"] == "ok", i
    return i


def add_jobs(r, queues, per_queue, *opts, body=b"job"):
    """ADDJOB per_queue jobs in each queue (pipelined); {job id: queue}."""
    cmds = []
    order = []
    for q in queues:
        for i in range(per_queue):
            body_i = b"%s-%s-%d" % (body, q.encode(), i)
            cmds.append(encode_command("ADDJOB", q, body_i, 0, *opts))
            order.append(q)
    r.send(b"".join(cmds))
    ids = {}
    for q in order:
        reply = r.read_parsed()
        assert type(reply) is Status, reply
        ids[bytes(reply)] = q
    return ids


def fetch_all(r, queues, expected, timeout=10):
    """GETJOB until `expected` jobs came (or the deadline): {id: (queue, body)}."""
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        reply = r.execute("GETJOB", "NOHANG", "COUNT", 1000, "FROM", *queues)
        if reply == NULL_ARRAY:
            time.sleep(0.02)
            continue
        for q, jid, body in reply:
            assert jid not in got, "job delivered twice: %r" % jid
            got[jid] = (q, body)
    return got


def enqueue_all(r, ids):
    total = 0
    ids = list(ids)
    for i in range(0, len(ids), 500):
        total += r.execute("ENQUEUE", *ids[i:i + 500])
    return total


def registered_jobs(srv):
    return int(info(srv, "jobs")["registered_jobs"])


def write_big_aof(path, n, node_id):
    """An AOF of `n` queued jobs of this node: a load that takes about a second per 300,000."""
    now = int(time.time())
    chunks = []
    for i in range(n):
        job = Job(b"D-%s-AA%022d-05a1" % (node_id[:8], i), b"big", b"b" * 20)
        job.state = QUEUED
        job.etime = now + 3600
        job.ctime = (now * 1000 + i) * 1000000
        job.retry = 300
        job.repl = 1
        job.nodes_delivered = (node_id,)
        chunks.append(record(LOADJOB, codec.serialize(job, True, now)))
    path.write_bytes(b"".join(chunks))
