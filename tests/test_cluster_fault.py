"""Faults on real nodes: a partition that heals without requeueing acknowledged jobs
(SPEC 7.3, 7.4), and a bounded-time fault run (SIGKILL, restart, cut bus links) with
producers and consumers on every node of a 5-node cluster: no acknowledged job is lost."""
import random
import threading
import time

from support.jobs import show
from support.resp_client import NULL_ARRAY, Err, RawConn, Status
from support.waits import wait_until
from support.jobs import addjob


def test_partition_then_heal_requeues_no_acknowledged_job(start_cluster):
    c = start_cluster(3)
    with RawConn(c[0].port) as r:
        ids = [addjob(r, "pq", b"p%d" % i, 5000, "REPLICATE", 3, "RETRY", 2)
               for i in range(20)]
    # node 2 is cut off; the jobs are consumed and acknowledged on node 0 meanwhile
    assert c[2].execute("DEBUG", "BUS", "DROP-ALL") == Status(b"OK")
    t_cut = time.monotonic()
    with RawConn(c[0].port) as r:
        got = r.execute("GETJOB", "COUNT", 20, "NOHANG", "FROM", "pq")
        assert sorted(j[1] for j in got) == sorted(ids)
        assert r.execute("ACKJOB", *ids) == 20
    # node 2 cannot hear about it: after RETRY it queues its copies again (it is on its own)
    wait_until(lambda: c[2].execute("QLEN", "pq") == 20, timeout=8,
               message="the cut-off node did not requeue its copies")
    with RawConn(c[0].port) as r:
        assert all(show(r, jid)[b"state"] == b"acked" for jid in ids)   # GC needs node 2
    time.sleep(max(0.0, 4.0 - (time.monotonic() - t_cut)))
    assert c[2].execute("DEBUG", "BUS", "RESTORE") == Status(b"OK")
    t_heal = time.monotonic()
    c.wait_mesh(timeout=15)
    # the acks reach node 2 (GC retries, SETACK): its queued copies are dropped ...
    wait_until(lambda: c[2].execute("QLEN", "pq") == 0, timeout=20,
               message="node 2 still has acknowledged jobs queued after the heal")
    cleared = time.monotonic() - t_heal
    # ... and none is queued again anywhere during three more retry periods
    end = time.monotonic() + 6.0
    while time.monotonic() < end:
        assert [c[i].execute("QLEN", "pq") for i in range(3)] == [0, 0, 0]
        time.sleep(0.2)
    for i in range(3):
        with RawConn(c[i].port) as r:
            assert r.execute("GETJOB", "NOHANG", "FROM", "pq") is NULL_ARRAY

    def no_copies():
        for i in range(3):
            with RawConn(c[i].port) as r:
                if any(show(r, jid) is not None for jid in ids):
                    return False
        return True
    wait_until(no_copies, timeout=20, message="copies of acknowledged jobs remain")
    print(f"\nafter the heal: node 2's queued copies dropped in {cleared:.1f}s, "
          f"no copy left after {time.monotonic() - t_heal:.1f}s")


def test_replication_routes_around_a_silent_node(start_cluster):
    """A node that is still believed reachable but answers nothing: ADDJOB adds another
    node every ~50 ms while short of copies (SPEC 3.1), so REPLICATE 2 still succeeds."""
    c = start_cluster(3)
    assert c[2].execute("DEBUG", "BUS", "DROP-ALL") == Status(b"OK")
    ids = []
    silent_tried = 0
    try:
        with RawConn(c[0].port) as r:
            for i in range(20):
                t0 = time.monotonic()
                jid = addjob(r, "rr", b"r%d" % i, 3000, "REPLICATE", 2)
                took = time.monotonic() - t0
                assert took < 1.5, f"ADDJOB took {took:.2f}s"
                s = show(r, jid)
                assert s[b"state"] == b"queued"
                silent_tried += c.ids[2].encode() in s[b"nodes-delivered"]
                ids.append(jid)
    finally:
        c[2].execute("DEBUG", "BUS", "RESTORE")
    print(f"\n{silent_tried} of 20 ADDJOBs had picked the silent node first")
    assert silent_tried > 0         # each picks it first with p = 1/2 (until it is PFAIL)
    # every job has its 2 confirmed copies on live nodes; acks clean them up, node 2 included
    with RawConn(c[0].port) as r:
        got = r.execute("GETJOB", "COUNT", 20, "NOHANG", "FROM", "rr")
        assert sorted(j[1] for j in got) == sorted(ids)
        assert r.execute("ACKJOB", *ids) == 20
    c.wait_mesh(timeout=15)

    def no_copies():
        for i in range(3):
            with RawConn(c[i].port) as r:
                if any(show(r, jid) is not None for jid in ids):
                    return False
        return True
    wait_until(no_copies, timeout=20, message="copies of acknowledged jobs remain")


