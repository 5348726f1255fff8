"""The dashboard page in headless Chromium (Debian's /usr/bin/chromium, driven over the
Chrome DevTools protocol): it shows the workload's queues, updates every second and fits
a phone's width. Screenshots are saved under the test's tmp dir (and copied to
$DISQUE_SCREENSHOT_DIR when set)."""
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from support.slots import queues_on_distinct_workers
from support.waits import wait_until
from metrics_helpers import metrics_node  # noqa: F401

pytestmark = pytest.mark.server
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
websocket = pytest.importorskip("websocket")


class Browser:
    """One headless Chromium with a fresh profile; `evaluate` runs JS in its page."""

    def __init__(self, tmp_path):
        profile = tmp_path / "chromium-profile"
        shutil.rmtree(profile, ignore_errors=True)          # a stale DevToolsActivePort misleads
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--user-data-dir=%s" % profile, "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", "--window-size=1280,1000", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=open(tmp_path / "chromium.log", "wb"),
            stderr=subprocess.STDOUT, start_new_session=True)
        self.ws = None
        self.ids = itertools.count(1)
        try:
            self.connect(profile / "DevToolsActivePort")
        except BaseException:
            self.close()
            raise

    def connect(self, port_file):
        wait_until(lambda: port_file.exists() and port_file.read_text().strip(), timeout=20,
                   message="chromium did not open its DevTools port")
        self.port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % self.port, timeout=5))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=10,
                                              suppress_origin=True)

    def call(self, method, **params):
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def evaluate(self, expr):
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    def screenshot(self, path):
        # the whole page: capturing beyond the viewport drops the scroll bar, so the page
        # is laid out at the window's full width
        width, height = self.evaluate("[window.innerWidth, document.documentElement.scrollHeight]")
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip=clip)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self):
        if self.ws is not None:
            try:
                self.ws.close()
            except Exception:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)      # chromium's own process group
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def save(path):
    target = os.environ.get("DISQUE_SCREENSHOT_DIR")
    if target:
        shutil.copy(path, os.path.join(target, path.name))


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_dashboard_shows_the_queues_and_updates(metrics_node, tmp_path):
    srv, mport = metrics_node(workers=3)
    r = srv.client()
    queues = queues_on_distinct_workers("orders", nworkers=3) + ["emails", "reports"]
    for i, q in enumerate(queues):
        for _ in range(3 + 4 * i):
            r.execute_command("ADDJOB", q, b"payload", 0)
    got = r.execute_command("GETJOB", "COUNT", 3, "FROM", queues[-1])
    r.execute_command("ACKJOB", *[j[1] for j in got])
    r.execute_command("PAUSE", "emails", "in")
    browser = Browser(tmp_path)
    try:
        browser.call("Page.enable")
        browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                     deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url="http://127.0.0.1:%d/" % mport)
        updates = lambda: int(browser.evaluate("document.body.dataset.updates || 0"))
        wait_until(lambda: updates() >= 2, timeout=15, message="the page never updated")
        shown = browser.evaluate(
            "[...document.querySelectorAll('#queues tbody tr')].map(tr => tr.dataset.queue)")
        assert set(shown) == set(queues)
        cells = lambda q: browser.evaluate(
            "[...document.querySelector('#queues tr[data-queue=\"%s\"]').cells].map(c => c.textContent)" % q)
        assert cells("reports")[1] == str(3 + 4 * 4 - 3)
        assert cells("emails")[7] == "in"
        assert "worker 2" in browser.evaluate("document.querySelector('#workers').textContent")
        assert "this node" in browser.evaluate("document.querySelector('#cluster').textContent")
        # live: new jobs show within a couple of refreshes, with a non-zero input rate
        seen = updates()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            r.execute_command("ADDJOB", "reports", b"payload", 0)
            time.sleep(0.02)
        wait_until(lambda: updates() >= seen + 2 and float(cells("reports")[3] or 0) > 0, timeout=10)
        assert int(cells("reports")[1]) > 16
        shot = tmp_path / "dashboard.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 10000
        save(shot)
        # a phone: no horizontal page scroll (wide tables scroll in their own box)
        browser.call("Emulation.setDeviceMetricsOverride", width=390, height=844,
                     deviceScaleFactor=2, mobile=True)
        wait_until(lambda: updates() >= seen + 3, timeout=10)
        assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        phone = tmp_path / "dashboard-phone.png"
        browser.screenshot(phone)
        save(phone)
    finally:
        browser.close()
