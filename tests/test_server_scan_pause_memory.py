"""PAUSE (SPEC 3.12), QSCAN / JSCAN (SPEC 3.11), queue eviction (SPEC 8.2) and memory limits
(SPEC 9), against real servers: 1 worker, 3 workers, 3 workers over ZeroMQ."""

import threading
import time

import pytest


import conftest as _c  # pytest registers tests/conftest.py under this name
Status, Err, NULL_ARRAY = _c.Status, _c.Err, _c.NULL_ARRAY
show, addjob, wait_until, parse_info = _c.show, _c.addjob, _c.wait_until, _c.parse_info

SYNTAX = b"-ERR syntax error\r\n"
NOT_INT = b"-ERR value is not an integer or out of range\r\n"
BAD_CURSOR = b"-ERR invalid cursor or option name\r\n"
PAUSED = b"-PAUSED Queue paused in input, try later\r\n"
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


def qstat(r, q):
    reply = r.execute("QSTAT", q)
    if reply is NULL_ARRAY:
        return None
    return dict(zip(reply[0::2], reply[1::2]))


def scan_all(r, *args, count=None, max_calls=100000):
    """Iterate QSCAN/JSCAN until cursor 0; return (results in order, number of calls)."""
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


# ---------------------------------------------------------------------------
# PAUSE
# ---------------------------------------------------------------------------


def test_pause_forms_and_replies(server):
    r = server.raw()
    addjob(r, "pq")
    assert r.call("PAUSE", "pq", "in") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "state") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "out") == b"+out\r\n"          # flags accumulate from none
    assert r.call("PAUSE", "pq", "in", "out") == b"+all\r\n"
    assert r.call("PAUSE", "pq", "none") == b"+none\r\n"
    assert r.call("PAUSE", "pq", "all") == b"+all\r\n"
    assert r.call("PAUSE", "pq", "all", "none") == b"+none\r\n"   # none resets what came before
    assert r.call("PAUSE", "pq", "none", "in") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "OUT", "State") == b"+out\r\n"   # case-insensitive
    assert r.call("PAUSE", "pq", "bcast") == b"+out\r\n"          # accepted, state unchanged
    assert r.call("PAUSE", "pq", "in", "BCAST") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "state", "state") == b"+in\r\n"
    assert r.call("PAUSE", "pq", "in", "out", "none", "out", "in") == b"+all\r\n"
    assert qstat(r, "pq")[b"pause"] == b"all"
    assert r.call("PAUSE", "pq", "none") == b"+none\r\n"
    assert qstat(r, "pq")[b"pause"] == b"none"


def test_pause_errors_apply_nothing(server):
    r = server.raw()
    addjob(r, "pe")
    assert r.call("PAUSE", "pe", "in") == b"+in\r\n"
    assert r.call("PAUSE", "pe", "none", "bogus") == SYNTAX
    assert r.call("PAUSE", "pe", "out", "") == SYNTAX
    assert r.call("PAUSE", "pe", "inn") == SYNTAX
    assert r.call("PAUSE", "pe", "state") == b"+in\r\n"
    assert r.call("PAUSE", "pe") == b"-ERR wrong number of arguments for 'pause' command\r\n"
    assert r.call("PAUSE") == b"-ERR wrong number of arguments for 'pause' command\r\n"
    assert r.call("PAUSE", "missing-q", "bogus", "in") == SYNTAX
    assert qstat(r, "missing-q") is None


def test_pause_missing_queue(server):
    r = server.raw()
    assert r.call("PAUSE", "nq1", "state") == b"+none\r\n"
    assert r.call("PAUSE", "nq1", "bcast") == b"+none\r\n"
    assert r.call("PAUSE", "nq1", "none") == b"+none\r\n"
    assert r.call("PAUSE", "nq1", "in", "none") == b"+none\r\n"
    assert qstat(r, "nq1") is None                      # none: the queue is not created
    assert r.call("PAUSE", "nq2", "out") == b"+out\r\n"
    st = qstat(r, "nq2")                                # created by PAUSE
    assert st[b"pause"] == b"out" and st[b"len"] == 0
    assert r.execute("QLEN", "nq2") == 0


