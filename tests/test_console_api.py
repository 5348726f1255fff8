"""The operations console's JSON and its safety rules (docs/console.md), over real HTTP to
real nodes: every refused action (cross-origin, no token, GET, wrong password, actions
off, no requirepass, not JSON) changes nothing, and every action is logged."""
import base64
import http.client
import json
import time
from urllib.parse import quote

import pytest

from support.waits import wait_until
from metrics_helpers import metrics_node  # noqa: F401

pytestmark = pytest.mark.cluster
PW = "s3cret"


def request(port, method, path, password=PW, body=None, headers=None):
    """(status, headers, body) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = dict(headers or {})
    if password is not None:
        h["Authorization"] = "Basic " + base64.b64encode(b"ops:" + password.encode()).decode()
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def session(port, password=PW):
    status, headers, body = request(port, "GET", "/api/console/session", password)
    assert status == 200, body
    cookie = headers["set-cookie"].split(";")[0]
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
    return cookie, json.loads(body)


def act(port, payload, cookie=None, token=None, password=PW, origin="same", ctype="application/json",
        method="POST"):
    h = {"Content-Type": ctype}
    if origin == "same":
        h["Sec-Fetch-Site"] = "same-origin"
    elif origin:
        h["Sec-Fetch-Site"] = "cross-site"
        h["Origin"] = origin
    if cookie:
        h["Cookie"] = cookie
    if token:
        h["X-Console-Token"] = token
    return request(port, method, "/api/console/action", password,
                   json.dumps(payload).encode(), h)


def get(port, path):
    status, _, body = request(port, "GET", path)
    assert status == 200, (status, body[:300])
    return json.loads(body)


@pytest.fixture
def console_cluster(metrics_node):
    """Two nodes with metrics ports, requirepass and actions on, meshed."""
    args = ["--metrics-actions", "yes", "--cluster-node-timeout", "2000"]
    nodes = [metrics_node(workers=2, extra_args=args) for _ in range(2)]
    (a, _), (b, _) = nodes
    assert a.execute("CLUSTER", "MEET", "127.0.0.1", b.port) == b"OK"
    for srv, _ in nodes:
        srv.execute("CONFIG", "SET", "requirepass", PW)     # started without: the harness PINGs
    ra = a.client(password=PW)
    wait_until(lambda: b"cluster_reachable_nodes:1" in ra.execute_command("CLUSTER", "INFO"),
               timeout=20, message="the two nodes did not meet")
    return nodes


def test_views_answer_for_the_whole_cluster(console_cluster):
    (a, ma), (b, mb) = console_cluster
    ra, rb = a.client(password=PW), b.client(password=PW)
    on_b = rb.execute_command("ADDJOB", "orders", b'{"n": 1} <b>x</b>', 0, "REPLICATE", 1)
    on_a = [ra.execute_command("ADDJOB", "orders", b"job %d" % i, 0, "REPLICATE", 1)
            for i in range(3)]
    ra.execute_command("ADDJOB", "mail", b"m" * 5000, 0, "REPLICATE", 1)
    nodes = get(ma, "/api/console/cluster")
    assert nodes["nodes_asked"] == 2 and nodes["nodes_answered"] == 2
    assert sorted(n["figures"]["queued"] for n in nodes["nodes"]) == [1, 4]
    queues = get(ma, "/api/console/queues")
    rows = {q["queue"]: q for q in queues["queues"]}
    assert rows["orders"]["len"] == 4 and rows["orders"]["nodes"] == 2
    assert queues["queues"][0]["queue"] == "orders"
    assert [q["queue"] for q in get(ma, "/api/console/queues?match=mai")["queues"]] == ["mail"]
    page = get(ma, "/api/console/queue?name=orders&count=2")
    assert page["len"] == 4 and len(page["jobs"]) == 2
    # the oldest of both nodes first, by (ctime, ID): node b's job was added first, but ctime
    # is each worker's millisecond clock * 1e6 plus its own counter, so node a's next jobs
    # may share or precede its millisecond (the ordering across nodes is the clocks')
    def ctime(r, jid):
        show = r.execute_command("SHOW", jid)
        return int(show[show.index(b"ctime") + 1])
    ages = sorted([(ctime(rb, on_b), on_b)] + [(ctime(ra, j), j) for j in on_a])
    assert [j["id"] for j in page["jobs"]] == [jid.decode() for _, jid in ages[:2]]
    rest = get(ma, "/api/console/queue?name=orders&count=2&start=2")
    assert [j["id"] for j in rest["jobs"]] == [jid.decode() for _, jid in ages[2:]]
    mail = get(ma, "/api/console/queue?name=mail")["jobs"][0]
    assert mail["body_size"] == 5000 and len(mail["body"]) == 200
    # a job found from the node that does not hold it, routed by its ID's prefix
    found = get(ma, "/api/console/job?id=" + quote(on_b.decode(), safe=""))   # IDs hold + and /
    b_id = rb.execute_command("CLUSTER", "MYID").decode()
    assert found["found"] and found["node"] == b_id and found["routed_to"] == b_id
    assert found["job"]["body"] == '{"n": 1} <b>x</b>' and found["job"]["queue"] == "orders"
    assert not get(ma, "/api/console/job?id=D-00000000-xxxxxxxxxxxxxxxxxxxxxxxx-0000")["found"]
    hits = get(mb, "/api/console/search?queue=orders&text=job%201")
    assert [j["body"] for j in hits["jobs"]] == ["job 1"] and hits["complete"]
    for bad in ("/api/console/queue", "/api/console/job", "/api/console/search?queue=orders"):
        assert request(ma, "GET", bad)[0] == 400
    assert request(ma, "GET", "/api/console/cluster", password="wrong")[0] == 401


def test_refused_actions_change_nothing(console_cluster):
    (a, ma), _ = console_cluster
    r = a.client(password=PW)
    jid = r.execute_command("ADDJOB", "keep", b"body", 0, "REPLICATE", 1).decode()
    cookie, s = session(ma)
    assert s["actions"] is True
    delete = {"action": "delete", "ids": [jid]}
    refusals = [
        act(ma, delete, cookie, s["token"], origin="http://evil.example"),     # cross-origin
        act(ma, delete, cookie, None),                                          # no token
        act(ma, delete, cookie, "0" * 64),                                      # wrong token
        act(ma, delete, None, s["token"]),                                      # no session
        act(ma, delete, cookie, s["token"], password="wrong"),                  # wrong password
        act(ma, delete, cookie, s["token"], password=None),                     # no password
        act(ma, delete, cookie, s["token"], origin=None),                       # no origin at all
        act(ma, delete, cookie, s["token"], ctype="text/plain"),                # a form could send it
        act(ma, delete, cookie, s["token"], method="GET"),      # GET never acts (with a body: 400)
        request(ma, "GET", "/api/console/action?action=delete&ids=" + quote(jid, safe="")),
        act(ma, {"action": "pause", "queue": "keep", "mode": "all"}, cookie, s["token"],
            origin="http://evil.example"),
    ]
    assert [st for st, _, _ in refusals] == [403, 403, 403, 403, 401, 401, 403, 415, 400, 405, 403]
    assert r.execute_command("QLEN", "keep") == 1
    assert r.execute_command("PAUSE", "keep", "state") == b"none"
    # malformed bodies: 400, nothing done
    for payload in (b"not json", b"[1]", b'{"action":"delete","ids":"x"}', b'{"action":"rm -rf"}',
                    b'{"action":"pause","queue":"keep","mode":"sideways"}'):
        status, _, _ = request(ma, "POST", "/api/console/action", PW, payload, {
            "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin",
            "Cookie": cookie, "X-Console-Token": s["token"]})
        assert status == 400, payload
    assert r.execute_command("QLEN", "keep") == 1
    # the same request, same-origin with its token, acts; an Origin equal to the host does too
    status, _, body = act(ma, delete, cookie, s["token"])
    assert status == 200, body
    # every node acks it (ACKJOB everywhere); the node holding it counts it, unless the
    # other node's ACKJOB of a job it does not know (a dummy ack, whose SETACK deletes it)
    # got there first: the answers come in the order the nodes answered, so the sum
    results = json.loads(body)["results"]
    assert len(results) == 2 and sum(r["done"] for r in results) in (0, 1), results
    assert r.execute_command("QLEN", "keep") == 0
    assert r.execute_command("SHOW", jid) is None
    host = "127.0.0.1:%d" % ma
    status, _, body = request(ma, "POST", "/api/console/action", PW, json.dumps(
        {"action": "pause", "queue": "keep", "mode": "in"}).encode(), {
        "Content-Type": "application/json", "Origin": "http://" + host, "Host": host,
        "Cookie": cookie, "X-Console-Token": s["token"]})
    assert status == 200, body
    assert r.execute_command("PAUSE", "keep", "state") == b"in"
    log = open(a.log_path).read()
    assert "Console action by 127.0.0.1:" in log and "delete " + jid in log
    assert "Console action refused for 127.0.0.1:" in log and "cross-origin" in log


def test_actions_off_unless_asked_for_and_a_password_is_set(metrics_node):
    srv, port = metrics_node(workers=2)
    srv.execute("CONFIG", "SET", "requirepass", PW)
    r = srv.client(password=PW)
    jid = r.execute_command("ADDJOB", "q", b"b", 0).decode()
    cookie, s = session(port)
    assert s["actions"] is False
    status, _, body = act(port, {"action": "delete", "ids": [jid]}, cookie, s["token"])
    assert status == 403 and b"metrics-actions" in body
    r.execute_command("CONFIG", "SET", "metrics-actions", "yes")
    r.execute_command("CONFIG", "SET", "requirepass", "")
    cookie, s = session(port, password=None)
    assert s["actions"] is False
    status, _, body = act(port, {"action": "delete", "ids": [jid]}, cookie, s["token"], password=None)
    assert status == 403 and b"requirepass" in body
    assert r.execute_command("QLEN", "q") == 1


def test_page_assets_carry_a_strict_policy(metrics_node):
    _, port = metrics_node(workers=1)
    for path, ctype in (("/console", "text/html"), ("/console.js", "text/javascript"),
                        ("/console-lib.js", "text/javascript"), ("/console-views.js", "text/javascript"),
                        ("/console-queue.js", "text/javascript"), ("/console.css", "text/css")):
        status, headers, _ = request(port, "GET", path, password=None)
        assert status == 200 and headers["content-type"].startswith(ctype)
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert headers["x-content-type-options"] == "nosniff"


def test_retry_and_bulk_actions_on_a_dead_letter_queue(console_cluster):
    (a, ma), (b, _) = console_cluster
    ra, rb = a.client(password=PW), b.client(password=PW)
    # one job dead-lettered: delivered once, not acknowledged, MAXDELIVERIES 1
    jid = ra.execute_command("ADDJOB", "work", b"payload-1", 0, "REPLICATE", 2, "RETRY", 1,
                             "MAXDELIVERIES", 1)
    assert ra.execute_command("GETJOB", "FROM", "work")[0][1] == jid
    wait_until(lambda: ra.execute_command("QLEN", "work:dead", "CLUSTER") == 1, timeout=15,
               message="the job was not dead-lettered")
    cookie, s = session(ma)
    status, _, body = act(ma, {"action": "retry", "ids": [jid.decode()]}, cookie, s["token"])
    assert status == 200, body
    res = json.loads(body)
    (result,) = [r for r in res["results"] if r["done"]]
    new_id = result["requeued_as"][jid.decode()]
    assert new_id != jid.decode()
    got = rb.execute_command("GETJOB", "TIMEOUT", 5000, "FROM", "work")
    assert got[0][2] == b"payload-1" and got[0][1].decode() == new_id
    shown = ra.execute_command("SHOW", new_id)
    assert shown[shown.index(b"max-deliveries") + 1] == 1          # its options came along
    wait_until(lambda: ra.execute_command("QLEN", "work:dead", "CLUSTER") == 0, timeout=10,
               message="the dead job was not acknowledged")
    # bulk: 40 jobs queued directly in a dead-letter queue on both nodes, all deleted
    for i in range(20):
        ra.execute_command("ADDJOB", "bulk:dead", b"a%d" % i, 0, "REPLICATE", 2, "RETRY", 1)
        rb.execute_command("ADDJOB", "bulk:dead", b"b%d" % i, 0, "REPLICATE", 2, "RETRY", 1)
    assert ra.execute_command("QLEN", "bulk:dead", "CLUSTER") == 40
    status, _, body = act(ma, {"action": "delete_all", "queue": "bulk:dead"}, cookie, s["token"])
    assert status == 200, body
    res = json.loads(body)
    assert res["nodes_answered"] == 2 and sum(r["done"] for r in res["results"]) == 40
    assert ra.execute_command("QLEN", "bulk:dead", "CLUSTER") == 0
    # the copies were acknowledged too: past their RETRY nothing comes back
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert ra.execute_command("QLEN", "bulk:dead", "CLUSTER") == 0
        time.sleep(0.1)


def test_each_node_keeps_its_own_session_cookie(console_cluster):
    """Cookies are per host, not per port: two nodes' consoles on one host must not share
    (or overwrite) one session cookie."""
    (a, ma), (b, mb) = console_cluster
    cookie_a, sa = session(ma)
    cookie_b, sb = session(mb)
    assert cookie_a.split("=")[0] != cookie_b.split("=")[0]
    jid = a.client(password=PW).execute_command("ADDJOB", "two", b"x", 0, "REPLICATE", 1).decode()
    both = cookie_a + "; " + cookie_b          # what a browser sends to either port
    status, _, body = act(ma, {"action": "delete", "ids": [jid]}, both, sa["token"])
    assert status == 200, body
    assert a.client(password=PW).execute_command("QLEN", "two") == 0


def test_a_queues_groups_are_listed_once_each_by_their_home(console_cluster):
    """docs/job-groups.md: every group of the queue over both nodes, each counted by its home
    (both nodes hold every job: REPLICATE 2), with the job it waits on and that job's state."""
    (a, ma), (b, mb) = console_cluster
    ra, rb = a.client(password=PW), b.client(password=PW)
    heads = {}
    for key, n in (("big", 3), ("small", 1), ("mid", 2)):
        for i in range(n):
            jid = (ra if i % 2 else rb).execute_command("ADDJOB", "grp", "%s%d" % (key, i), 0,
                                                        "GROUP", key, "REPLICATE", 2)
            heads.setdefault(key, jid.decode())
    ids = {r.execute_command("CLUSTER", "MYID").decode() for r in (ra, rb)}
    for port in (ma, mb):
        view = get(port, "/api/console/groups?name=grp")
        assert view["count"] == 3 and view["nodes_answered"] == 2
        assert [(g["key"], g["jobs"], g["head"], g["head_state"]) for g in view["groups"]] == [
            ("big", 3, heads["big"], "queued"), ("mid", 2, heads["mid"], "queued"),
            ("small", 1, heads["small"], "queued")]
        assert {g["node"] for g in view["groups"]} <= ids
    assert [g["key"] for g in get(ma, "/api/console/groups?name=grp&limit=1")["groups"]] == ["big"]
    home = next(g["node"] for g in get(ma, "/api/console/groups?name=grp")["groups"]
                if g["key"] == "big")
    r_home = ra if ra.execute_command("CLUSTER", "MYID").decode() == home else rb
    got = r_home.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "grp")
    assert sorted(j[1].decode() for j in got) == sorted(
        g["head"] for g in get(ma, "/api/console/groups?name=grp")["groups"] if g["node"] == home)
    states = {g["key"]: g["head_state"] for g in get(mb, "/api/console/groups?name=grp")["groups"]}
    assert states["big"] == "delivered"
    assert get(ma, "/api/console/groups?name=none")["groups"] == []
    assert request(ma, "GET", "/api/console/groups")[0] == 400
