#!/usr/bin/env python3
"""Does the operations console stay responsive on a big cluster? (docs/console.md)

Starts 3 nodes (`--workers 2`, metrics port, requirepass, actions on), fills them with
--queues queues and --jobs jobs in all (REPLICATE 1, spread over the nodes, 100-byte
bodies), then prints:
  * the time of each console API call (median and max of --rounds calls), asked of node 0,
    and the front-end CPU it cost the nodes;
  * in headless Chromium: the page's time to first paint and to its first full queue table,
    and the time of each refresh (fetch start to the table drawn again), over --refreshes
    refreshes, with the main thread's long tasks;
  * QLEN ... CLUSTER's time, against a plain QLEN.
Nothing is asserted: the figures go to docs/console.md.

    python bench/bench_console.py                       # 10,000 queues, 1,000,000 jobs
    python bench/bench_console.py --queues 1000 --jobs 100000
"""
import argparse
import base64
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))   # the Chromium driver

from common.cluster import free_port, start_cluster  # noqa: E402

PW = "bench"
AUTH = "Basic " + base64.b64encode(b"ops:" + PW.encode()).decode()
# recorded in the page before its own script runs: each API fetch's start and end, and
# each time the document changes after an answer
PROBE = """
window.__probe = {fetches: [], mutations: [], longtasks: []};
const realFetch = window.fetch;
window.fetch = function(url, opts) {
  const t0 = performance.now();
  return realFetch.call(this, url, opts).then(r => {
    window.__probe.fetches.push({url: String(url), t0: t0, t1: performance.now()});
    return r;
  });
};
new MutationObserver(() => window.__probe.mutations.push(performance.now()))
  .observe(document, {childList: true, subtree: true, characterData: true});
try {
  new PerformanceObserver(l => l.getEntries().forEach(e => window.__probe.longtasks.push(e.duration)))
    .observe({type: 'longtask', buffered: true});
} catch (e) {}
"""


def fill(clients, queues, jobs, log):
    """`jobs` jobs over `queues` queues, each node its share, in pipelines of 1,000."""
    names = [b"queue-%05d" % i for i in range(queues)]
    t0 = time.monotonic()
    done = 0
    per_node = jobs // len(clients)
    for n, r in enumerate(clients):
        i = 0
        while i < per_node:
            p = r.pipeline(transaction=False)
            for k in range(i, min(per_node, i + 1000)):
                p.execute_command("ADDJOB", names[(k * 7 + n) % queues], b"x" * 90 + b"%010d" % k,
                                  0, "REPLICATE", 1)
            p.execute()
            i += 1000
            done += min(1000, per_node - i + 1000)
            if done % 100000 < 1000:
                log("  %d jobs added (%.0f/s)" % (done, done / (time.monotonic() - t0)))
    return names


def api_times(port, paths, rounds, procs):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for path in paths:
        times, size = [], 0
        cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
        for _ in range(rounds):
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Authorization": AUTH})
            resp = conn.getresponse()
            body = resp.read()
            times.append(time.perf_counter() - t0)
            assert resp.status == 200, (path, resp.status, body[:200])
            if b'"found":false' in body:
                raise RuntimeError("%s: %s" % (path, body))
            size = len(body)
        cpu = sum(p.cpu_times().user + p.cpu_times().system for p in procs) - cpu0
        out.append((path, statistics.median(times) * 1000, max(times) * 1000, size,
                    cpu / rounds * 1000))
    conn.close()
    return out


