"""The operations console (/console on the metrics port) in headless Chromium against a
real 3-node cluster (2 workers each, requirepass, metrics-actions yes): finding a job held
elsewhere, retrying a dead letter, pausing a queue on every node, deleting a dead-letter
queue of 1,000 jobs, bodies shown as text, the read-only page, and 10,000 queues.
Screenshots of the four views are saved under the test's tmp dir (and copied to
$DISQUE_SCREENSHOT_DIR when set)."""
import os
import urllib.parse

import pytest
import redis

from console_helpers import (ConsoleNode, ConsolePage, holds_for, qlen_cluster,
                             start_console_cluster, stop_all)
from support.browser import CHROMIUM, Browser
from support.waits import wait_until

pytest.importorskip("websocket")
pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")]

XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    nodes = start_console_cluster(tmp_path_factory, 3)
    yield nodes
    stop_all(nodes)


@pytest.fixture
def console(tmp_path):
    """console(node) -> ConsolePage of that node's console, loaded on the cluster view."""
    browsers = []

    def open_console(node, fragment="#/cluster", view="cluster"):
        b = Browser(tmp_path)
        browsers.append(b)
        page = ConsolePage(b, node, tmp_path)
        page.load(view, fragment)
        return page

    yield open_console
    for b in browsers:
        b.close()


def addjob(node, queue, body, *opts):
    return node.client().execute_command("ADDJOB", queue, body, 0, *opts).decode()