def test_pause_in_refuses_addjob(server):
    r = server.raw()
    addjob(r, "pin", "one")
    assert r.call("PAUSE", "pin", "in") == b"+in\r\n"
    assert r.call("ADDJOB", "pin", "two", 0) == PAUSED
    assert r.call("ADDJOB", "pin", "two", 0, "MAXLEN", 10) == PAUSED
    assert r.execute("QLEN", "pin") == 1
    # paused in: consumers are still served
    got = r.execute("GETJOB", "NOHANG", "FROM", "pin")
    assert got[0][2] == b"one"
    assert r.call("PAUSE", "pin", "out") == b"+out\r\n"   # input open again
    addjob(r, "pin", "three")
    assert r.execute("QLEN", "pin") == 1
    # a queue paused in before it exists refuses the first ADDJOB too
    assert r.call("PAUSE", "pin-new", "all") == b"+all\r\n"
    assert r.call("ADDJOB", "pin-new", "x", 0) == PAUSED
    assert r.call("PAUSE", "pin-new", "none") == b"+none\r\n"
    addjob(r, "pin-new", "x")


def test_pause_out_hides_jobs_from_getjob(server):
    r = server.raw()
    jid = addjob(r, "pout")
    assert r.call("PAUSE", "pout", "out") == b"+out\r\n"
    assert r.call("GETJOB", "NOHANG", "FROM", "pout") == b"*-1\r\n"
    assert r.call("GETJOB", "TIMEOUT", 100, "FROM", "pout") == b"*-1\r\n"
    assert r.execute("QLEN", "pout") == 1
    assert r.execute("QPEEK", "pout", 1)[0][1] == jid
    assert r.call("PAUSE", "pout", "none") == b"+none\r\n"
    got = r.execute("GETJOB", "NOHANG", "FROM", "pout")
    assert got[0][1] == jid


def test_blocked_getjob_wakes_when_out_pause_cleared(server):
    r = server.raw()
    consumer = server.raw()
    jid = addjob(r, "pwake", "body")
    assert r.call("PAUSE", "pwake", "out") == b"+out\r\n"
    consumer.send(_c.encode_command("GETJOB", "TIMEOUT", 10000, "FROM", "pwake"))
    wait_until(lambda: qstat(r, "pwake")[b"blocked"] == 1)
    assert not consumer.has_data(0.3)
    # a new job while paused out does not wake it either
    jid2 = addjob(r, "pwake", "body2")
    assert not consumer.has_data(0.3)
    assert r.call("PAUSE", "pwake", "in") == b"+in\r\n"       # out cleared: wakes
    reply = consumer.read_parsed(5)
    assert len(reply) == 1 and reply[0][0] == b"pwake" and reply[0][1] == jid
    assert r.execute("QLEN", "pwake") == 1
    assert r.execute("GETJOB", "NOHANG", "FROM", "pwake")[0][1] == jid2
    # pausing "in" only never blocked consumers
    assert qstat(r, "pwake")[b"blocked"] == 0


def test_blocked_multi_queue_getjob_wakes_when_out_pause_cleared(server):
    """Queues on different workers (w3): the proxy waiter is woken too."""
    r = server.raw()
    consumer = server.raw()
    names = _c.queue_names("pmulti", 6)
    jid = addjob(r, names[0])
    assert r.call("PAUSE", names[0], "out") == b"+out\r\n"
    consumer.send(_c.encode_command("GETJOB", "TIMEOUT", 10000, "FROM", *names))
    wait_until(lambda: qstat(r, names[0])[b"blocked"] == 1)
    assert not consumer.has_data(0.3)
    assert r.call("PAUSE", names[0], "none") == b"+none\r\n"
    reply = consumer.read_parsed(5)
    assert [j[1] for j in reply] == [jid]