def browser_times(mport, refreshes, tmp, log):
    from support.browser import Browser
    from support.waits import wait_until
    b = Browser(Path(tmp))
    try:
        b.call("Page.enable")
        b.call("Network.enable")
        b.call("Network.setExtraHTTPHeaders", headers={"Authorization": AUTH})
        b.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)
        t0 = time.monotonic()
        b.call("Page.navigate", url="http://127.0.0.1:%d/console#/queues" % mport)
        wait_until(lambda: b.evaluate("document.querySelectorAll('[data-queue]').length") > 0,
                   timeout=60, message="the queue table never filled")
        first_table = time.monotonic() - t0
        paint = b.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null")
        count = lambda: b.evaluate("window.__probe.fetches.filter(f => f.url.includes('/api/console/queues')).length")
        start = count()
        wait_until(lambda: count() >= start + refreshes, timeout=refreshes * 10 + 30,
                   message="the page stopped refreshing")
        probe = b.evaluate("window.__probe")
        fetches = [f for f in probe["fetches"] if "/api/console/queues" in f["url"]][start:]
        per_refresh = []
        for f in fetches:
            after = [m for m in probe["mutations"] if m >= f["t1"]]
            if after:
                per_refresh.append(after[0] - f["t0"])
        rows = b.evaluate("document.querySelectorAll('[data-queue]').length")
        return {"first_paint_ms": paint, "first_table_s": first_table, "rows": rows,
                "refresh_ms": per_refresh, "fetch_ms": [f["t1"] - f["t0"] for f in fetches],
                "longtasks_ms": probe["longtasks"]}
    finally:
        b.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queues", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--refreshes", type=int, default=10)
    ap.add_argument("--no-browser", action="store_true", help="the API and commands only")
    args = ap.parse_args()
    log = lambda s: print(s, flush=True)
    tmp = tempfile.mkdtemp(prefix="bench-console-")
    mports = [free_port() for _ in range(3)]
    nodes, clients = start_cluster(3, 2, tmp, extra=lambda i: [
        "--metrics-port", str(mports[i]), "--metrics-actions", "yes"])
    try:
        log("filling: %d queues, %d jobs over 3 nodes" % (args.queues, args.jobs))
        names = fill(clients, args.queues, args.jobs, log)
        for r in clients:
            r.execute_command("CONFIG", "SET", "requirepass", PW)
        clients = [type(r)(port=p, password=PW, protocol=2) for r, (p, _) in zip(clients, nodes)]
        procs = [psutil.Process(proc.proc.pid) for _, proc in nodes]
        peek = clients[1].execute_command("QPEEK", names[0], 1)[0]
        some, needle = peek[1].decode(), peek[2][-10:].decode()      # a job of node 1
        paths = ["/api/console/cluster", "/api/console/queues?limit=200",
                 "/api/console/queues?limit=1000", "/api/console/queues?match=queue-0999",
                 "/api/console/queue?name=%s&count=50" % names[0].decode(),
                 "/api/console/queue?name=%s&count=50&start=50&newest=1" % names[0].decode(),
                 "/api/console/job?id=" + quote(some, safe=""),
                 "/api/console/search?queue=%s&text=%s" % (names[0].decode(), needle)]
        log("\nAPI, asked of node 0 (%d calls each; CPU = the 3 front-ends' per call)" % args.rounds)
        log("%-62s %9s %9s %10s %8s" % ("path", "median ms", "max ms", "bytes", "CPU ms"))
        for path, med, mx, size, cpu in api_times(mports[0], paths, args.rounds, procs):
            log("%-62s %9.1f %9.1f %10d %8.1f" % (path[:62], med, mx, size, cpu))
        r = clients[0]
        for form in (["QLEN", names[0]], ["QLEN", names[0], "CLUSTER"],
                     ["QSTAT", names[0], "CLUSTER"], ["QPEEK", names[0], 100, "CLUSTER"]):
            t = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                r.execute_command(*form)
                t.append(time.perf_counter() - t0)
            log("%-40s median %.2f ms" % (" ".join(str(x if not isinstance(x, bytes) else x.decode())
                                                   for x in form), statistics.median(t) * 1000))
        if args.no_browser:
            return
        log("\nChromium (%d refreshes of the queues view)" % args.refreshes)
        res = browser_times(mports[0], args.refreshes, tmp, log)
        log("first contentful paint: %s ms; first full queue table: %.2f s (%d rows)"
            % (round(res["first_paint_ms"]) if res["first_paint_ms"] else "n/a",
               res["first_table_s"], res["rows"]))
        if res["refresh_ms"]:
            log("per refresh (fetch start to table redrawn): median %.0f ms, max %.0f ms"
                % (statistics.median(res["refresh_ms"]), max(res["refresh_ms"])))
            log("of which the fetch: median %.0f ms" % statistics.median(res["fetch_ms"]))
        log("main-thread long tasks (> 50 ms): %d, longest %.0f ms"
            % (len(res["longtasks_ms"]), max(res["longtasks_ms"] or [0])))
        print(json.dumps({k: v for k, v in res.items() if k != "fetch_ms"})[:300])
    finally:
        for _, proc in nodes:
            proc.stop()


if __name__ == "__main__":
    main()