# ---------------------------------------------------------------------------------------------
# fault run
# ---------------------------------------------------------------------------------------------

FAULT_NODES = 5
ROUNDS = 2
DRAIN_SECONDS = 40.0
QUEUE = "fault"


class Conn:
    """A client that sticks to a preferred node and falls back to the others when it is
    down; every connection error just moves on (the nodes are killed under it)."""

    def __init__(self, cluster, home, timeout):
        self.c = cluster
        self.home = home
        self.timeout = timeout
        self.r = None
        self.at = None

    def get(self):
        if self.r is not None:
            return self.r
        order = [self.home] + [i for i in range(len(self.c)) if i != self.home]
        for i in order:
            try:
                self.r = RawConn(self.c[i].port, timeout=self.timeout)
                self.at = i
                return self.r
            except OSError:
                continue
        return None

    def drop(self):
        if self.r is not None:
            self.r.close()
        self.r = None
        self.at = None


def test_fault_run_loses_no_acknowledged_job(start_cluster):
    c = start_cluster(FAULT_NODES, workers=2)
    stop_producing = threading.Event()
    stop_consuming = threading.Event()
    consume_ok = threading.Event()
    consume_ok.set()
    lock = threading.Lock()
    acked = {}                  # job id -> time ADDJOB returned it (acknowledged to a producer)
    first_seen = {}             # job id -> time of its first delivery to a consumer
    deliveries = []             # every job id a consumer got (duplicates included)
    errors = {"producer": 0, "consumer": 0, "norepl": 0}

    def producer(home):
        conn = Conn(c, home, timeout=5)
        n = 0
        while not stop_producing.is_set():
            r = conn.get()
            if r is None:
                time.sleep(0.1)
                continue
            try:
                reply = r.execute("ADDJOB", QUEUE, b"%d-%d" % (home, n), 2000,
                                  "REPLICATE", 3, "RETRY", 2)
            except (OSError, ConnectionError, TimeoutError):
                with lock:
                    errors["producer"] += 1
                conn.drop()
                continue
            n += 1
            if type(reply) is Status:
                with lock:
                    acked[bytes(reply)] = time.monotonic()
            else:                       # NOREPL (not enough nodes / timeout): not acknowledged
                with lock:
                    errors["norepl"] += 1
                conn.drop()
                time.sleep(0.05)
            time.sleep(0.005)

    def consumer(home):
        conn = Conn(c, home, timeout=5)
        while not stop_consuming.is_set():
            if not consume_ok.wait(0.1):
                continue
            r = conn.get()
            if r is None:
                time.sleep(0.1)
                continue
            try:
                reply = r.execute("GETJOB", "TIMEOUT", 300, "COUNT", 20, "FROM", QUEUE)
                if reply is NULL_ARRAY:
                    if conn.at != home:
                        conn.drop()     # go back home when it is up again
                    continue
                if not isinstance(reply, list):
                    conn.drop()         # -LEAVING or the like: elsewhere
                    continue
                got = [j[1] for j in reply]
                now = time.monotonic()
                with lock:
                    deliveries.extend(got)
                    for jid in got:
                        first_seen.setdefault(jid, now)
                r.execute("ACKJOB", *got)
            except (OSError, ConnectionError, TimeoutError):
                with lock:
                    errors["consumer"] += 1
                conn.drop()

    threads = [threading.Thread(target=producer, args=(i,), daemon=True)
               for i in range(FAULT_NODES)]
    threads += [threading.Thread(target=consumer, args=(i,), daemon=True)
                for i in range(FAULT_NODES)]
    for th in threads:
        th.start()

    # Each round: consumers pause so jobs pile up in queues, a node is SIGKILLed with its
    # queued jobs (its copies are in memory only: it comes back empty), consumers resume,
    # a second node is killed the same way, both are restarted, then a third node is cut
    # off the bus for 3 s while everything runs. At most 2 nodes are down at once and the
    # rounds are ~10 s apart, so a job acknowledged with REPLICATE 3 always keeps a live
    # copy that requeues it (RETRY 2) before its last copy could die.
    rnd = random.Random(4)
    events = []
    t_start = time.monotonic()

    def event(text):
        events.append(f"{time.monotonic() - t_start:5.1f}s {text}")

    time.sleep(1.0)
    for _ in range(ROUNDS):
        victims = rnd.sample(range(FAULT_NODES), 2)
        for v in victims:
            consume_ok.clear()
            time.sleep(1.0)
            backlog = c[v].execute("QLEN", QUEUE)
            c.kill(v)
            event(f"kill {v} (queue length there {backlog})")
            time.sleep(0.3)
            consume_ok.set()
            time.sleep(1.0)
        for v in victims:
            c.restart(v)
            event(f"restart {v}")
        cut = rnd.choice(range(FAULT_NODES))
        c[cut].execute("DEBUG", "BUS", "DROP-ALL")
        event(f"cut {cut}")
        time.sleep(3.0)
        c[cut].execute("DEBUG", "BUS", "RESTORE")
        event(f"restore {cut}")
        time.sleep(1.0)
    stop_producing.set()
    for th in threads[:FAULT_NODES]:
        th.join(10)
    event("producers stopped")
    with lock:
        produced = dict(acked)

    # everything is back: requeues (RETRY 2) and federation deliver what is left
    c.wait_mesh(timeout=20)
    t_drain = time.monotonic()
    deadline = t_drain + DRAIN_SECONDS
    while time.monotonic() < deadline:
        with lock:
            missing = set(produced) - set(first_seen)
        if not missing:
            break
        time.sleep(0.25)
    drain = time.monotonic() - t_drain
    stop_consuming.set()
    for th in threads[FAULT_NODES:]:
        th.join(10)

    with lock:
        delivered = list(deliveries)
        seen = dict(first_seen)
    unique = set(delivered)
    lost = set(produced) - unique
    dup = len(delivered) - len(unique)
    ratio = dup / max(1, len(unique))
    late = sum(1 for jid, t in produced.items() if jid in seen and seen[jid] - t > 1.5)
    print(f"\nfault run ({time.monotonic() - t_start:.0f}s): {len(produced)} jobs acknowledged "
          f"to producers, {len(delivered)} deliveries of {len(unique)} distinct jobs; lost "
          f"{len(lost)}; duplicates {dup} (ratio {ratio:.4f}); {late} delivered > 1.5 s after "
          f"ADDJOB (requeued after a kill); drain {drain:.1f}s; NOREPL {errors['norepl']}, "
          f"connection errors: producers {errors['producer']}, consumers {errors['consumer']}")
    print("events: " + "; ".join(events))
    assert produced, "no job was acknowledged at all"
    if lost:
        where = {}
        for i in range(FAULT_NODES):
            with RawConn(c[i].port) as r:
                for jid in sorted(lost)[:5]:
                    s = show(r, jid)
                    if s is not None:
                        where.setdefault(jid, []).append((i, s[b"state"]))
        raise AssertionError(f"{len(lost)} acknowledged jobs never delivered, e.g. "
                             f"{sorted(lost)[:5]}; copies seen: {where}")
    assert late > 0, "no job needed a requeue: the kills did not hit any queued job"