def test_paused_in_postpones_requeue(server):
    r = server.raw()
    addjob(r, "preq", "b", 0, "RETRY", 1)
    jid = r.execute("GETJOB", "FROM", "preq")[0][1]
    assert r.call("PAUSE", "preq", "in") == b"+in\r\n"
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:              # RETRY 1 s passes twice: no requeue
        assert r.execute("QLEN", "preq") == 0
        time.sleep(0.1)
    assert show(r, jid)[b"state"] == b"active"
    assert r.call("PAUSE", "preq", "none") == b"+none\r\n"
    wait_until(lambda: r.execute("QLEN", "preq") == 1, timeout=4)
    assert show(r, jid)[b"state"] == b"queued"


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
    names = _c.queue_names("qs", 12)
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
        assert item[0::2] == _c.SHOW_FIELDS
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
    item = _c.parse_resp(raw)[0][1][0]
    expect = _c.parse_resp(show_raw)[0]
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
    names = _c.queue_names("it", 40)
    for i in range(120):
        pipe.append(_c.encode_command("ADDJOB", names[i % 40], "b%d" % i, 0))
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
    pipe = [_c.encode_command("ADDJOB", "bulk", "x", 0) for _ in range(300)]
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
    r = _c.RawConn(port)
    try:
        i = 0
        while not stop.is_set():
            batch = [_c.encode_command("ADDJOB", "churn-%d" % (i % 37), "c", 0) for _ in range(50)]
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
    stable_q = _c.queue_names("stable", 60)
    pipe = [_c.encode_command("ADDJOB", stable_q[i % 60], "s", 0) for i in range(300)]
    r.send(b"".join(pipe))
    stable_jobs = {bytes(r.read_parsed()) for _ in pipe}
    stop = threading.Event()
    stats = {"added": 0, "keep": []}
    t = threading.Thread(target=_churn_jobs, args=(server3.port, stop, stats), daemon=True)
    t.start()
    try:
        wait_until(lambda: stats["added"] >= 500, timeout=10)
        added_before = stats["added"]
        seen_jobs, jcalls = scan_all(r, "JSCAN", count=count)
        seen_queues, qcalls = scan_all(r, "QSCAN", count=count)
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
    stable = _c.queue_names("pinned", 50)
    for q in stable:
        assert r.call("PAUSE", q, "in") == b"+in\r\n"
    stop = threading.Event()
    created = [0]

    def churn():
        c = _c.RawConn(srv.port)
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


# ---------------------------------------------------------------------------
# Queue eviction (SPEC 8.2) and memory limits (SPEC 9)
# ---------------------------------------------------------------------------


def _wait_oom(r, queue="oom-probe"):
    def probe():
        reply = r.call("ADDJOB", queue, "x", 0)
        if reply.startswith(b"+"):
            r.execute("DELJOB", reply[1:-2].decode())
            return False
        assert reply == OOM, reply
        return True
    wait_until(probe, timeout=5, message="memory level 2 never reached")


