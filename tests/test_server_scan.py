"""QSCAN / JSCAN (SPEC 3.11) against real servers: replies, options, errors, and the
guarantees under concurrent changes."""

import threading
import time

import pytest

from support.admin import NOT_INT, qstat, SYNTAX
from support.jobs import SHOW_FIELDS, addjob, queue_names, show
from support.resp_client import NULL_ARRAY, RawConn, Status, encode_command, parse_resp
from support.waits import wait_until

BAD_CURSOR = b"-ERR invalid cursor or option name\r\n"


def scan_all(r, *args, count=None, max_calls=100000, between=None):
    """Iterate QSCAN/JSCAN until cursor 0; return (results in order, number of calls).
    `between(calls)` runs after each call that did not end the scan."""
    cursor = b"0"
    out = []
    calls = 0
    while True:
        cmd = [args[0], cursor] + list(args[1:])
        if count is not None:
            cmd += ["COUNT", count]
        reply = r.execute(*cmd)
        assert isinstance(reply, list) and len(reply) == 2, reply
        cursor, items = reply
        assert type(cursor) is bytes and cursor.isdigit(), reply
        if count is not None and count > 0:
            assert len(items) <= count
        out += items
        calls += 1
        assert calls < max_calls
        if cursor == b"0":
            return out, calls
        if between is not None:
            between(calls)


# ---------------------------------------------------------------------------
# QSCAN / JSCAN: replies, options, errors
# ---------------------------------------------------------------------------


def test_scan_empty_node_exact_reply(server):
    r = server.raw()
    assert r.call("QSCAN") == b"*2\r\n$1\r\n0\r\n*0\r\n"
    assert r.call("JSCAN") == b"*2\r\n$1\r\n0\r\n*0\r\n"
    assert r.call("JSCAN", "0", "BUSYLOOP", "REPLY", "all") == b"*2\r\n$1\r\n0\r\n*0\r\n"


def test_qscan_returns_queue_names_as_bulk(server):
    r = server.raw()
    names = queue_names("qs", 12)
    for n in names:
        addjob(r, n)
    reply = r.call("QSCAN")
    assert reply.startswith(b"*2\r\n$1\r\n0\r\n*12\r\n")
    cursor, items = r.execute("QSCAN")
    assert cursor == b"0" and sorted(items) == sorted(n.encode() for n in names)
    assert all(type(i) is bytes for i in items)
    # queues created without jobs are queues too (GETJOB NOHANG, PAUSE)
    r.execute("GETJOB", "NOHANG", "FROM", "qs-empty")
    r.execute("PAUSE", "qs-paused", "in")
    assert set(r.execute("QSCAN", "BUSYLOOP")[1]) == {n.encode() for n in names} | {
        b"qs-empty", b"qs-paused"}


def test_qscan_filters(server):
    r = server.raw()
    for n, k in (("f0", 0), ("f1", 1), ("f3", 3), ("f5", 5)):
        r.execute("GETJOB", "NOHANG", "FROM", n)
        for _ in range(k):
            addjob(r, n)
    names = lambda *a: set(r.execute("QSCAN", *a)[1])
    assert names() == {b"f0", b"f1", b"f3", b"f5"}
    assert names("MINLEN", 1) == {b"f1", b"f3", b"f5"}
    assert names("MINLEN", 3) == {b"f3", b"f5"}
    assert names("MAXLEN", 1) == {b"f0", b"f1"}
    assert names("minlen", 1, "maxlen", 3) == {b"f1", b"f3"}
    assert names("MINLEN", -1, "MAXLEN", -1) == {b"f0", b"f1", b"f3", b"f5"}   # -1 = off
    assert names("MAXLEN", -2) == set()
    assert names("MINLEN", 6) == set()
    # without a cluster every import rate is 0
    assert names("IMPORTRATE", 0) == {b"f0", b"f1", b"f3", b"f5"}
    assert names("IMPORTRATE", -1) == {b"f0", b"f1", b"f3", b"f5"}
    assert names("IMPORTRATE", 1) == set()
    assert names("0", "COUNT", 100, "BUSYLOOP", "MINLEN", 5) == {b"f5"}


