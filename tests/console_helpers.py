"""Shared by the console browser tests (tests/test_console_browser.py): nodes started with
`requirepass` and a metrics port (their readiness PING and the harness's commands
authenticate), and `ConsolePage`, the console of one node driven in headless Chromium."""
from __future__ import annotations

import json
import time
import urllib.parse

import redis

from disque.harness import cluster as harness
from support.browser import Browser, save
from support.cluster import CLUSTER_NODE_TIMEOUT
from support.ports import lease_port
from support.server import DisqueServer, stop_servers
from support.waits import wait_until

PW = "console-s3cret"


def authed_ready(node):
    try:
        c = redis.Redis(host="127.0.0.1", port=node.port, password=PW, socket_timeout=2,
                        socket_connect_timeout=2)
        try:
            return c.ping()
        finally:
            c.close()
    except (redis.RedisError, OSError):
        return False


def authed_call(node, *args):
    if getattr(node, "authed", None) is None:
        node.authed = node.client(password=PW)
    return node.authed.execute_command(*args)


class ConsoleNode:
    """A node with `--requirepass PW --metrics-port M` (and what `extra` adds)."""

    def __init__(self, workdir, workers=2, extra=(), spawn=None):
        self.lease = lease_port()
        self.mport = self.lease.port
        args = ["--metrics-port", self.mport, "--requirepass", PW, *extra]
        self.srv = spawn(args) if spawn else DisqueServer(workers=workers, extra_args=args,
                                                            workdir=workdir)
        self.srv._ready, self.srv._call = authed_ready, authed_call
        self.srv.authed = None
        if spawn is None:
            self.srv.spawn()

    def wait_ready(self):
        self.srv.wait_ready()
        self.id = self.client().execute_command("CLUSTER", "MYID").decode()
        self.addr = "127.0.0.1:%d" % self.srv.port
        return self

    def client(self):
        return self.srv.client(password=PW)

    def stop(self):
        try:
            self.srv.stop()
        finally:
            self.lease.release()


def start_console_cluster(tmp_path_factory, n=3):
    """`n` nodes (2 workers, actions on) meshed; stopped by the caller."""
    nodes = []
    try:
        for _ in range(n):
            nodes.append(ConsoleNode(tmp_path_factory.mktemp("console-node"), extra=(
                "--metrics-actions", "yes", "--cluster-node-timeout", CLUSTER_NODE_TIMEOUT)))
        for node in nodes:
            node.wait_ready()
        harness.meet([node.srv for node in nodes])
        assert harness.wait_mesh([node.srv for node in nodes], 20), "cluster mesh did not form"
    except BaseException:
        stop_all(nodes)
        raise
    return nodes


def stop_all(nodes):
    stop_servers(nodes)


def qlen_cluster(node, queue):
    return int(node.client().execute_command("QLEN", queue, "CLUSTER"))


def holds_for(predicate, seconds, interval=0.1, message=None):
    """`predicate` is true at every check until the deadline."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(interval)


def js_str(value):
    return json.dumps(value)


class ConsolePage:
    """The console page of one node in a Browser, with the helpers the tests use."""

    def __init__(self, browser: Browser, node, shots_dir):
        self.b = browser
        self.node = node
        self.shots = shots_dir
        self.base = "http://127.0.0.1:%d/console" % node.mport
        browser.call("Page.enable")
        browser.call("Runtime.enable")
        browser.call("Log.enable")
        browser.basic_auth(PW)
        self.desktop()

    def desktop(self):
        self.b.call("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                    deviceScaleFactor=1, mobile=False)

    def phone(self):
        self.b.call("Emulation.setDeviceMetricsOverride", width=390, height=844,
                    deviceScaleFactor=2, mobile=True)

    def js(self, expr):
        return self.b.evaluate(expr)

    def wait(self, expr, timeout=15, message=None):
        return wait_until(lambda: self.js(expr), timeout=timeout, interval=0.1,
                          message=message or "page never met: " + expr)

    def load(self, view="cluster", fragment="#/cluster"):
        self.b.call("Page.navigate", url=self.base + fragment)
        self.wait_view(view)

    def wait_view(self, view, refreshes=1):
        self.wait("document.body.dataset.view === %s && +document.body.dataset.refreshes >= %d"
                  % (js_str(view), refreshes), message="the %s view never loaded" % view)

    def go(self, fragment, view):
        """Another view of the loaded page (a hash change)."""
        self.js("document.body.dataset.view = ''; location.hash = %s" % js_str(fragment))
        self.wait_view(view)

    def open_queue(self, queue):
        self.go("#/queue/" + urllib.parse.quote(queue, safe=""), "queue")
        assert self.text("q-name") == queue

    def find(self, text):
        self.js("document.body.dataset.view = ''; document.getElementById('find-input').value = %s;"
                "document.getElementById('find-go').click()" % js_str(text))

    def text(self, element_id):
        return self.js("(document.getElementById(%s) || {}).textContent" % js_str(element_id))

    def exists(self, element_id):
        return self.js("!!document.getElementById(%s)" % js_str(element_id))

    def visible(self, element_id):
        return self.js("(e => !!e && e.offsetParent !== null)(document.getElementById(%s))"
                       % js_str(element_id))

    def click(self, element_id):
        self.wait("(e => !!e && !e.disabled && e.offsetParent !== null)(document.getElementById(%s))"
                  % js_str(element_id), message="no enabled, visible #%s" % element_id)
        self.js("document.getElementById(%s).click()" % js_str(element_id))

    def job_row(self, job_id):
        return "document.querySelector('#jobs-table tr[data-job=' + %s + ']')" % js_str(js_str(job_id))

    def select_job(self, job_id):
        self.wait(self.job_row(job_id) + " !== null", message="job %s not listed" % job_id)
        self.js("(b => { b.checked = true; b.dispatchEvent(new Event('change')); })(%s"
                ".querySelector('input[type=checkbox]'))" % self.job_row(job_id))

    def act(self, button_id, confirm=True):
        """Click an action button, answer the confirmation; (the dialog's question, the
        result's dataset and text) once the result is shown."""
        self.js("document.getElementById('action-result').dataset.state = 'idle'")
        self.click(button_id)
        self.wait("document.getElementById('confirm-dialog').open", message="no confirmation asked")
        question = self.text("confirm-text")
        self.click("confirm-ok" if confirm else "confirm-cancel")
        if not confirm:
            return question, None, None
        self.wait("['done', 'error'].includes(document.getElementById('action-result').dataset.state)",
                  timeout=30, message="the action's result never showed")
        data = self.js("Object.assign({}, document.getElementById('action-result').dataset)")
        return question, data, self.text("action-result")

    def screenshot(self, name):
        path = self.shots / name
        self.b.screenshot(path)
        assert path.stat().st_size > 5000
        save(path)
        return path

    def problems(self):
        """Script errors and policy violations the page reported."""
        self.js("0")        # collect the events queued so far
        out = []
        for ev in self.b.events:
            if ev["method"] == "Runtime.exceptionThrown":
                out.append(ev["params"]["exceptionDetails"].get("exception", {}).get("description"))
            elif ev["method"] == "Log.entryAdded" and ev["params"]["entry"]["level"] == "error":
                entry = ev["params"]["entry"]
                if "favicon" not in entry.get("url", ""):
                    out.append(entry["text"])
        return out