def test_maxmemory_1_refuses_m_commands_only(start_server):
    srv = start_server(workers=3)
    r = srv.raw()
    jids = [addjob(r, "mq-%d" % i, "body%d" % i) for i in range(6)]
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    _wait_oom(r)
    assert r.call("ADDJOB", "mq-0", "x", 0) == OOM
    assert r.call("ADDJOB", "mq-0", "x", 0, "BOGUS") == OOM      # the OOM check comes first
    # GETJOB / SHOW / QLEN / ACKJOB / DEQUEUE / WORKING still work
    got = r.execute("GETJOB", "COUNT", 2, "FROM", "mq-0", "mq-1")
    assert len(got) == 2
    a, b = got[0][1], got[1][1]
    assert show(r, a)[b"state"] == b"active"
    assert r.call("NACK", a) == OOM
    assert r.call("ENQUEUE", a) == OOM
    assert r.call("ENQUEUE", a, b) == OOM
    assert r.call("ENQUEUE") == OOM
    assert show(r, a)[b"state"] == b"active"                     # nothing was applied
    assert r.execute("WORKING", a) > 0
    assert r.execute("DEQUEUE", jids[3]) == 1
    assert r.execute("ACKJOB", a, b) == 2
    assert r.execute("QLEN", "mq-2") == 1
    assert r.call("PAUSE", "mq-2", "none") == b"+none\r\n"
    assert r.execute("QSCAN", "BUSYLOOP")[0] == b"0"
    assert len(r.execute("JSCAN", "BUSYLOOP")[1]) == 4
    # INFO and CONFIG keep working
    info = parse_info(r.execute("INFO"))
    assert int(info["used_memory"]) > 1
    assert r.execute("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"1"]
    assert r.execute("CONFIG", "GET", "maxmemory-policy") == [b"maxmemory-policy", b"acks"]
    assert r.call("PING") == b"+PONG\r\n"
    # back to a sane limit: accepted again
    assert r.call("CONFIG", "SET", "maxmemory", "1gb") == b"+OK\r\n"
    wait_until(lambda: r.call("ADDJOB", "mq-0", "y", 0).startswith(b"+D-"), timeout=5)
    assert r.call("NACK", jids[3]) == b":1\r\n"


def test_maxmemory_1_from_the_command_line(start_server):
    srv = start_server(workers=1, extra_args=("--maxmemory", "1"))
    r = srv.raw()
    _wait_oom(r)
    assert r.execute("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"1"]
    assert "used_memory" in parse_info(r.execute("INFO", "memory"))
    assert r.call("GETJOB", "NOHANG", "FROM", "x") == b"*-1\r\n"


def test_oom_evicts_delivered_at_most_once_jobs(start_server):
    srv = start_server(workers=1)
    r = srv.raw()
    once = [addjob(r, "amo", "b", 0, "RETRY", 0, "REPLICATE", 1) for _ in range(20)]
    kept = [addjob(r, "alo", "b") for _ in range(5)]
    delivered = [j[1] for j in r.execute("GETJOB", "COUNT", 10, "FROM", "amo")]
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    _wait_oom(r)
    # each refused attempt samples random jobs and deletes the delivered at-most-once ones
    # (and nothing else) until > 10 samples in a row were not evictable: a few attempts
    # get them all
    def all_evicted():
        assert r.call("ADDJOB", "amo", "x", 0) == OOM
        return all(show(r, jid) is None for jid in delivered)
    wait_until(all_evicted, timeout=5)
    assert r.execute("QLEN", "amo") == 10 and r.execute("QLEN", "alo") == 5
    for jid in kept + sorted(set(once) - set(delivered)):
        assert show(r, jid)[b"state"] == b"queued"


def test_noeviction_policy_fails_without_evicting(start_server):
    srv = start_server(workers=1, extra_args=("--maxmemory-policy", "noeviction"))
    r = srv.raw()
    addjob(r, "ne", "b", 0, "RETRY", 0, "REPLICATE", 1)
    jid = r.execute("GETJOB", "FROM", "ne")[0][1]
    assert r.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    _wait_oom(r)
    assert show(r, jid)[b"state"] == b"active"          # not evicted
    assert r.call("CONFIG", "SET", "maxmemory-policy", "acks") == b"+OK\r\n"
    # with `acks` the next attempt evicts it (and still fails: 1 byte is never enough)
    wait_until(lambda: r.call("ADDJOB", "ne", "x", 0) == OOM and show(r, jid) is None,
               timeout=5)


def _set_room(r, room):
    """maxmemory such that 95% of it is `room` bytes above the current use."""
    used = int(parse_info(r.execute("INFO", "memory"))["used_memory"])
    maxmemory = (used + room) * 100 // 95 + 100
    assert r.call("CONFIG", "SET", "maxmemory", str(maxmemory)) == b"+OK\r\n"
    time.sleep(0.3)        # two memory polls


def _fill_until_oom(r, queue, body, *opts, limit=2000):
    ids = []
    for _ in range(limit):
        reply = r.call("ADDJOB", queue, body, 0, *opts)
        if reply == OOM:
            return ids
        assert reply.startswith(b"+D-"), reply
        ids.append(reply[1:-2])
    raise AssertionError("never reached the memory limit")


@pytest.mark.parametrize("workers", [1, 3])
def test_acking_jobs_makes_room_again(start_server, workers):
    srv = start_server(workers=workers)
    r = srv.raw()
    _set_room(r, 12 * 1024 * 1024)
    body = b"x" * 65536
    ids = _fill_until_oom(r, "room", body)
    assert 40 <= len(ids) <= 400, len(ids)    # ~12 MB of 64 KB jobs (level 1: still accepted)
    assert r.call("ADDJOB", "room", body, 0) == OOM
    # consumers still work at the limit
    got = r.execute("GETJOB", "COUNT", 1, "FROM", "room")
    assert r.call("NACK", got[0][1]) == OOM
    assert r.call("ENQUEUE", got[0][1]) == OOM
    jobs = r.execute("GETJOB", "NOHANG", "COUNT", 10000, "FROM", "room")
    acked = [j[1] for j in jobs] + [got[0][1]]
    assert r.execute("ACKJOB", *acked) == len(ids)
    # deleted jobs are room at once, even though the RSS does not shrink
    wait_until(lambda: r.call("ADDJOB", "room", body, 0).startswith(b"+D-"), timeout=5)
    more = _fill_until_oom(r, "room", body)
    assert len(more) >= len(ids) // 2


def test_oom_eviction_of_delivered_jobs_makes_room(start_server):
    srv = start_server(workers=1)
    r = srv.raw()
    _set_room(r, 8 * 1024 * 1024)
    body = b"y" * 65536
    ids = _fill_until_oom(r, "amo-room", body, "RETRY", 0, "REPLICATE", 1)
    assert len(ids) >= 20
    # deliver them all: at-most-once jobs that were delivered can be evicted
    jobs = r.execute("GETJOB", "NOHANG", "COUNT", 10000, "FROM", "amo-room")
    assert len(jobs) == len(ids)
    # the 8 MB GETJOB reply itself was memory in use until written: let a poll see it gone
    time.sleep(0.3)
    # new jobs take the place of evicted ones. Sampling gives up after 11 non-evictable
    # jobs in a row, which gets likely as new (queued) jobs replace delivered ones
    more = _fill_until_oom(r, "amo-room", body, "RETRY", 0, "REPLICATE", 1)
    assert len(more) >= min(10, len(ids) // 2), (len(more), len(ids))
    evicted = sum(1 for jid in ids if show(r, jid) is None)
    assert evicted >= len(more) // 2


def test_queue_eviction_follows_memory_level(start_server):
    srv = start_server(workers=3, extra_args=("--maxmemory", "1"))
    r = srv.raw()
    waiter = srv.raw()
    r.execute("GETJOB", "NOHANG", "FROM", "idle-q")            # created, empty
    assert r.call("PAUSE", "paused-in", "in") == b"+in\r\n"
    assert r.call("PAUSE", "paused-out", "out") == b"+out\r\n"
    waiter.send(_c.encode_command("GETJOB", "TIMEOUT", 20000, "FROM", "blocked-q"))
    wait_until(lambda: qstat(r, "blocked-q") is not None)
    # level 2: empty queues idle for 2 s go (instead of 300 s)
    wait_until(lambda: qstat(r, "idle-q") is None, timeout=8)
    time.sleep(1.0)
    assert qstat(r, "paused-in")[b"pause"] == b"in"
    assert qstat(r, "paused-out")[b"pause"] == b"out"
    assert qstat(r, "blocked-q")[b"blocked"] == 1
    assert r.call("PAUSE", "paused-in", "none") == b"+none\r\n"
    wait_until(lambda: qstat(r, "paused-in") is None, timeout=8)
    assert qstat(r, "paused-out") is not None


def test_queues_not_evicted_below_the_limit(server):
    r = server.raw()
    r.execute("GETJOB", "NOHANG", "FROM", "stays")
    time.sleep(3.0)
    assert qstat(r, "stays") is not None


# ---------------------------------------------------------------------------
# The worker's scan log, in-process: the guarantee under random changes
# ---------------------------------------------------------------------------


def _shard():
    from disque.workers.shard import Shard
    return Shard(0, 1, b"0123456789abcdef0123456789abcdef01234567")


def _worker_scan(shard, kind, steps, opts, on_step=None):
    """Iterate one worker's share the way the front-end does; `on_step` runs between calls.
    As the front-end does, the scan stops at the elements added after it began (bound)."""
    low, out = 0, []
    bits = 50
    bound = (shard.job_log if kind == "j" else shard.queue_log).next_seq
    while True:
        nxt, used, found, data = shard.scan(kind, low, bits, bound, -1, steps, opts)
        assert used <= steps
        out.append(data)
        if nxt < 0:
            return b"".join(out)
        low = nxt & ((1 << bits) - 1)
        assert low
        if on_step:
            on_step()


@pytest.mark.parametrize("seed", range(8))
def test_scan_log_returns_every_stable_element_under_random_changes(seed):
    import random
    rng = random.Random(seed)
    shard = _shard()
    add = lambda q: shard.cmd_addjob([b"ADDJOB", q, b"b", b"0"])[1:-2]
    stable = {add(b"q%d" % rng.randrange(50)) for _ in range(300)}
    churn = [add(b"c%d" % rng.randrange(50)) for _ in range(300)]

    def mutate():
        for _ in range(rng.randrange(0, 200)):
            if churn and rng.random() < 0.5:
                jid = churn.pop(rng.randrange(len(churn)))
                shard.delete_job(shard.jobs[jid])
            else:
                churn.append(add(b"c%d" % rng.randrange(80)))
        # queues come and go too
        for q in list(shard.queues.values()):
            if q.name.startswith(b"c") and not len(q.jobs) and rng.random() < 0.3:
                shard.remove_queue(q)

    data = _worker_scan(shard, "j", rng.choice((1, 3, 10, 100)), [None, 0, False], mutate)
    seen = set(data.split(b"\r\n"))
    assert {b"+" + j for j in stable} <= seen
    assert shard.job_log.n_dead <= len(shard.job_log.items)
    data = _worker_scan(shard, "q", rng.choice((1, 3, 10)), [-1, -1, -1], mutate)
    names = set(data.split(b"\r\n"))
    assert {b"q%d" % i for i in range(50) if b"q%d" % i in shard.queues} <= names


def test_scan_log_compaction_keeps_cursors_valid():
    shard = _shard()
    ids = [shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])[1:-2] for _ in range(5000)]
    # a cursor in the middle of the log
    nxt, used, found, _ = shard.scan("j", 0, 50, -1, -1, 2500, [None, 0, False])
    assert found == 2500 and nxt > 0
    # delete most jobs on both sides of it: the log compacts (positions move)
    before = len(shard.job_log.items)
    for jid in ids[:2400] + ids[2600:4900]:
        shard.delete_job(shard.jobs[jid])
    assert len(shard.job_log.items) < before
    data = _worker_scan_from(shard, nxt)
    got = [x[1:] for x in data.split(b"\r\n") if x]
    assert got == ids[2500:2600] + ids[4900:]
    assert shard.data_bytes > 0
    shard.flushall()
    assert shard.data_bytes == 0 and len(shard.job_log.items) == 0


def _worker_scan_from(shard, seq):
    out = []
    low = seq
    while True:
        nxt, _, _, data = shard.scan("j", low, 50, -1, -1, 7, [None, 0, False])
        out.append(data)
        if nxt < 0:
            return b"".join(out)
        low = nxt


def test_scan_bound_stops_at_elements_added_later():
    shard = _shard()
    first = [shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])[1:-2] for _ in range(10)]
    bound = shard.job_log.next_seq
    for _ in range(10):
        shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"])
    nxt, used, found, data = shard.scan("j", 0, 50, bound, -1, -1, [None, 0, False])
    assert nxt == -1 and found == 10 and used == 10
    assert [x[1:] for x in data.split(b"\r\n") if x] == first


