"""Blocking GETJOB across worker processes (SPEC 3.2, 8.3; docs/design.md, "Blocking GETJOB
across workers").

Queue names are spread over 12 distinct names so that, whatever the slot hash is,
several workers of a 3-worker server are involved.  Invariants checked:
* a job is handed to at most one client (RETRY is large, so no legitimate redelivery);
* blocked clients are served one job each, in the order they blocked;
* clients that time out or disconnect never swallow a job.
"""

import random
import threading
import time

import pytest
from support.jobs import addjob, show
from support.resp_client import NULL_ARRAY, RawConn, Status, encode_command
from support.waits import wait_until


show, addjob, wait_until, encode = show, addjob, wait_until, encode_command

QUEUES = [f"bq-{i}" for i in range(12)]


def blocked(srv):
    return int(srv.info_fields("clients")["blocked_clients"])


def total_qlen(r, queues=QUEUES):
    r.send(b"".join(encode("QLEN", q) for q in queues))
    return sum(r.read_parsed() for _ in queues)


def block_one(srv, *getjob_args, timeout=15):
    """Open a raw connection and send GETJOB; return once INFO blocked_clients has
    increased (i.e. the server has registered this client as blocked).

    Only an increase is required here so that a wrong absolute count (checked by
    test_blocked_clients_counts_clients_not_queues) does not mask the ordering
    checks built on top of this helper."""
    before = blocked(srv)
    c = srv.raw(timeout=timeout)
    c.send(encode("GETJOB", *getjob_args))
    wait_until(lambda: blocked(srv) > before, 5,
               message=f"client did not block (blocked_clients stayed at {before})")
    return c


def block_clients(srv, n, queues, timeout_ms=20000):
    """Open n raw connections, block each with GETJOB one at a time (confirming each is
    blocked before the next); return them in blocking order."""
    return [block_one(srv, "TIMEOUT", timeout_ms, "FROM", *queues) for _ in range(n)]


def produce(r, items, opts=("RETRY", 300)):
    """Pipelined ADDJOBs; items = [(queue, body)]. Returns the IDs in order."""
    r.send(b"".join(encode("ADDJOB", q, b, 0, *opts) for q, b in items))
    ids = []
    for _ in items:
        reply = r.read_parsed()
        assert type(reply) is Status, reply
        ids.append(bytes(reply))
    return ids


# ---------------------------------------------------------------------------
# one job per blocked client
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("jobs_per_client", [1, 2])
def test_blocked_on_many_queues_get_one_job_each(server, jobs_per_client):
    n = 8
    conns = block_clients(server, n, QUEUES)
    p = server.raw()
    items = [(QUEUES[(i * 5) % 12], b"job%d" % i) for i in range(n * jobs_per_client)]
    ids = produce(p, items)
    got = []
    for c in conns:
        reply = c.read_parsed(timeout=10)
        assert isinstance(reply, list) and len(reply) == 1, reply
        q, job_id, body = reply[0]
        assert q in [x.encode() for x in QUEUES]
        got.append(job_id)
    assert len(set(got)) == n, got
    assert set(got) <= set(ids)
    for c in conns:
        assert not c.has_data(0.05)
    wait_until(lambda: blocked(server) == 0, 5)
    # surplus offers come back one round trip after the replies (see below)
    wait_until(lambda: total_qlen(p) == len(ids) - n, 5,
               message="surplus offers did not come back to their queues")
    for job_id in got:
        assert show(p, job_id)[b"state"] == b"active"


def test_many_jobs_to_one_queue_many_blocked_clients(server):
    n = 6
    conns = block_clients(server, n, QUEUES)
    p = server.raw()
    ids = produce(p, [(QUEUES[7], b"%d" % i) for i in range(n)])
    got = [c.read_parsed(timeout=10)[0][1] for c in conns]
    # FIFO blocking order and FIFO queue order
    assert got == ids
    assert total_qlen(p) == 0