def test_jscan_filters_and_reply_types(server):
    r = server.raw()
    queued = {addjob(r, "jq", "b%d" % i) for i in range(4)}
    other = addjob(r, "jq-other", "zz")
    delayed = addjob(r, "jq", "later", 0, "DELAY", 100)
    active = r.execute("GETJOB", "FROM", "jq")[0][1]
    queued.discard(active)
    everything = queued | {other, delayed, active}

    raw = r.call("JSCAN")
    assert raw.startswith(b"*2\r\n$1\r\n0\r\n*6\r\n+D-")         # IDs are status replies
    cursor, items = r.execute("JSCAN")
    assert cursor == b"0" and all(type(i) is Status for i in items)
    assert set(items) == everything
    assert set(r.execute("JSCAN", "REPLY", "id")[1]) == everything
    assert set(r.execute("JSCAN", "QUEUE", "jq")[1]) == everything - {other}
    assert set(r.execute("JSCAN", "QUEUE", "jq-other")[1]) == {other}
    assert r.execute("JSCAN", "QUEUE", "nope")[1] == []
    assert set(r.execute("JSCAN", "STATE", "queued")[1]) == queued | {other}
    assert set(r.execute("JSCAN", "STATE", "active")[1]) == {active, delayed}
    assert set(r.execute("JSCAN", "STATE", "ACTIVE", "STATE", "queued")[1]) == everything
    assert set(r.execute("JSCAN", "QUEUE", "jq", "STATE", "queued")[1]) == queued
    assert r.execute("JSCAN", "STATE", "acked")[1] == []
    assert r.execute("JSCAN", "STATE", "wait-repl")[1] == []

    # REPLY all: every element is the SHOW array of the job
    cursor, items = r.execute("JSCAN", "0", "QUEUE", "jq", "STATE", "queued", "REPLY", "ALL")
    assert cursor == b"0" and len(items) == len(queued)
    for item in items:
        assert isinstance(item, list) and len(item) == 30
        assert item[0::2] == SHOW_FIELDS
        fields = dict(zip(item[0::2], item[1::2]))
        assert fields[b"id"] in queued and fields[b"state"] == b"queued"
        expect = show(r, fields[b"id"])
        for k in (b"id", b"queue", b"state", b"repl", b"ctime", b"retry", b"body",
                  b"nodes-delivered"):
            assert fields[k] == expect[k]


def test_jscan_reply_all_exact_bytes_match_show(server1):
    r = server1.raw()
    jid = addjob(r, "exact", "payload", 0, "RETRY", 0, "REPLICATE", 1, "TTL", 3600)
    raw = r.call("JSCAN", "REPLY", "all")
    show_raw = r.call("SHOW", jid)
    assert raw.startswith(b"*2\r\n$1\r\n0\r\n*1\r\n*30\r\n")
    item = parse_resp(raw)[0][1][0]
    expect = parse_resp(show_raw)[0]
    # same fields, same types; only the clock moved between the two commands
    for n, (a, b) in enumerate(zip(item, expect)):
        if n in (9, 27):           # ttl, next-awake-within
            assert type(a) is int and 0 <= a - b <= 1000, (n, a, b)
        else:
            assert a == b and type(a) is type(b), (n, a, b)


def test_scan_errors(server):
    r = server.raw()
    addjob(r, "err-q")
    for cmd in ("QSCAN", "JSCAN"):
        assert r.call(cmd, "abc") == BAD_CURSOR
        assert r.call(cmd, " 1") == BAD_CURSOR
        assert r.call(cmd, "1.5") == BAD_CURSOR
        assert r.call(cmd, "0x10") == BAD_CURSOR
        assert r.call(cmd, "18446744073709551616") == BAD_CURSOR   # > ULONG_MAX
        assert r.call(cmd, "+") == BAD_CURSOR
        assert r.call(cmd, "COUNT") == BAD_CURSOR         # option without value: a cursor
        assert r.call(cmd, "0", "COUNT") == SYNTAX         # ... and a second cursor
        assert r.call(cmd, "0", "1") == SYNTAX
        assert r.call(cmd, "0", "abc") == SYNTAX           # second cursor checked first
        assert r.call(cmd, "COUNT", "x") == NOT_INT
        assert r.call(cmd, "COUNT", "") != NOT_INT         # "" parses as 0 (strtoll)
        assert r.call(cmd, "COUNT", "99999999999999999999") == NOT_INT
        assert r.call(cmd, "COUNT", "1", "nope") == BAD_CURSOR
    assert r.call("QSCAN", "0", "COUNT", "10", "MINLEN", "1", "REPLY", "all") == SYNTAX
    assert r.call("QSCAN", "MINLEN", "x") == NOT_INT
    assert r.call("QSCAN", "MAXLEN", "1.0") == NOT_INT
    assert r.call("QSCAN", "IMPORTRATE", "-") == NOT_INT
    assert r.call("QSCAN", "QUEUE", "q") == BAD_CURSOR         # not a QSCAN option
    assert r.call("QSCAN", "REPLY") == BAD_CURSOR
    assert r.call("JSCAN", "MINLEN", "1") == BAD_CURSOR        # not a JSCAN option
    assert r.call("JSCAN", "STATE", "foo") == b"-ERR Invalid job state name\r\n"
    assert r.call("JSCAN", "STATE", "queued", "STATE", "") == b"-ERR Invalid job state name\r\n"
    assert r.call("JSCAN", "REPLY", "ids") == b"-ERR Invalid REPLY type, try ID or ALL\r\n"
    assert r.call("JSCAN", "REPLY", "") == b"-ERR Invalid REPLY type, try ID or ALL\r\n"
    # left to right: the first bad word decides
    assert r.call("JSCAN", "STATE", "foo", "REPLY", "bar") == b"-ERR Invalid job state name\r\n"
    assert r.call("JSCAN", "REPLY", "bar", "STATE", "foo") == \
        b"-ERR Invalid REPLY type, try ID or ALL\r\n"
    assert r.call("JSCAN", "x", "STATE", "foo") == BAD_CURSOR
    assert r.call("JSCAN", "0", "COUNT", "x", "1") == NOT_INT
    assert r.call("JSCAN", "0", "1", "COUNT", "x") == SYNTAX
    # the connection still works and nothing was consumed
    assert r.execute("QLEN", "err-q") == 1


