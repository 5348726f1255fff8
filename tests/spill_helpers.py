"""Filling nodes far past maxmemory and draining them with checksums (tests/test_spill.py)."""
import glob
import os
import struct
import threading
import time
import zlib

import redis

BODY_SIZE = 1024
PIPELINE = 1000


def body_of(i, salt):
    """A 1 KB body that names its job number: a wrong or torn body fails its checksum."""
    head = struct.pack("<Q", i)
    return head + (salt * (BODY_SIZE // len(salt) + 1))[:BODY_SIZE - len(head)]


def memory(conn):
    return conn.info("memory")


def fill(clients, n, queues, *opts, salt=b"spill-test-", sample_every=50_000, maxmemory=None):
    """ADDJOB n jobs round-robin over `clients` and `queues`: (ids, crc of the bodies,
    largest used_memory sampled). Any error reply fails."""
    ids = []
    crc = 0
    peak = 0
    pipes = [c.pipeline(transaction=False) for c in clients]
    pending = 0
    for i in range(n):
        b = body_of(i, salt)
        crc ^= zlib.crc32(b)
        pipes[i % len(pipes)].execute_command("ADDJOB", queues[i % len(queues)], b, 0, *opts)
        pending += 1
        if pending == PIPELINE or i == n - 1:
            for p in pipes:
                for reply in p.execute():
                    assert not isinstance(reply, Exception), reply
                    ids.append(reply)
            pending = 0
        if maxmemory and i % sample_every == sample_every - 1:
            for c in clients:
                used = int(memory(c)["used_memory"])
                peak = max(peak, used)
                assert used < maxmemory, (i, used)
    return ids, crc, peak


def fill_concurrently(nodes, n, queues, *opts, per_node=4, salt=b"spill-test-"):
    """fill() from `per_node` connections to each node at once, each adding to one queue:
    a connection waits for each replicated ADDJOB's copies in turn, so one would be
    latency-bound."""
    slices = [list(range(k, n, len(nodes) * per_node)) for k in range(len(nodes) * per_node)]
    results = [None] * len(slices)

    def run(k):
        c = client(nodes[k % len(nodes)])
        pipe = c.pipeline(transaction=False)
        ids, crc = [], 0
        for start in range(0, len(slices[k]), 200):
            for i in slices[k][start:start + 200]:
                b = body_of(i, salt)
                crc ^= zlib.crc32(b)
                pipe.execute_command("ADDJOB", queues[k % len(queues)], b, 0, *opts)
            for reply in pipe.execute(raise_on_error=False):
                assert not isinstance(reply, Exception), reply
                ids.append(reply)
        results[k] = (ids, crc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(slices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in results), "a producer failed"
    ids = [jid for r in results for jid in r[0]]
    crc = 0
    for r in results:
        crc ^= r[1]
    return ids, crc


def drain(clients, n, queues, timeout=600):
    """GETJOB + ACKJOB until n jobs came back: (crc of the bodies, set of IDs). A job
    delivered twice fails."""
    crc = 0
    seen = set()
    deadline = time.monotonic() + timeout
    while len(seen) < n:
        assert time.monotonic() < deadline, "drained %d of %d" % (len(seen), n)
        got = 0
        for c in clients:
            jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 500, "FROM", *queues)
            if not jobs:
                continue
            ids = []
            for _q, jid, body in jobs:
                assert jid not in seen, "delivered twice: %r" % jid
                seen.add(jid)
                crc ^= zlib.crc32(body)
                ids.append(jid)
            c.execute_command("ACKJOB", *ids)
            got += len(jobs)
        if not got:
            time.sleep(0.01)
    return crc, seen


def spill_files(workdir):
    """(files, files that are not empty) of the spill log in `workdir`."""
    paths = glob.glob(os.path.join(str(workdir), "spill-*.spill"))
    return paths, [p for p in paths if os.path.getsize(p) > 0]


def client(srv):
    return redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=60)