def test_find_a_job_held_by_another_node(nodes, console):
    a, b, c = nodes
    body = "order #17 for {\"sku\": 4} & more"
    job_id = addjob(a, "find:orders", body, "REPLICATE", 1)
    for i in range(30):
        addjob(nodes[i % 3], ("find:orders", "find:emails", "find:thumbs")[i % 3], "job %d" % i)
    page = console(b)
    assert b.id[:8] in page.text("node-info")
    # the cluster view: every node, all answered, this one marked
    page.wait("document.querySelectorAll('#cluster-table tbody tr[data-node]').length === 3 && "
              "+document.body.dataset.refreshes >= 2")
    rows = page.js("[...document.querySelectorAll('#cluster-table tbody tr')].map(tr => "
                   "[tr.dataset.node, [...tr.cells].map(td => td.textContent)])")
    assert {r[0] for r in rows} == {n.id for n in nodes}
    for node_id, cells in rows:
        node = next(n for n in nodes if n.id == node_id)
        assert cells[0].startswith(node.addr) and cells[2] == "ok"
        assert cells[0].endswith("(this node)") == (node is b)
    assert not page.visible("partial-warning")
    assert "updated" in page.text("status")
    page.screenshot("console-cluster.png")
    page.go("#/queues", "queues")
    page.wait("document.querySelector('#queues-table tr[data-queue=\"find:orders\"]') !== null")
    assert page.js("document.querySelector('#queues-table tr[data-queue=\"find:orders\"]').cells[1]"
                   ".textContent") == "11"
    page.screenshot("console-queues.png")

    # the job ID pasted on node B: node A holds it
    page.find(job_id)
    page.wait_view("job")
    page.wait("document.getElementById('job-holder').dataset.found === '1'")
    assert page.js("document.getElementById('job-holder').dataset.node") == a.id
    assert a.addr in page.text("job-holder")
    assert page.text("job-body") == body
    assert page.js("document.getElementById('job-body').tagName") == "PRE"
    fields = page.js("Object.fromEntries([...document.querySelectorAll('#job-fields tr')].map("
                     "tr => [tr.dataset.field, tr.cells[1].textContent]))")
    assert fields["id"] == job_id and fields["queue"] == "find:orders"
    assert fields["state"] == "queued" and fields["repl"] == "1"
    for key in ("ttl", "ctime", "retry", "nodes-delivered", "next-requeue-within", "body_size"):
        assert key in fields
    assert a.addr in fields["nodes-delivered"]
    assert not page.visible("job-body-cut")
    page.screenshot("console-job.png")

    # an unknown ID: said so, no crash
    page.find("D-%s-0000000000000000000000000-05a1" % a.id[:8])
    page.wait_view("job")
    page.wait("document.getElementById('job-holder').dataset.found === '0'")
    assert "not found" in page.text("job-holder")

    # a phone: no page-wide horizontal scroll
    page.phone()
    page.go("#/cluster", "cluster")
    assert page.js("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.go("#/queue/find%3Aorders", "queue")
    assert page.js("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert page.problems() == []


def test_retry_a_dead_lettered_job_and_consume_it(nodes, console):
    a, b, c = nodes
    q = "dlq:payments"
    r = a.client()
    job_id = addjob(a, q, "charge card 4242", "MAXDELIVERIES", 1, "RETRY", 1, "REPLICATE", 1)
    got = r.execute_command("GETJOB", "TIMEOUT", 5000, "FROM", q)
    assert got[0][1].decode() == job_id
    # delivered once, not acknowledged: at its RETRY it goes to the dead-letter queue
    wait_until(lambda: qlen_cluster(a, q + ":dead") == 1, timeout=15,
               message="the job never reached %s:dead" % q)
    page = console(b)
    page.open_queue(q + ":dead")
    page.wait(page.job_row(job_id) + " !== null")
    row = page.js("[...%s.cells].map(td => td.textContent)" % page.job_row(job_id))
    assert "charge card 4242" in row and q in row
    holder = page.js(page.job_row(job_id) + ".dataset.node")
    assert page.visible("act-retry-all") and page.visible("act-delete-all")
    page.select_job(job_id)
    assert page.text("act-retry") == "Retry in " + q
    page.screenshot("console-queue.png")
    # cancelled: nothing happens
    question, _, _ = page.act("act-retry", confirm=False)
    assert question.startswith("Retry 1 selected job of queue %s:dead" % q)
    assert qlen_cluster(a, q + ":dead") == 1
    page.select_job(job_id)
    question, result, text = page.act("act-retry")
    assert q in question
    assert result["state"] == "done" and result["done"] == "1" and result["jobs"] == "1", text
    assert "retried 1 of 1" in text
    new_id = page.js("document.querySelector('#action-result .moved a').textContent")
    assert new_id != job_id
    # the dead letter is gone, the job is queued again in its queue: a consumer gets it
    holder_node = next(n for n in nodes if n.id == holder)
    consumer = holder_node.client()
    got = consumer.execute_command("GETJOB", "TIMEOUT", 5000, "FROM", q)
    assert got and got[0][0].decode() == q and got[0][2] == b"charge card 4242"
    assert got[0][1].decode() == new_id
    consumer.execute_command("ACKJOB", new_id)
    wait_until(lambda: qlen_cluster(a, q + ":dead") == 0, timeout=10)
    page.wait(page.job_row(job_id) + " === null", message="the retried job is still listed")
    assert page.problems() == []


def addjob_paused(node, queue):
    """The error ADDJOB answers, or None when it adds the job."""
    try:
        job = addjob(node, queue, "x")
    except redis.ResponseError as e:
        return str(e)
    node.client().execute_command("DELJOB", job)
    return None


def test_pause_a_queue_on_every_node_and_resume(nodes, console):
    q = "pausable"
    addjob(nodes[0], q, "before")
    page = console(nodes[2])
    page.open_queue(q)
    question, result, text = page.act("act-pause-in")
    assert "Pause input of queue pausable on every node" in question
    assert result["state"] == "done", text
    for node in nodes:
        wait_until(lambda: (addjob_paused(node, q) or "").startswith("PAUSED"), timeout=10,
                   message="ADDJOB on %s was not refused" % node.addr)
    page.wait("document.getElementById('q-paused').dataset.paused === 'in'")
    # resumed from the page: ADDJOB works again everywhere
    question, result, text = page.act("act-resume")
    assert question.startswith("Resume queue pausable on every node")
    assert result["state"] == "done" and "resumed" in text
    for node in nodes:
        wait_until(lambda: addjob_paused(node, q) is None, timeout=10,
                   message="ADDJOB on %s still refused" % node.addr)
    page.wait("document.getElementById('q-paused').dataset.paused === 'none'")
    assert page.problems() == []


def test_delete_all_of_a_dead_letter_queue_of_1000_jobs(nodes, console):
    q = "bulk:dead"
    pipes = [n.client().pipeline(transaction=False) for n in nodes]
    for i in range(1000):
        pipes[i % 3].execute_command("ADDJOB", q, "bulk job %d" % i, 0, "REPLICATE", 2, "RETRY", 2)
    for p in pipes:
        assert all(isinstance(x, bytes) for x in p.execute())
    wait_until(lambda: qlen_cluster(nodes[0], q) == 1000, timeout=15)
    page = console(nodes[1])
    page.open_queue(q)
    page.wait("document.getElementById('q-len').textContent === '1,000'")
    assert page.js("document.querySelectorAll('#jobs-table tr[data-job]').length") == 50
    assert page.text("page-info") == "1–50 of 1,000"
    page.click("page-next")
    page.wait("document.getElementById('page-info').textContent === '51–100 of 1,000'")
    # cancelled first: nothing deleted
    question, _, _ = page.act("act-delete-all", confirm=False)
    assert question.startswith("Delete 1,000 jobs of queue bulk:dead on every node?")
    assert qlen_cluster(nodes[0], q) == 1000
    question, result, text = page.act("act-delete-all")
    assert result["state"] == "done", text
    assert result["done"] == "1000" and result["jobs"] == "1000", text
    assert "deleted 1,000 of 1,000" in text and result["errors"] == "0"
    wait_until(lambda: qlen_cluster(nodes[0], q) == 0, timeout=10)
    # every copy went too: none comes back when the jobs' RETRY (2 s) has passed
    holds_for(lambda: all(qlen_cluster(n, q) == 0 for n in nodes), 3.5,
              message="deleted jobs were queued again")
    page.wait("document.getElementById('q-len').textContent === '0'")
    assert page.problems() == []


def test_bodies_and_names_are_shown_as_text(nodes, console):
    a = nodes[0]
    q = "xss:<i>q</i>"
    job_id = addjob(a, q, XSS, "REPLICATE", 1)
    page = console(nodes[1])
    page.go("#/queues", "queues")
    page.js("(f => { f.value = 'xss:'; f.dispatchEvent(new Event('input')); })"
            "(document.getElementById('queue-filter'))")
    page.wait("document.querySelectorAll('#queues-table tr[data-queue]').length === 1")
    assert page.js("document.querySelector('#queues-table tr[data-queue]').dataset.queue") == q
    assert page.js("document.querySelector('#queues-table tr[data-queue] a').textContent") == q
    page.go("#/queue/" + urllib.parse.quote(q, safe=""), "queue")
    assert page.text("q-name") == q
    page.wait(page.job_row(job_id) + " !== null")
    assert page.js(page.job_row(job_id) + ".querySelector('td.body').textContent") == XSS
    page.js("(t => { t.value = 'onerror'; })(document.getElementById('search-text'))")
    page.click("search-go")
    page.wait("document.getElementById('search-summary') !== null")
    assert page.js("document.querySelector('#search-table td.body').textContent") == XSS
    page.find(job_id)
    page.wait_view("job")
    page.wait("document.getElementById('job-body').textContent.length > 0")
    assert page.text("job-body") == XSS
    assert page.js("document.querySelectorAll('main img, main script, main i').length") == 0
    assert page.js("typeof window.__pwned") == "undefined"
    assert page.problems() == []


def test_the_page_is_read_only_when_actions_are_off(start_server, console):
    spawn = lambda args: start_server(workers=1, extra_args=args, wait=False)
    node = ConsoleNode(None, extra=(), spawn=spawn)
    try:
        node.wait_ready()
        job_id = addjob(node, "ro:q", "read me")
        page = console(node)
        page.wait("document.body.dataset.actions === 'off'")
        assert page.visible("readonly")
        assert page.text("readonly") == \
            "read-only: actions are off (metrics-actions no, or no requirepass)"
        no_actions = ("document.querySelectorAll('[id^=\"act-\"], #jobs-table input[type=checkbox]')"
                      ".length === 0")
        page.open_queue("ro:q")
        page.wait(page.job_row(job_id) + " !== null")
        assert page.js(no_actions)
        page.find(job_id)
        page.wait_view("job")
        page.wait("document.getElementById('job-holder').dataset.found === '1'")
        assert page.text("job-body") == "read me"
        assert page.js(no_actions)
        # the server refuses too, whatever the page would send
        res = page.b.call("Runtime.evaluate", awaitPromise=True, returnByValue=True, expression=(
            "fetch('/api/console/action', {method: 'POST', credentials: 'same-origin', headers: "
            "{'Content-Type': 'application/json'}, body: JSON.stringify({action: 'delete', "
            "ids: [%r]})}).then(r => r.text().then(t => [r.status, t]))" % job_id))
        status, why = res["result"]["value"]
        assert status == 403 and "metrics-actions no" in why
        assert node.client().execute_command("QLEN", "ro:q") == 1
    finally:
        node.lease.release()


def test_ten_thousand_queues_stay_fast_and_are_counted(nodes, console):
    pipes = [n.client().pipeline(transaction=False) for n in nodes]
    longer = {0: 10, 1: 9, 2: 8, 3: 7, 4: 6, 9999: 5}      # extra jobs: the longest queues
    for i in range(10000):
        for _ in range(1 + longer.get(i, 0)):
            pipes[i % 3].execute_command("ADDJOB", "many:%05d" % i, "x", 0, "REPLICATE", 1)
    # a dead letter of many:09999, in a queue far from any node's longest
    pipes[0].execute_command("ADDJOB", "many:09999:dead", "x", 0, "REPLICATE", 1)
    for p in pipes:
        p.execute()
    page = console(nodes[0])
    page.go("#/queues", "queues")
    rows = "document.querySelectorAll('#queues-table tr[data-queue]')"
    set_filter = ("(f => { f.value = %s; f.dispatchEvent(new Event('input')); })"
                  "(document.getElementById('queue-filter'))")
    page.js(set_filter % "'many:'")
    page.wait("%s.length === 200 && %s[0].dataset.queue === 'many:00000'" % (rows, rows))
    assert page.js("[...%s].slice(0, 6).map(tr => [tr.dataset.queue, tr.cells[1].textContent])"
                   % rows) == [["many:%05d" % i, str(1 + n)] for i, n in longer.items()]
    # the longest 1,000, then refreshed with rows reused
    page.js("(s => { s.value = '1000'; s.dispatchEvent(new Event('change')); })"
            "(document.getElementById('queue-limit'))")
    page.wait("%s.length === 1000" % rows)
    page.js("window.__row = document.querySelector('#queues-table tr[data-queue=\"many:00003\"]')")
    work = "[document.body.dataset.rowsMade, document.body.dataset.tableBuilds]"
    refreshes = int(page.js("document.body.dataset.refreshes"))
    page.wait("+document.body.dataset.refreshes >= %d" % (refreshes + 1))
    before = page.js(work)
    page.wait("+document.body.dataset.refreshes >= %d" % (refreshes + 3))
    assert page.js("window.__row === document.querySelector("
                   "'#queues-table tr[data-queue=\"many:00003\"]')")
    # a steady table's refresh makes no row and moves none: its cost is the changed cells
    assert page.js(work) == before
    page.js(set_filter % "'many:0123'")
    page.wait("%s.length === 10" % rows)
    assert page.text("queues-count").startswith("(10 matching")
    # how many queues there are in all, not how many were listed; a queue's dead letters
    # wherever its dead-letter queue ranks
    page.js(set_filter % "'many:'")
    page.wait("%s.length === 1000" % rows)
    assert page.problems() == []
    count = page.text("queues-count")
    dead = page.js("document.querySelector('#queues-table tr[data-queue=\"many:09999\"]').cells[9]"
                   ".textContent")
    assert (count.startswith("(10,001 matching"), dead) == (True, "1"), \
        "the page says %r, and %r dead letters of many:09999" % (count, dead)


class HostileSite:
    """A page of another origin (its own HTTP server on another port) that tries to act on
    the console the browser is logged in to."""

    def __init__(self, html):
        import http.server
        import threading

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = html.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.url = "http://127.0.0.1:%d/" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_another_site_a_get_and_a_post_without_token_change_nothing(nodes, console):
    """The browser holds the password (every request carries it, the worst case), a session
    cookie and the page's token; another origin's page tries a JSON fetch (CORS preflight),
    a no-cors fetch, and a form POST; then a GET with an action, and POSTs of the console's
    own origin without the token or without the session. Nothing is deleted or paused, and
    the node logs the refusals."""
    a = nodes[0]
    refused = lambda: open(a.srv.log_path).read().count("Console action refused")
    before = refused()
    job_id = addjob(a, "guarded", "keep me", "REPLICATE", 1)
    page = console(a, "#/queues", "queues")
    res = page.b.call("Runtime.evaluate", awaitPromise=True, returnByValue=True, expression=(
        "fetch('/api/console/session', {credentials: 'same-origin'}).then(r => r.json())"
        ".then(s => s.token)"))
    token = res["result"]["value"]
    target = "http://127.0.0.1:%d/api/console/action" % a.mport
    body = '{"action": "delete", "ids": ["%s"], "node": "%s"}' % (job_id, a.id)
    evil = HostileSite("""<!DOCTYPE html><body>
<form id="f" method="POST" action="%(target)s" enctype="text/plain">
<input name='{"action": "pause", "queue": "guarded", "mode": "all", "x": "' value='"}'></form>
<script>
window.results = [];
fetch("%(target)s", {method: "POST", credentials: "include", headers: {"Content-Type":
  "application/json", "X-Console-Token": "%(token)s"}, body: '%(body)s'})
  .then(r => results.push("cors:" + r.status), e => results.push("cors:blocked"));
fetch("%(target)s", {method: "POST", mode: "no-cors", credentials: "include",
  headers: {"Content-Type": "text/plain"}, body: '%(body)s'})
  .then(r => results.push("no-cors:" + r.type), e => results.push("no-cors:error"));
setTimeout(() => document.getElementById("f").submit(), 300);
</script></body>""" % {"target": target, "token": token, "body": body})
    try:
        page.b.call("Page.navigate", url=evil.url)
        # the preflighted JSON fetch never leaves the browser; the other two are refused
        wait_until(lambda: refused() >= before + 2, timeout=15,
                   message="the hostile requests never reached the node")
    finally:
        evil.close()
    assert "cross-origin request refused" in open(a.srv.log_path).read()
    # a GET with an action, as a link or an <img> would send it
    page.b.call("Page.navigate", url=target + "?action=delete&ids=" + urllib.parse.quote(job_id))
    wait_until(lambda: "actions take POST" in (page.js("document.body && document.body.innerText")
                                               or ""), timeout=10,
               message="the GET was not refused: %r" % page.js("document.documentElement.outerHTML"))
    # from the console's own origin but without the token (a script that did not load the
    # session), and with a token of no session: refused
    res = page.b.call("Runtime.evaluate", awaitPromise=True, returnByValue=True, expression=(
        "Promise.all([fetch('/api/console/action', {method: 'POST', headers: {'Content-Type': "
        "'application/json'}, body: %r}).then(r => r.status), "
        "fetch('/api/console/action', {method: 'POST', credentials: 'omit', headers: "
        "{'Content-Type': 'application/json', 'X-Console-Token': %r}, body: %r})"
        ".then(r => r.status)])" % (body, token, body)))
    assert res["result"]["value"] == [403, 403]
    # (a wrong password is refused at the HTTP level in tests/test_console_api.py: in a
    # browser the 401 makes it ask for the password again)
    r = a.client()
    assert r.execute_command("QLEN", "guarded") == 1
    assert r.execute_command("PAUSE", "guarded", "state") == b"none"
    assert r.execute_command("SHOW", job_id) is not None


def test_a_queue_with_job_groups_shows_its_groups_and_held_jobs(tmp_path, console):
    """docs/job-groups.md: the queue's figures and its groups' table (each group, the job it
    waits on and that job's state)."""
    node = ConsoleNode(tmp_path / "lone")
    try:
        node.wait_ready()
        c = node.client()
        heads = {}
        for key in ("a", "b"):
            for i in range(3):
                jid = c.execute_command("ADDJOB", "grouped", "%s%d" % (key, i), 0, "GROUP", key)
                heads.setdefault(key, jid.decode())
        c.execute_command("ADDJOB", "plain", "p", 0)
        page = console(node)
        page.open_queue("grouped")
        page.wait("document.getElementById('q-groups') && "
                  "document.getElementById('q-groups').textContent === '2'")
        assert page.text("q-held") == "4" and page.text("q-len") == "2"
        # the groups' table: each group with the job it waits on, queued, then delivered
        page.wait("document.querySelectorAll('#groups-table tbody tr').length === 2")
        rows = page.js("[...document.querySelectorAll('#groups-table tbody tr')].map("
                       "(tr) => [...tr.children].map((td) => td.textContent))")
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            ("a", "3", heads["a"], "queued"), ("b", "3", heads["b"], "queued")]
        c.execute_command("GETJOB", "FROM", "grouped")
        page.open_queue("plain")
        page.open_queue("grouped")
        page.wait("document.querySelectorAll('#groups-table tbody tr').length === 2 && "
                  "[...document.querySelectorAll('#groups-table tbody tr')].some("
                  "(tr) => tr.children[3].textContent === 'delivered')")
        page.open_queue("plain")
        page.wait("document.getElementById('q-len').textContent === '1'")
        assert page.js("document.getElementById('q-groups') === null")
        assert page.problems() == []
    finally:
        node.stop()