def test_scan_cursor_forms(server):
    r = server.raw()
    addjob(r, "cf")
    for cur in ("", "0", "+0", "000"):
        assert r.execute("QSCAN", cur) == [b"0", [b"cf"]]
        assert len(r.execute("JSCAN", cur)[1]) == 1
    # any unsigned cursor is accepted; an unknown position ends the iteration sanely
    for cur in ("18446744073709551615", "-1", "987654321987"):
        for cmd in ("QSCAN", "JSCAN"):
            cursor, items = r.execute(cmd, cur, "BUSYLOOP")
            assert cursor == b"0" and isinstance(items, list)


def test_scan_small_count_iterates_everything(server):
    r = server.raw()
    pipe = []
    names = queue_names("it", 40)
    for i in range(120):
        pipe.append(encode_command("ADDJOB", names[i % 40], "b%d" % i, 0))
    r.send(b"".join(pipe))
    jids = {bytes(r.read_parsed()) for _ in range(120)}
    assert len(jids) == 120
    for count in (1, 3, 7, 100):
        got, calls = scan_all(r, "JSCAN", count=count)
        assert set(got) == jids and len(got) == 120        # no duplicates without changes
        if count < 120:
            assert calls >= 120 // count
        got, calls = scan_all(r, "QSCAN", count=count)
        assert set(got) == {n.encode() for n in names} and len(got) == 40
    # filters with a small COUNT: still everything
    got, _ = scan_all(r, "JSCAN", "QUEUE", names[5], count=1)
    assert len(got) == 3
    got, _ = scan_all(r, "QSCAN", "MINLEN", 3, count=2)
    assert len(got) == 40


def test_scan_count_zero_negative_and_busyloop(server):
    r = server.raw()
    jids = {addjob(r, "cz-%d" % (i % 5)) for i in range(30)}
    got, calls = scan_all(r, "JSCAN", count=0)           # one entry per call
    assert set(got) == jids and calls >= 30
    cursor, items = r.execute("JSCAN", "COUNT", -1)      # negative: to the end
    assert cursor == b"0" and set(items) == jids
    cursor, items = r.execute("JSCAN", "COUNT", 1, "BUSYLOOP")
    assert cursor == b"0" and set(items) == jids
    cursor, items = r.execute("QSCAN", "BUSYLOOP", "COUNT", 1)
    assert cursor == b"0" and len(items) == 5


def test_scan_count_bounds_work_per_call(server):
    """COUNT*10 entries are looked at per call: a selective filter returns few per call."""
    r = server.raw()
    pipe = [encode_command("ADDJOB", "bulk", "x", 0) for _ in range(300)]
    r.send(b"".join(pipe))
    for _ in range(300):
        r.read_reply()
    needle = addjob(r, "needle")
    cursor, items = r.execute("JSCAN", "QUEUE", "needle", "COUNT", 100)
    assert cursor == b"0" and items == [needle]   # only the owning worker is looked at
    cursor, items = r.execute("JSCAN", "STATE", "active", "COUNT", 2)
    assert items == [] and cursor != b"0"        # 20 entries looked at, none matched
    got, calls = scan_all(r, "JSCAN", "STATE", "queued", count=2)
    assert len(got) == 301 and calls >= 151


def test_scan_after_flushall_restarts_cleanly(server):
    r = server.raw()
    addjob(r, "fl")
    cursor, _ = r.execute("JSCAN", "COUNT", 0)
    server.flush()
    jid = addjob(r, "fl2")
    got, _ = scan_all(r, "JSCAN", count=1)
    assert got == [jid]
    assert r.execute("QSCAN", "BUSYLOOP")[1] == [b"fl2"]