def test_blocked_clients_counts_clients_not_queues(server):
    """INFO blocked_clients counts blocked clients (SPEC 14), whatever the number of
    queues (and workers) each one waits on."""
    c1 = server.raw()
    c1.send(encode("GETJOB", "TIMEOUT", 20000, "FROM", *QUEUES))
    wait_until(lambda: blocked(server) >= 1, 5)
    c2 = server.raw()
    c2.send(encode("GETJOB", "TIMEOUT", 20000, "FROM", QUEUES[0]))
    wait_until(lambda: blocked(server) >= 2, 5)
    assert not c1.has_data(0.2)
    assert blocked(server) == 2
    assert int(server.info_fields("clients")["connected_clients"]) >= 2


def test_served_client_removed_from_all_its_queues(server):
    c = block_one(server, "FROM", *QUEUES)
    p = server.raw()
    first = addjob(p, QUEUES[3], b"first")
    assert c.read_parsed(timeout=5) == [[QUEUES[3].encode(), first, b"first"]]
    produce(p, [(q, b"later") for q in QUEUES])
    assert not c.has_data(0.3), c.buf
    assert blocked(server) == 0
    assert total_qlen(p) == 12


def test_timed_out_client_receives_nothing_later(server):
    c = server.raw()
    assert c.call("GETJOB", "TIMEOUT", 200, "FROM", *QUEUES, timeout=5) == b"*-1\r\n"
    wait_until(lambda: blocked(server) == 0, 5)
    p = server.raw()
    produce(p, [(q, b"x") for q in QUEUES])
    assert not c.has_data(0.3), c.buf
    assert total_qlen(p) == 12
    assert c.call("PING") == b"+PONG\r\n"


# ---------------------------------------------------------------------------
# FIFO order of blocked clients
# ---------------------------------------------------------------------------


def _assert_served_in_order(server, conns, queues_for_job):
    p = server.raw()
    for i, q in enumerate(queues_for_job):
        job_id = addjob(p, q, b"order%d" % i)
        wait_until(lambda: any(c.has_data(0) for c in conns), 5,
                   message=f"job {i} was not delivered to any blocked client")
        time.sleep(0.05)   # give a (buggy) second delivery the chance to show up
        receivers = [j for j, c in enumerate(conns) if c.has_data(0)]
        assert receivers == [i], f"job {i} went to clients {receivers}; expected client {i} (the {i}-th to block)"
        assert conns[i].read_parsed(timeout=5) == [[q.encode(), job_id, b"order%d" % i]]


def test_fifo_order_single_queue(server):
    conns = block_clients(server, 5, ["fifo-q"])
    _assert_served_in_order(server, conns, ["fifo-q"] * 5)


def test_fifo_order_multi_queue_across_workers(server):
    conns = block_clients(server, 5, QUEUES)
    _assert_served_in_order(server, conns, [QUEUES[(i * 7) % 12] for i in range(5)])


def test_fifo_order_mixed_queue_sets(server):
    # client 0 waits on q5 only, client 1 on all queues, client 2 on q9 and q5
    c0 = block_one(server, "FROM", QUEUES[5])
    c1 = block_one(server, "FROM", *QUEUES)
    c2 = block_one(server, "FROM", QUEUES[9], QUEUES[5])
    conns = [c0, c1, c2]
    # a job on q9: only c1 and c2 wait there, c1 blocked first
    p = server.raw()
    j9 = addjob(p, QUEUES[9], b"nine")
    wait_until(lambda: c1.has_data(0.05), 5, message="q9 job not delivered to client 1")
    assert not c0.has_data(0) and not c2.has_data(0)
    assert c1.read_parsed()[0][1] == j9
    j5 = addjob(p, QUEUES[5], b"five")
    wait_until(lambda: c0.has_data(0.05), 5, message="q5 job not delivered to client 0")
    assert not c2.has_data(0)
    assert c0.read_parsed()[0][1] == j5
    j5b = addjob(p, QUEUES[5], b"five-b")
    assert c2.read_parsed(timeout=5)[0][1] == j5b
    wait_until(lambda: blocked(server) == 0, 5)
    del conns


# ---------------------------------------------------------------------------
# concurrency: exactly-once hand-out under load
# ---------------------------------------------------------------------------


