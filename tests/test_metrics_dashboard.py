"""The dashboard page in headless Chromium (Debian's /usr/bin/chromium, driven over the
Chrome DevTools protocol): it shows the workload's queues, updates every second and fits
a phone's width. Screenshots are saved under the test's tmp dir (and copied to
$DISQUE_SCREENSHOT_DIR when set)."""
import os
import time

import pytest

from support.browser import CHROMIUM, Browser, save
from support.slots import queues_on_distinct_workers
from support.waits import wait_until
from metrics_helpers import metrics_node  # noqa: F401

pytestmark = pytest.mark.server
websocket = pytest.importorskip("websocket")


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
