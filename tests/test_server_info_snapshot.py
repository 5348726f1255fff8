"""INFO is rendered from the workers' last figures while they are exact (issue 10 item 5,
docs/info-latency.md): no round trip to the workers per INFO, yet a client always sees its
own writes, and what workers change on their own shows within MAX_AGE_S."""
import os
import signal
import time

import pytest

from support.resp_client import RawConn
from support.waits import wait_until
from disque.info_snapshot import MAX_AGE_S
from support.info import parse_info
from support.jobs import addjob, queue_names
from support.resp_client import Status, encode_command

pytestmark = pytest.mark.server


def jobs_in(info_reply):
    return int(parse_info(info_reply)["registered_jobs"])


def test_info_counts_every_job_added_just_before(server3):
    r = server3.raw()
    queues = queue_names("snap", 6)
    for i in range(60):
        addjob(r, queues[i % len(queues)], b"x", 0)
        assert jobs_in(r.execute("INFO")) == i + 1
    # pipelined in one write: ADDJOB then INFO, the INFO still counts it
    r.send(encode_command("ADDJOB", queues[0], "y", 0) + encode_command("INFO", "jobs"))
    r.read_parsed()
    assert jobs_in(r.read_parsed()) == 61
    # another connection's write is seen too
    other = server3.raw()
    jid = addjob(other, queues[1], b"z", 0)
    assert jobs_in(r.execute("INFO")) == 62
    other.execute("DELJOB", jid)
    assert jobs_in(r.execute("INFO")) == 61
    assert r.execute("DEBUG", "FLUSHALL") == Status(b"OK")
    assert jobs_in(r.execute("INFO")) == 0
    assert jobs_in(r.execute("INFO", "all")) == 0


def test_many_clients_get_the_same_exact_figures(server3):
    r = server3.raw()
    for q in queue_names("many", 9):
        addjob(r, q, b"x", 0)
    conns = [server3.raw() for _ in range(20)]
    for c in conns:
        c.send(encode_command("INFO") * 5)
    for c in conns:
        for _ in range(5):
            i = parse_info(c.read_parsed())
            assert (i["registered_jobs"], i["registered_queues"]) == ("9", "9")


def test_changes_made_by_the_workers_timers_show_within_the_bound(server1):
    r = server1.raw()
    addjob(r, "ttlq", b"x", 0, "TTL", 1)
    assert jobs_in(r.execute("INFO")) == 1
    # the job expires by itself (no command): INFO shows it within TTL + the timer's
    # resolution + MAX_AGE_S; keep asking all along, which must not keep an old figure
    t0 = time.monotonic()
    wait_until(lambda: jobs_in(r.execute("INFO")) == 0, timeout=1 + 2.0 + MAX_AGE_S,
               interval=0.01, message="INFO kept counting an expired job")
    assert time.monotonic() - t0 < 3.5


def test_info_answers_without_a_round_trip_to_the_workers(start_server):
    """A stopped worker does not hold INFO back while the snapshot is fresh (before the
    snapshot, every INFO waited for every worker)."""
    srv = start_server(workers=2)
    worker = srv.worker_pids()[0]
    answered = False
    try:
        for _ in range(30):
            with RawConn(srv.port, timeout=10) as c:
                c.execute("INFO")                   # takes a fresh snapshot
                os.kill(worker, signal.SIGSTOP)
                try:
                    c.send(encode_command("INFO"))
                    if c.has_data(timeout=MAX_AGE_S / 2):
                        assert parse_info(c.read_parsed())["registered_jobs"] == "0"
                        answered = True
                finally:
                    os.kill(worker, signal.SIGCONT)
                if not answered:
                    c.read_parsed()                 # the reply that waited for the worker
            if answered:
                break
    finally:
        os.kill(worker, signal.SIGCONT)
    assert answered, "every INFO waited for the workers"
    # INFO workers stays live: it asks the workers
    text = srv.execute("INFO", "workers").decode()
    assert "worker0:pid=" in text and "worker1:pid=" in text