class Consumer(threading.Thread):
    def __init__(self, srv, idx, stop, queues, timeouts=(50, 300)):
        super().__init__(daemon=True)
        self.conn = srv.raw(timeout=15)
        self.rng = random.Random(idx)
        self.stop_evt = stop
        self.queues = queues
        self.timeouts = timeouts
        self.got = []
        self.errors = []
        self.timeouts_seen = 0

    def run(self):
        try:
            while not self.stop_evt.is_set():
                qs = self.rng.sample(self.queues, self.rng.randint(1, len(self.queues)))
                count = self.rng.choice([1, 1, 2, 5])
                tmo = self.rng.randint(*self.timeouts)
                reply = self.conn.execute("GETJOB", "COUNT", count, "TIMEOUT", tmo, "FROM", *qs, timeout=15)
                if reply is NULL_ARRAY:
                    self.timeouts_seen += 1
                    continue
                if not isinstance(reply, list):
                    self.errors.append(reply)
                    return
                for job in reply:
                    assert job[0].decode() in qs, (job, qs)
                    self.got.append(job[1])
        except Exception as exc:  # surfaced by the test
            self.errors.append(exc)


def test_concurrent_consumers_every_job_exactly_once(server):
    n_jobs = 500
    stop = threading.Event()
    consumers = [Consumer(server, i, stop, QUEUES, timeouts=(10, 300)) for i in range(8)]
    for c in consumers:
        c.start()
    p = server.raw()
    rng = random.Random(42)
    produced = []
    try:
        for start in range(0, n_jobs, 20):
            items = [(rng.choice(QUEUES), b"b%d" % i) for i in range(start, min(start + 20, n_jobs))]
            produced += produce(p, items)
            time.sleep(0.01)
        # wait for all deliveries, but give up early once progress stops for 5 s
        last = (-1, time.monotonic())
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            n = sum(len(c.got) for c in consumers)
            if n >= n_jobs:
                break
            if n != last[0]:
                last = (n, time.monotonic())
            elif time.monotonic() - last[1] > 5:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        for c in consumers:
            c.join(20)
    errors = [e for c in consumers for e in c.errors]
    assert not errors, errors
    delivered = [j for c in consumers for j in c.got]
    dups = {j for j in delivered if delivered.count(j) > 1} if len(delivered) != len(set(delivered)) else set()
    assert not dups, f"{len(dups)} jobs delivered more than once"
    missing = set(produced) - set(delivered)
    if missing:
        states = {}
        for job_id in missing:
            s = show(p, job_id)
            states[s and s[b"state"]] = states.get(s and s[b"state"], 0) + 1
        pytest.fail(f"{len(missing)} of {n_jobs} jobs never delivered; their states: {states}; "
                    f"total QLEN {total_qlen(p)}")
    assert len(delivered) == n_jobs
    assert total_qlen(p) == 0
    assert p.execute("ACKJOB", *produced) == n_jobs
    assert sum(c.timeouts_seen for c in consumers) > 0     # timeouts really raced with arrivals
    wait_until(lambda: blocked(server) == 0, 5)


def test_timeouts_racing_with_arrivals_lose_nothing(server):
    """Many very short blocking GETJOBs; whatever the interleaving, delivered + queued == produced."""
    stop = threading.Event()
    consumers = [Consumer(server, 100 + i, stop, QUEUES, timeouts=(1, 30)) for i in range(6)]
    for c in consumers:
        c.start()
    p = server.raw()
    rng = random.Random(7)
    produced = []
    try:
        for start in range(0, 300, 10):
            produced += produce(p, [(rng.choice(QUEUES), b"t%d" % i) for i in range(start, start + 10)])
            time.sleep(0.005)
    finally:
        stop.set()
        for c in consumers:
            c.join(20)
    errors = [e for c in consumers for e in c.errors]
    assert not errors, errors
    delivered = [j for c in consumers for j in c.got]
    assert len(delivered) == len(set(delivered)), "a job was delivered twice"
    assert set(delivered) <= set(produced)
    wait_until(lambda: blocked(server) == 0, 5)
    queued = total_qlen(p)
    if len(delivered) + queued != len(produced):
        lost = [j for j in set(produced) - set(delivered)]
        states = {}
        for job_id in lost:
            s = show(p, job_id)
            states[s and s[b"state"]] = states.get(s and s[b"state"], 0) + 1
        pytest.fail(f"delivered {len(delivered)} + queued {queued} != produced {len(produced)}; "
                    f"undelivered jobs by state: {states} ('active' = handed out but never received)")
    # the leftovers are exactly the undelivered jobs
    rest = p.execute("GETJOB", "NOHANG", "COUNT", 1000, "FROM", *QUEUES)
    rest_ids = [] if rest is NULL_ARRAY else [j[1] for j in rest]
    assert set(rest_ids) | set(delivered) == set(produced)