def test_jscan_skips_deleted_and_acked(server):
    r = server.raw()
    keep = {addjob(r, "del-q", "k%d" % i) for i in range(10)}
    gone = {addjob(r, "del-q", "g%d" % i) for i in range(10)}
    assert r.execute("DELJOB", *gone) == 10
    assert set(r.execute("JSCAN", "BUSYLOOP")[1]) == keep
    some = sorted(keep)[:3]
    assert r.execute("ACKJOB", *some) == 3     # lone node: acked jobs are deleted at once
    assert set(r.execute("JSCAN", "BUSYLOOP")[1]) == keep - set(some)


# ---------------------------------------------------------------------------
# QSCAN / JSCAN guarantees under concurrent changes (3 workers)
# ---------------------------------------------------------------------------


def _churn_jobs(port, stop, stats):
    r = RawConn(port)
    try:
        i = 0
        while not stop.is_set():
            batch = [encode_command("ADDJOB", "churn-%d" % (i % 37), "c", 0) for _ in range(50)]
            r.send(b"".join(batch))
            ids = [bytes(r.read_parsed()) for _ in batch]
            # delete most of them, keep a few for a while
            assert r.execute("DELJOB", *ids[:45]) == 45
            stats["added"] += 50
            stats["keep"].extend(ids[45:])
            if len(stats["keep"]) > 400:
                old, stats["keep"] = stats["keep"][:200], stats["keep"][200:]
                r.execute("ACKJOB", *old)
            r.execute("GETJOB", "NOHANG", "FROM", "churnq-%d" % i)    # new queues
            i += 1
    finally:
        r.close()


@pytest.mark.parametrize("count", [1, 5])
def test_jscan_qscan_under_concurrent_adds_and_removes(server3, count):
    r = server3.raw()
    stable_q = queue_names("stable", 60)
    pipe = [encode_command("ADDJOB", stable_q[i % 60], "s", 0) for i in range(300)]
    r.send(b"".join(pipe))
    stable_jobs = {bytes(r.read_parsed()) for _ in pipe}
    stop = threading.Event()
    stats = {"added": 0, "keep": []}
    t = threading.Thread(target=_churn_jobs, args=(server3.port, stop, stats), daemon=True)
    t.start()
    try:
        wait_until(lambda: stats["added"] >= 500, timeout=10)
        added_before = stats["added"]

        def churn_a_batch(calls):
            # a loaded machine can starve the churn thread for a whole scan:
            # make sure jobs come and go in the middle of each scan
            if calls == 2:
                mark = stats["added"]
                wait_until(lambda: stats["added"] > mark, timeout=10)

        seen_jobs, jcalls = scan_all(r, "JSCAN", count=count, between=churn_a_batch)
        seen_queues, qcalls = scan_all(r, "QSCAN", count=count, between=churn_a_batch)
        added_during = stats["added"] - added_before
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert stable_jobs <= set(seen_jobs), len(stable_jobs - set(seen_jobs))
    assert {q.encode() for q in stable_q} <= set(seen_queues)
    assert added_during > 0         # the scan really ran while jobs came and went
    assert jcalls > 300 // count


def test_qscan_while_queues_are_evicted(start_server):
    """Queues created and evicted (idle 2 s at memory level 2) during the scan; paused
    queues are never evicted and must all be returned."""
    srv = start_server(workers=3, extra_args=("--maxmemory", "1"))
    r = srv.raw()
    stable = queue_names("pinned", 50)
    for q in stable:
        assert r.call("PAUSE", q, "in") == b"+in\r\n"
    stop = threading.Event()
    created = [0]

    def churn():
        c = RawConn(srv.port)
        try:
            while not stop.is_set():
                c.execute("GETJOB", "NOHANG", "FROM", "tmpq-%d" % created[0])
                created[0] += 1
        finally:
            c.close()

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        wait_until(lambda: r.execute("QSTAT", "tmpq-0") is NULL_ARRAY, timeout=8,
                   message="idle queues are not evicted at memory level 2")
        seen = []
        cursor = b"0"
        deadline = time.monotonic() + 3.0
        while True:                      # slow scan: evictions happen in the middle
            cursor, items = r.execute("QSCAN", cursor, "COUNT", 3)
            seen += items
            if cursor == b"0":
                break
            if time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        stop.set()
        t.join(10)
    assert {q.encode() for q in stable} <= set(seen)
    for q in stable:
        assert qstat(r, q)[b"pause"] == b"in"