def test_memory_accounting_follows_jobs_and_queues():
    shard = _shard()
    assert shard.data_bytes == 0
    jid = shard.cmd_addjob([b"ADDJOB", b"queue", b"x" * 1000, b"0"])[1:-2]
    per_job_and_queue = shard.data_bytes
    assert per_job_and_queue > 1000
    shard.delete_job(shard.jobs[jid])
    assert 0 < shard.data_bytes < per_job_and_queue          # the queue remains
    shard.remove_queue(shard.queues[b"queue"])
    assert shard.data_bytes == 0
    # OOM check: level 2 with 100 bytes too many and nothing evictable
    shard.cmd_addjob([b"ADDJOB", b"q", b"y" * 100, b"0"])
    shard.memory_report()
    shard.set_memory(2, 100, False)
    assert shard.execute(1, [b"ADDJOB", b"q", b"z", b"0"]).startswith(b"-OOM ")
    assert shard.execute(1, [b"QLEN", b"q"]) == b":1\r\n"
    # a delivered at-most-once job is evictable: the command then runs
    shard.cmd_addjob([b"ADDJOB", b"q0", b"y" * 100, b"0", b"RETRY", b"0", b"REPLICATE", b"1"])
    shard.fetch(shard.queues[b"q0"])
    shard.memory_report()
    shard.set_memory(2, 100, False)
    assert shard.execute(1, [b"ADDJOB", b"q", b"z", b"0"]).startswith(b"+D-")
    assert shard.execute(1, [b"QLEN", b"q0"]) == b":0\r\n" and len(shard.jobs) == 2
    shard.memory_report()
    shard.set_memory(2, 100, True)                           # noeviction
    assert shard.execute(1, [b"NACK", b"D-00000000-000000000000000000000000-0000"]) \
        .startswith(b"-OOM ")
    shard.set_memory(1, -10 ** 9, True)
    assert shard.execute(1, [b"ADDJOB", b"q", b"z", b"0"]).startswith(b"+D-")   # level 1: fine


def test_jscan_never_returns_dummy_acks():
    shard = _shard()
    shard.cluster_size = 2          # dummy ACKs exist only in a cluster (SPEC 3.3)
    jid = shard.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"1"])[1:-2]
    unknown = b"D-01234567-AAAAAAAAAAAAAAAAAAAAAAAA-0001"
    assert shard.execute(1, [b"ACKJOB", unknown]) == b":0\r\n"
    assert shard.jobs[unknown].body is None                  # the dummy ACK
    for states in (0, 1 << 3):
        _, _, found, data = shard.scan("j", 0, 50, -1, -1, -1, [None, states, False])
        assert unknown not in data
    _, _, found, data = shard.scan("j", 0, 50, -1, -1, -1, [None, 0, True])
    assert found == 1 and jid in data and unknown not in data