def test_disconnected_blocked_clients_do_not_swallow_jobs(server):
    conns = block_clients(server, 6, QUEUES)
    for i, c in enumerate(conns):
        if i % 2:
            c.abort()          # RST
        else:
            c.close()          # FIN
    wait_until(lambda: blocked(server) == 0, 5, message="disconnected clients still counted as blocked")
    p = server.raw()
    ids = produce(p, [(q, b"x") for q in QUEUES])
    assert total_qlen(p) == 12
    for job_id in ids:
        assert show(p, job_id)[b"state"] == b"queued"


def test_disconnect_storm_loses_no_job(server):
    """Clients block and vanish while jobs arrive: no job may disappear.  A job written
    to a client that was dying at that very moment can legitimately be 'active'
    (it will come back after RETRY); at most one such job per aborted client."""
    stop = threading.Event()
    aborts = [0]
    lock = threading.Lock()

    def storm(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            c = RawConn(server.port, timeout=5)
            c.send(encode("GETJOB", "TIMEOUT", 5000, "FROM", *rng.sample(QUEUES, 4)))
            time.sleep(rng.uniform(0, 0.03))
            if rng.random() < 0.5:
                c.abort()
            else:
                c.close()
            with lock:
                aborts[0] += 1

    threads = [threading.Thread(target=storm, args=(s,), daemon=True) for s in range(4)]
    for t in threads:
        t.start()
    p = server.raw()
    produced = []
    rng = random.Random(3)
    try:
        for start in range(0, 200, 10):
            produced += produce(p, [(rng.choice(QUEUES), b"s%d" % i) for i in range(start, start + 10)])
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    wait_until(lambda: blocked(server) == 0, 10)
    states = {}
    for job_id in produced:
        s = show(p, job_id)
        assert s is not None, f"job {job_id!r} vanished"
        states.setdefault(s[b"state"], []).append(job_id)
    queued = len(states.get(b"queued", []))
    active = len(states.get(b"active", []))
    assert queued + active == len(produced), states.keys()
    assert active <= aborts[0], (
        f"{active} jobs are 'active' but only {aborts[0]} clients ever blocked: some job was "
        f"handed out without a client to receive it")
    assert total_qlen(p) == queued
    # most jobs must still be queued: a storm of dying clients must not eat the queue
    assert queued >= len(produced) - aborts[0]


def test_many_clients_blocked_on_rotated_queue_lists(server):
    conns = []
    for i in range(20):
        rotated = QUEUES[i % 12:] + QUEUES[:i % 12]
        conns.append(block_one(server, "TIMEOUT", 20000, "FROM", *rotated))
    assert blocked(server) == 20
    p = server.raw()
    produce(p, [(q, b"x") for q in QUEUES for _ in range(2)])
    got = 0
    for c in conns:
        if c.has_data(3):
            reply = c.read_parsed(timeout=5)
            assert len(reply) == 1
            got += 1
    assert got == 20
    # A client blocked on queues of several workers can be offered a job by more than
    # one of them; the surplus is RETURNed to its worker one round trip after the
    # client's reply, so QLEN may count it out for that moment (docs/design.md,
    # "Blocking GETJOB across workers"); INFO blocked_clients drops with the reply, not
    # with the RETURN.  What must hold is that it comes back.
    wait_until(lambda: total_qlen(p) == 4, 5,
               message="surplus offers did not come back to their queues")
    wait_until(lambda: blocked(server) == 0, 5)