def hello_priority(node, of_id):
    """The HELLO priority `node` gives the node `of_id` (None: not listed)."""
    with RawConn(node.port) as r:
        for entry in r.execute("HELLO")[2:]:
            if entry[0].decode() == of_id:
                return int(entry[3])
    return None


def test_a_node_that_stops_says_so_and_is_back_with_its_first_message(start_cluster):
    """SIGTERM or SHUTDOWN: the node tells every other node it stops (a PING whose header
    says STOPPING), so they take no copies there and their HELLO puts it last at once,
    not a node timeout later. Its next start clears that with its first message.
    The node timeout is 10 s here: only the goodbye can explain a change within 3 s."""
    c = start_cluster(3, extra_args=["--cluster-node-timeout", "10000"])
    gone = c.ids[2]
    assert hello_priority(c[0], gone) == 1
    c[2].stop()
    t0 = time.monotonic()
    wait_until(lambda: hello_priority(c[0], gone) == 100 and hello_priority(c[1], gone) == 100,
               timeout=3, message="the others still rank the stopped node as usable")
    assert time.monotonic() - t0 < 3
    with RawConn(c[0].port) as r:
        # two nodes left: a third copy cannot be had, and ADDJOB says so at once instead of
        # waiting for the stopped node's GOTJOB
        reply = r.execute("ADDJOB", "bye", b"x", 5000, "REPLICATE", 3)
        assert isinstance(reply, Err) and reply.startswith(b"NOREPL"), reply
        jid = addjob(r, "bye", b"y", 5000, "REPLICATE", 2)
        assert c.ids[2].encode() not in show(r, jid)[b"nodes-delivered"]
    c[2].start()
    wait_until(lambda: hello_priority(c[0], gone) == 1 and hello_priority(c[1], gone) == 1,
               timeout=10, message="the restarted node is still ranked as stopping")
    with RawConn(c[0].port) as r:
        jid = addjob(r, "bye", b"z", 5000, "REPLICATE", 3)
        assert c.ids[2].encode() in show(r, jid)[b"nodes-delivered"]
