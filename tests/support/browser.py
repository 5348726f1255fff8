"""Headless Chromium driven over the Chrome DevTools protocol (websocket-client): the
dashboard and console tests load the metrics port's pages in it, run JS in the page and
take screenshots (Debian's /usr/bin/chromium)."""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import urllib.request

from support.waits import wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
EVENTS_KEPT = 500


class Browser:
    """One headless Chromium with a fresh profile; `evaluate` runs JS in its page. The
    protocol's events are kept in `events` (the last EVENTS_KEPT)."""

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
        self.events = []
        try:
            self.connect(profile / "DevToolsActivePort")
        except BaseException:
            self.close()
            raise

    def connect(self, port_file):
        import websocket
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
            if "method" in msg:
                self.events.append(msg)
                del self.events[:-EVENTS_KEPT]

    def evaluate(self, expr):
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    def basic_auth(self, password, user="any"):
        """Every request of the page carries HTTP basic credentials (fetch() included)."""
        cred = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        self.call("Network.enable")
        self.call("Network.setExtraHTTPHeaders", headers={"Authorization": "Basic " + cred})

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
    """Copy a screenshot to $DISQUE_SCREENSHOT_DIR when it is set."""
    target = os.environ.get("DISQUE_SCREENSHOT_DIR")
    if target:
        os.makedirs(target, exist_ok=True)
        shutil.copy(path, os.path.join(target, path.name))
