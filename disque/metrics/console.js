"use strict";
// The operations console (docs/console.md): one page, views chosen by the URL's hash
// (#/cluster, #/queues, #/queue/<name>, #/job/<id>), reading /api/console/* every 2 s.
// Every value from the API reaches the document as text (textContent, text nodes), never
// as HTML; the page's policy runs no script but this file.
(function () {
  const REFRESH_MS = 2000;
  const STALE_MS = 6500;
  const PAGE = 50;
  const START_MAX = 10000;
  const LIST_BODY = 200;
  const SHOW_BODY = 65536;
  const QUEUE_LIMITS = [50, 200, 1000];

  const S = {
    token: null, actions: false, me: null, sessionOk: false,
    nodes: new Map(),           // node id -> {addr, state}
    view: null, gen: 0, busyGen: -1, again: false, lastOk: 0, lastErr: null, refreshes: 0,
    queueFilter: "", queueLimit: 200,
  };

  // ---- small helpers ---------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  // An element: props.text is its text; data-* / aria-* / role go through setAttribute;
  // the others are properties (id, className, href, type, checked, ...). Children given as
  // strings become text nodes.
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") el.textContent = String(v);
      else if (k === "class") el.className = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role") el.setAttribute(k, String(v));
      else el[k] = v;
    }
    for (const c of kids.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  // replaceChildren without the null / false of conditional parts (it would write "null")
  function fill(el, ...kids) {
    el.replaceChildren(...kids.flat().filter((c) => c !== null && c !== undefined && c !== false));
  }
  const setText = (el, t) => { const s = String(t); if (el.textContent !== s) el.textContent = s; };

  const nf = new Intl.NumberFormat("en-US");
  function num(n) { return n === null || n === undefined ? "–" : nf.format(n); }
  function rateText(r) {
    if (r === null || r === undefined) return "–";
    return r < 10 && !Number.isInteger(r) ? r.toFixed(1) : nf.format(Math.round(r));
  }
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  }
  function dur(ms) {
    if (ms === null || ms === undefined || ms < 0) return "–";
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
    if (s < 86400) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }
  const age = (ms) => (ms ? dur(ms) : "–");
  function rate(cur, old, dt) {
    return old === undefined || old === null || dt <= 0 ? null : Math.max(0, (cur - old) / dt);
  }
  function plural(n, one, many) { return num(n) + " " + (n === 1 ? one : (many || one + "s")); }
  function utf8len(s) { return new TextEncoder().encode(s).length; }
  function bodyCut(body, size, limit) { return size > Math.min(limit, utf8len(body || "")); }
  const short = (id) => (id ? String(id).slice(0, 8) : "?");
  function nodeName(id) {
    const n = S.nodes.get(id);
    return n && n.addr ? n.addr : short(id);
  }
  function stateTag(state) {
    const cls = state === "ok" ? "" : (["fail", "pfail", "disconnected"].includes(state) ? " bad" : " warn");
    return h("span", {class: "tag" + cls, text: state});
  }
  function pausedTag(p) {
    if (!p || p === "none") return h("span", {class: "tag none", text: "no"});
    return h("span", {class: "tag warn", text: p === "all" ? "in+out" : p});
  }
  const queueHref = (q) => "#/queue/" + encodeURIComponent(q);
  const jobHref = (id) => "#/job/" + encodeURIComponent(id);
  function kpi(label, value, id) {
    return h("div", {class: "kpi"}, h("div", {class: "v", id: id, text: value}),
             h("div", {class: "l", text: label}));
  }

  class HttpError extends Error {
    constructor(status, why) { super("HTTP " + status + (why ? ": " + why : "")); this.status = status; this.why = why; }
  }

  async function api(path) {
    const r = await fetch(path, {cache: "no-store", credentials: "same-origin"});
    if (!r.ok) throw new HttpError(r.status, (await r.text()).trim());
    return r.json();
  }

  async function post(body) {
    const r = await fetch("/api/console/action", {
      method: "POST", cache: "no-store", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Console-Token": S.token || ""},
      body: JSON.stringify(body)});
    const raw = await r.text();
    let data = null;
    try { data = JSON.parse(raw); } catch (e) { data = null; }
    if (!r.ok) {
      let why = raw.trim() || r.statusText;
      if (data && typeof data === "object") {
        const errs = [].concat(data.error || [], data.errors || []);
        why = errs.length ? errs.map(String).join("; ") : why;
      }
      if (r.status === 403 && /token/.test(why)) session();   // a restarted node: renew
      throw new HttpError(r.status, why);
    }
    return data || {results: [], errors: []};
  }

  // ---- header: session, status, partial answers --------------------------------------

  async function session() {
    try {
      const s = await api("/api/console/session");
      S.token = s.token;
      S.actions = !!s.actions;
      S.me = s.node;
      S.sessionOk = true;
      document.body.dataset.actions = S.actions ? "on" : "off";
      $("readonly").hidden = S.actions;
      showNode();
    } catch (e) {
      S.sessionOk = false;
      S.lastErr = "session: " + e.message;
      showStatus();
    }
  }

  function showNode() {
    if (!S.me) return;
    const n = S.nodes.get(S.me);
    setText($("node-info"), (n && n.addr ? n.addr + " · " : "") + short(S.me));
  }

  function learnNodes(list) {
    for (const n of list) {
      S.nodes.set(n.id, {addr: n.addr, state: n.state});
    }
    showNode();
  }

  async function refreshNodes() {
    try { learnNodes((await api("/api/console/cluster")).nodes); } catch (e) { /* shown elsewhere */ }
  }

  function showStatus() {
    const st = $("status");
    const now = Date.now();
    const stale = S.lastErr !== null || (S.lastOk && now - S.lastOk > STALE_MS);
    let t = S.lastOk ? "updated " + new Date(S.lastOk).toLocaleTimeString() : "connecting…";
    if (stale) t = (S.lastOk ? "stale: last update " + new Date(S.lastOk).toLocaleTimeString() : "no answer")
                   + (S.lastErr ? " (" + S.lastErr + ")" : "");
    setText(st, t);
    st.className = stale ? "dim stale" : "dim";
    document.body.dataset.stale = stale ? "1" : "0";
  }

  function showPartial(resp) {
    const w = $("partial-warning");
    if (resp && typeof resp.nodes_asked === "number" && resp.nodes_answered < resp.nodes_asked) {
      setText(w, resp.nodes_answered + " of " + resp.nodes_asked +
              " nodes answered: the figures below miss the others");
      w.hidden = false;
    } else {
      w.hidden = true;
    }
  }

  // ---- confirmation and results -------------------------------------------------------

  let confirmDone = null;
  function confirmDialog(text) {
    const d = $("confirm-dialog");
    setText($("confirm-text"), text);
    if (confirmDone) confirmDone(false);
    return new Promise((resolve) => {
      confirmDone = (ok) => {
        confirmDone = null;
        if (d.open) d.close();
        resolve(ok);
      };
      if (typeof d.showModal === "function") d.showModal(); else d.setAttribute("open", "");
      $("confirm-cancel").focus();
    });
  }

  function showResult(state, title, lines, extra) {
    const box = $("action-result");
    box.dataset.state = state;
    for (const k of ["done", "jobs", "errors", "action"]) delete box.dataset[k];
    Object.assign(box.dataset, extra || {});
    const what = h("div", {class: "what"}, h("div", {id: "action-result-text", text: title}));
    if (lines && lines.length) what.appendChild(h("ul", {class: "errors"}, lines.map((l) => h("li", null, l))));
    box.replaceChildren(what, h("button", {type: "button", class: "close", text: "×", title: "dismiss",
                                            "aria-label": "dismiss", on: {click: () => { box.hidden = true; }}}));
    box.hidden = false;
  }

  const VERB = {enqueue: "requeued", nack: "nacked", delete: "deleted", retry: "retried",
                retry_all: "retried", delete_all: "deleted"};

  // desc: {confirm, title, requests: [action bodies], after(summary)}
  async function runAction(desc) {
    if (!S.actions) return;
    if (!(await confirmDialog(desc.confirm))) return;
    showResult("pending", desc.title + ": working…");
    const settled = await Promise.allSettled(desc.requests.map(post));
    const sum = {jobs: 0, done: 0, errors: [], states: [], moved: {}, nodes: 0, action: desc.requests[0].action};
    for (const s of settled) {
      if (s.status === "rejected") { sum.errors.push(s.reason.message); continue; }
      for (const r of s.value.results || []) {
        sum.nodes++;
        sum.jobs += r.jobs || 0;
        sum.done += r.done || 0;
        if ("state" in r) sum.states.push(r.state);
        Object.assign(sum.moved, r.requeued_as || {});
        for (const e of r.errors || []) sum.errors.push("node " + nodeName(r.node) + ": " + e);
      }
      for (const e of s.value.errors || []) sum.errors.push(typeof e === "string" ? e : JSON.stringify(e));
      const v = s.value;
      if (typeof v.nodes_asked === "number" && v.nodes_answered < v.nodes_asked) {
        sum.errors.push("only " + v.nodes_answered + " of " + v.nodes_asked +
                        " nodes answered: the jobs of the others were not touched");
      }
    }
    const failed = settled.every((s) => s.status === "rejected");
    let text;
    let bad = failed || (sum.errors.length > 0 && !sum.done);
    if (sum.action === "pause") {
      const st = sum.states.find((x) => x) || null;
      bad = st === null;
      text = st === null ? desc.title + ": failed"
        : desc.title + ": " + (st === "none" ? "resumed (not paused) on every node" : "paused " + st + " on every node");
    } else {
      text = desc.title + ": " + VERB[sum.action] + " " + num(sum.done) + " of " + num(sum.jobs) +
             (desc.requests.some((b) => !b.node) ? " (" + plural(sum.nodes, "node") + " answered)" : "");
    }
    const lines = sum.errors.slice(0, 20);
    const moved = Object.entries(sum.moved);
    const box = () => $("action-result");
    showResult(bad ? "error" : "done",
               text, lines, {done: String(sum.done), jobs: String(sum.jobs), errors: String(sum.errors.length),
                             action: sum.action});
    if (moved.length) {
      const ul = h("ul", {class: "moved"}, moved.map(([o, n]) => h("li", null, short(o) + "… is now ",
        h("a", {href: jobHref(n), class: "mono", text: n}))));
      box().querySelector(".what").appendChild(ul);
    }
    if (desc.after) desc.after(sum);
    refreshNow();
  }

  // ---- views ---------------------------------------------------------------------------

  const clusterView = {
    name: "cluster", prev: null,
    mount(root) {
      this.kpis = h("div", {class: "kpis"});
      this.tbody = h("tbody");
      root.appendChild(h("section", null,
        h("h2", null, "Cluster", this.count = h("span", {class: "dim"})),
        this.kpis,
        h("div", {class: "scroll"}, h("table", {id: "cluster-table"},
          h("thead", null, h("tr", null, ["address", "ID", "state", "queued", "jobs", "queues", "added/s",
            "acked/s", "clients", "memory", "workers", "uptime"].map((t, i) =>
            h("th", {text: t, class: ([1, 5, 8, 10, 11].includes(i) ? "hide-s " : "") + (i < 3 ? "l" : "")})))),
          this.tbody))));
      this.top = h("tbody");
      root.appendChild(h("section", null,
        h("h2", null, "Longest queues", h("a", {href: "#/queues", class: "dim", text: "all queues"})),
        h("div", {class: "scroll"}, h("table", {id: "top-queues"},
          h("thead", null, h("tr", null, ["queue", "length", "oldest", "consumers", "paused", "nodes", "dead letters"]
            .map((t, i) => h("th", {text: t, class: i === 3 || i === 5 ? "hide-s" : ""})))),
          this.top))));
    },
    async refreshTop(live) {
      const data = await api("/api/console/queues?limit=8");
      if (!live()) return;
      fill(this.top, data.queues.map((q) => h("tr", {"data-top-queue": q.queue},
        h("td", null, h("a", {href: queueHref(q.queue), text: q.queue}),
          q.dead_letter ? h("span", {class: "tag info", text: "dead letters"}) : null),
        h("td", {text: num(q.len)}), h("td", {text: age(q.oldest_ms)}),
        h("td", {class: "hide-s", text: num(q.blocked)}), h("td", null, pausedTag(q.paused)),
        h("td", {class: "hide-s", text: num(q.nodes)}),
        h("td", null, q.dead_letters ? h("a", {href: queueHref(q.queue + ":dead"), text: num(q.dead_letters)}) : "–"))));
      if (!data.queues.length) fill(this.top, h("tr", null, h("td", {class: "empty", colSpan: 7, text: "no queues"})));
    },
    async refresh(live) {
      const top = this.refreshTop(live).catch(() => null);   // the nodes' table matters more
      const data = await api("/api/console/cluster");
      await top;
      if (!live()) return;
      learnNodes(data.nodes);
      showPartial(data);
      const now = Date.now();
      const prev = this.prev;
      const dt = prev ? (now - prev.t) / 1000 : 0;
      const tot = {queued: 0, jobs: 0, added: null, acked: null, clients: 0, rss: 0};
      const frag = document.createDocumentFragment();
      const nodes = data.nodes.slice().sort((a, b) => (b.myself - a.myself) || a.addr.localeCompare(b.addr));
      for (const n of nodes) {
        const f = n.figures;
        const o = prev && prev.figs.get(n.id);
        const added = f ? rate(f.added, o && o.added, dt) : null;
        const acked = f ? rate(f.acked, o && o.acked, dt) : null;
        if (f) {
          tot.queued += f.queued; tot.jobs += f.jobs; tot.clients += f.clients; tot.rss += f.rss;
          if (added !== null) tot.added = (tot.added || 0) + added;
          if (acked !== null) tot.acked = (tot.acked || 0) + acked;
        }
        const v = (k, fn) => (f ? (fn || num)(f[k]) : "–");
        frag.appendChild(h("tr", {"data-node": n.id},
          h("td", null, n.addr, n.myself ? h("span", {class: "dim", text: " (this node)"}) : null),
          h("td", {class: "mono l hide-s", text: short(n.id), title: n.id}),
          h("td", {class: "l"}, stateTag(n.state), n.answered ? null : " ",
            n.answered ? null : h("span", {class: "tag bad", text: "no answer"})),
          h("td", {text: v("queued")}), h("td", {text: v("jobs")}), h("td", {class: "hide-s", text: v("queues")}),
          h("td", {text: rateText(added)}), h("td", {text: rateText(acked)}),
          h("td", {class: "hide-s", text: v("clients")}), h("td", {text: v("rss", bytes)}),
          h("td", {class: "hide-s", text: v("workers")}), h("td", {class: "hide-s", text: v("uptime_s", (s) => dur(s * 1000))})));
      }
      this.tbody.replaceChildren(frag);
      setText(this.count, "(" + data.nodes_answered + " of " + data.nodes_asked + " nodes answered)");
      this.kpis.replaceChildren(
        kpi("nodes", num(data.nodes.length)), kpi("queued jobs", num(tot.queued)),
        kpi("jobs held (copies)", num(tot.jobs)), kpi("added / s", rateText(tot.added)),
        kpi("acked / s", rateText(tot.acked)), kpi("clients", num(tot.clients)), kpi("memory (RSS)", bytes(tot.rss)));
      this.prev = {t: now, figs: new Map(data.nodes.filter((n) => n.figures).map((n) => [n.id, n.figures]))};
    },
  };

  const queuesView = {
    name: "queues", prev: null, rows: new Map(),
    mount(root) {
      this.rows = new Map();
      this.tbody = h("tbody");
      let timer = null;
      const filter = h("input", {id: "queue-filter", type: "search", value: S.queueFilter, autocomplete: "off",
                                 placeholder: "filter: part of the name", "aria-label": "filter queues",
                                 on: {input: () => {
                                   clearTimeout(timer);
                                   timer = setTimeout(() => { S.queueFilter = filter.value; refreshNow(); }, 250);
                                 }}});
      const limit = h("select", {id: "queue-limit", "aria-label": "rows",
                                 on: {change: () => { S.queueLimit = +limit.value; refreshNow(); }}},
                      QUEUE_LIMITS.map((n) => h("option", {value: String(n), text: "longest " + n, selected: n === S.queueLimit})));
      root.appendChild(h("section", null,
        h("h2", null, "Queues", this.count = h("span", {class: "dim", id: "queues-count"})),
        h("div", {class: "toolbar"}, filter, limit),
        h("div", {class: "scroll"}, h("table", {id: "queues-table"},
          h("thead", null, h("tr", null, ["queue", "length", "spilled", "in/s", "out/s", "oldest", "consumers",
            "paused", "nodes", "dead letters"].map((t, i) =>
            h("th", {text: t, class: [2, 6, 8].includes(i) ? "hide-s" : ""})))),
          this.tbody))));
      filter.focus();
    },
    row(name) {
      let r = this.rows.get(name);
      if (r) return r;
      const c = [];
      for (let i = 0; i < 10; i++) c.push(h("td", {class: [2, 6, 8].includes(i) ? "hide-s" : ""}));
      c[0].appendChild(h("a", {href: queueHref(name), text: name}));
      r = {tr: h("tr", {"data-queue": name}, c), c, paused: null, dead: null};
      this.rows.set(name, r);
      return r;
    },
    async refresh(live) {
      const q = "/api/console/queues?limit=" + S.queueLimit + "&match=" + encodeURIComponent(S.queueFilter);
      const data = await api(q);
      if (!live()) return;
      const t0 = performance.now();
      showPartial(data);
      const now = Date.now();
      const prev = this.prev;
      const dt = prev ? (now - prev.t) / 1000 : 0;
      const seen = new Set();
      const order = [];
      for (const q of data.queues) {
        const r = this.row(q.queue);
        seen.add(q.queue);
        const o = prev && prev.q.get(q.queue);
        const c = r.c;
        setText(c[1], num(q.len));
        setText(c[2], num(q.spilled));
        setText(c[3], rateText(rate(q.jobs_in, o && o.jobs_in, dt)));
        setText(c[4], rateText(rate(q.jobs_out, o && o.jobs_out, dt)));
        setText(c[5], age(q.oldest_ms));
        setText(c[6], num(q.blocked));
        if (r.paused !== q.paused) { c[7].replaceChildren(pausedTag(q.paused)); r.paused = q.paused; }
        c[7].title = (q.paused_on || []).map(([id, st]) => nodeName(id) + ": " + st).join(", ");
        setText(c[8], num(q.nodes));
        const dead = q.dead_letters || 0;
        if (r.dead !== dead) {
          c[9].replaceChildren(dead ? h("a", {href: queueHref(q.queue + ":dead"), text: num(dead)}) : "–");
          r.dead = dead;
        }
        r.tr.classList.toggle("deadq", !!q.dead_letter);
        order.push(r.tr);
      }
      for (const name of [...this.rows.keys()]) if (!seen.has(name)) this.rows.delete(name);
      const frag = document.createDocumentFragment();
      for (const tr of order) frag.appendChild(tr);
      if (!order.length) frag.appendChild(h("tr", null, h("td", {class: "empty", colSpan: 10,
        text: S.queueFilter ? "no queue name holds “" + S.queueFilter + "”" : "no queues"})));
      this.tbody.replaceChildren(frag);
      setText(this.count, "(" + num(data.total) + (S.queueFilter ? " matching" : "") + ", " +
              num(data.queues.length) + " longest shown)");
      this.prev = {t: now, q: new Map(data.queues.map((q) => [q.queue, q]))};
      document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);   // the DOM's share
    },
  };

  function actionButton(id, label, cls, onclick) {
    return h("button", {id, type: "button", class: cls || "", text: label, on: {click: onclick}});
  }

  const queueView = {
    name: "queue",
    mount(root, name) {
      this.name_ = name;
      this.start = 0;
      this.newest = false;
      this.selected = new Set();
      this.jobs = [];
      this.len = 0;
      this.prev = null;
      this.info = null;
      const ro = !S.actions;
      this.figs = h("div", {class: "kpis", id: "q-figures"});
      this.deadTag = h("span", {class: "tag info", text: "dead-letter queue", hidden: true});
      this.pausedNow = h("span", {id: "q-paused"});
      const pauseBar = ro ? null : h("div", {class: "toolbar", id: "pause-controls"},
        h("span", {class: "dim", text: "Pause:"}),
        actionButton("act-pause-in", "pause in", "", () => this.pause("in")),
        actionButton("act-pause-out", "pause out", "", () => this.pause("out")),
        actionButton("act-pause-all", "pause all", "", () => this.pause("all")),
        actionButton("act-resume", "resume", "", () => this.pause("none")),
        h("span", {class: "dim"}, "now: ", this.pausedNow));
      this.deadBar = ro ? null : h("div", {class: "toolbar", id: "dead-controls", hidden: true},
        h("span", {class: "dim", text: "Every job of this dead-letter queue, on every node:"}),
        this.retryAll = actionButton("act-retry-all", "Retry all", "primary", () => this.bulkQueue("retry_all")),
        actionButton("act-delete-all", "Delete all", "danger", () => this.bulkQueue("delete_all")));
      // jobs table
      this.selectAll = ro ? null : h("input", {type: "checkbox", id: "select-all", "aria-label": "select all shown",
        on: {change: () => {
          for (const j of this.jobs) if (this.selectAll.checked) this.selected.add(j.id); else this.selected.delete(j.id);
          this.renderJobs();
        }}});
      this.tbody = h("tbody");
      this.selCount = h("span", {class: "dim", id: "sel-count"});
      this.retryBtn = ro ? null : actionButton("act-retry", "Retry", "primary", () => this.bulkJobs("retry"));
      const bulk = ro ? [] : [this.selCount,
        actionButton("act-requeue", "Requeue", "", () => this.bulkJobs("enqueue")),
        actionButton("act-nack", "NACK", "", () => this.bulkJobs("nack")),
        this.retryBtn,
        actionButton("act-delete", "Delete", "danger", () => this.bulkJobs("delete"))];
      this.pageInfo = h("span", {class: "dim", id: "page-info"});
      this.prevBtn = h("button", {type: "button", id: "page-prev", text: "‹ prev",
        on: {click: () => { this.start = Math.max(0, this.start - PAGE); this.reload(); }}});
      this.nextBtn = h("button", {type: "button", id: "page-next", text: "next ›",
        on: {click: () => { this.start = Math.min(START_MAX, this.start + PAGE); this.reload(); }}});
      const newest = h("input", {type: "checkbox", id: "newest",
        on: {change: () => { this.newest = newest.checked; this.start = 0; this.reload(); }}});
      // body search
      const searchText = h("input", {type: "search", id: "search-text", placeholder: "text in the job bodies",
        autocomplete: "off", "aria-label": "search bodies",
        on: {keydown: (e) => { if (e.key === "Enter") this.search(searchText.value); }}});
      this.searchOut = h("div", {id: "search-results"});
      root.appendChild(h("section", null,
        h("h2", null, "Queue", h("span", {class: "mono", id: "q-name", text: name}), this.deadTag,
          h("a", {href: "#/queues", class: "dim", text: "all queues"})),
        this.figs, pauseBar, this.deadBar));
      root.appendChild(h("section", null,
        h("h2", null, "Jobs", h("span", {class: "dim", id: "jobs-count"})),
        h("div", {class: "toolbar"}, this.prevBtn, this.nextBtn, this.pageInfo,
          h("label", null, newest, "newest first"), h("span", {class: "sep"}), ...bulk),
        h("div", {class: "scroll"}, h("table", {id: "jobs-table"},
          h("thead", null, h("tr", null, ro ? null : h("th", {class: "chk"}, this.selectAll),
            ["job ID", "state", "age", "deliveries", "nacks", "body", "node", "from"].map((t, i) =>
              h("th", {text: t, class: [3, 4, 6, 7].includes(i) ? "hide-s l" : "l"})))),
          this.tbody))));
      root.appendChild(h("section", null,
        h("h2", null, "Search the bodies"),
        h("div", {class: "toolbar"}, searchText,
          h("button", {type: "button", id: "search-go", text: "Search",
                       on: {click: () => this.search(searchText.value)}})),
        this.searchOut));
    },
    get isDead() {
      return this.name_.endsWith(":dead") || this.jobs.some((j) => j.dead_lettered_from) ||
             !!(this.info && this.info.dead_letter);
    },
    get origin() {
      const j = this.jobs.find((x) => x.dead_lettered_from);
      if (j) return j.dead_lettered_from;
      return this.name_.endsWith(":dead") ? this.name_.slice(0, -5) : null;
    },
    reload() { this.selected.clear(); refreshNow(); },
    async refresh(live) {
      const name = this.name_;
      const [page, list] = await Promise.all([
        api("/api/console/queue?name=" + encodeURIComponent(name) + "&start=" + this.start + "&count=" + PAGE +
            "&newest=" + (this.newest ? 1 : 0)),
        api("/api/console/queues?limit=1000&match=" + encodeURIComponent(name)).catch(() => null)]);
      if (!live()) return;
      showPartial(page.nodes_answered < page.nodes_asked ? page : list);
      const now = Date.now();
      this.info = list ? list.queues.find((q) => q.queue === name) || null : null;
      this.len = page.len;
      this.jobs = page.jobs;
      const ids = new Set(this.jobs.map((j) => j.id));
      for (const id of [...this.selected]) if (!ids.has(id)) this.selected.delete(id);
      this.renderFigures(now);
      this.renderJobs();
    },
    renderFigures(now) {
      const q = this.info;
      const o = this.prev;
      const dt = o ? (now - o.t) / 1000 : 0;
      const rin = q && o ? rate(q.jobs_in, o.jobs_in, dt) : null;
      const rout = q && o ? rate(q.jobs_out, o.jobs_out, dt) : null;
      this.prev = q ? {t: now, jobs_in: q.jobs_in, jobs_out: q.jobs_out} : null;
      const paused = q ? q.paused : "none";
      const dead = q ? q.dead_letters : 0;
      fill(this.figs,
        kpi("length", num(this.len), "q-len"), kpi("spilled", q ? num(q.spilled) : "–"),
        kpi("in / s", rateText(rin)), kpi("out / s", rateText(rout)),
        kpi("oldest job", q ? age(q.oldest_ms) : "–"), kpi("consumers blocked", q ? num(q.blocked) : "–"),
        h("div", {class: "kpi"}, h("div", {class: "v"}, pausedTag(paused)), h("div", {class: "l", text: "paused"})),
        kpi("nodes holding it", q ? num(q.nodes) : "–"),
        this.isDead ? null : h("div", {class: "kpi"}, h("div", {class: "v"},
          dead ? h("a", {href: queueHref(this.name_ + ":dead"), text: num(dead)}) : "0"),
          h("div", {class: "l", text: "dead letters"})));
      if (this.pausedNow.dataset.paused !== paused) {
        this.pausedNow.dataset.paused = paused;
        this.pausedNow.replaceChildren(pausedTag(paused));
        if (q && q.paused_on.length) this.pausedNow.appendChild(h("span", {class: "dim",
          text: " on " + plural(q.paused_on.length, "node")}));
      }
      this.deadTag.hidden = !this.isDead;
      if (this.deadBar) {
        this.deadBar.hidden = !this.isDead;
        const origin = this.origin;
        setText(this.retryAll, origin ? "Retry all in " + origin : "Retry all");
      }
    },
    renderJobs() {
      const ro = !S.actions;
      const frag = document.createDocumentFragment();
      const dead = this.isDead;
      for (const j of this.jobs) {
        const sel = this.selected.has(j.id);
        const box = ro ? null : h("input", {type: "checkbox", checked: sel, "aria-label": "select " + j.id,
          on: {change: (e) => {
            if (e.target.checked) this.selected.add(j.id); else this.selected.delete(j.id);
            e.target.closest("tr").classList.toggle("selected", e.target.checked);
            this.renderSelection();
          }}});
        const cut = bodyCut(j.body, j.body_size, LIST_BODY);
        frag.appendChild(h("tr", {"data-job": j.id, "data-node": j.node, class: sel ? "selected" : ""},
          ro ? null : h("td", {class: "chk"}, box),
          h("td", {class: "id"}, h("a", {href: jobHref(j.id), class: "mono", text: j.id})),
          h("td", {class: "l", text: j.state}),
          h("td", {class: "l", text: age(j.age_ms)}),
          h("td", {class: "l hide-s", text: num(j.deliveries)}),
          h("td", {class: "l hide-s", text: num(j.nacks)}),
          h("td", {class: "body mono", title: cut ? "cut: " + num(j.body_size) + " bytes in all" : "",
                   text: j.body + (cut ? " …" : "")}),
          h("td", {class: "l hide-s", text: nodeName(j.node), title: j.node}),
          h("td", {class: "l hide-s"}, j.dead_lettered_from
            ? h("a", {href: queueHref(j.dead_lettered_from), text: j.dead_lettered_from}) : "–")));
      }
      if (!this.jobs.length) frag.appendChild(h("tr", null, h("td", {class: "empty", colSpan: 9,
        text: this.start ? "no jobs on this page" : "no queued jobs"})));
      this.tbody.replaceChildren(frag);
      const first = this.jobs.length ? this.start + 1 : 0;
      setText(this.pageInfo, num(first) + "–" + num(this.start + this.jobs.length) + " of " + num(this.len));
      setText($("jobs-count"), "(" + num(this.len) + " queued" + (dead ? ", dead-lettered" : "") + ")");
      this.prevBtn.disabled = this.start === 0;
      this.nextBtn.disabled = this.start + PAGE >= this.len || this.start + PAGE > START_MAX;
      this.renderSelection();
    },
    renderSelection() {
      if (!S.actions) return;
      const n = this.selected.size;
      setText(this.selCount, n ? num(n) + " selected" : "select jobs for:");
      for (const id of ["act-requeue", "act-nack", "act-delete", "act-retry"]) $(id).disabled = n === 0;
      this.selectAll.checked = n > 0 && this.jobs.every((j) => this.selected.has(j.id));
      const origins = new Set(this.jobs.filter((j) => this.selected.has(j.id) && j.dead_lettered_from)
                                       .map((j) => j.dead_lettered_from));
      const origin = origins.size === 1 ? [...origins][0] : (origins.size ? null : this.origin);
      this.retryBtn.hidden = !this.isDead;
      setText(this.retryBtn, origin ? "Retry in " + origin : "Retry in their queues");
    },
    pause(mode) {
      const q = this.name_;
      const what = {in: "Pause input of queue " + q + " on every node: ADDJOB to it will be refused?",
                    out: "Pause output of queue " + q + " on every node: GETJOB will get nothing from it?",
                    all: "Pause input and output of queue " + q + " on every node?",
                    none: "Resume queue " + q + " on every node (not paused)?"}[mode];
      runAction({confirm: what, title: (mode === "none" ? "Resume " : "Pause " + mode + " ") + q,
                 requests: [{action: "pause", queue: q, mode}]});
    },
    bulkQueue(action) {
      const q = this.name_;
      const n = num(this.len);
      const origin = this.origin;
      const text = action === "delete_all"
        ? "Delete " + n + " jobs of queue " + q + " on every node? They are removed for good (ACKJOB)."
        : "Retry " + n + " jobs of queue " + q + " on every node: each is added again to " +
          (origin || "the queue it came from") + " with a new ID and removed from " + q + "?";
      runAction({confirm: text, title: (action === "delete_all" ? "Delete all of " : "Retry all of ") + q,
                 requests: [{action, queue: q}], after: () => { this.start = 0; this.selected.clear(); }});
    },
    bulkJobs(action) {
      const jobs = this.jobs.filter((j) => this.selected.has(j.id));
      if (!jobs.length) return;
      const byNode = new Map();
      for (const j of jobs) {
        if (!byNode.has(j.node)) byNode.set(j.node, []);
        byNode.get(j.node).push(j.id);
      }
      const n = plural(jobs.length, "selected job");
      const q = this.name_;
      const origins = [...new Set(jobs.map((j) => j.dead_lettered_from).filter(Boolean))];
      const text = {
        enqueue: "Requeue " + n + " of queue " + q + " now (ENQUEUE)?",
        nack: "NACK " + n + " of queue " + q + ": give them back, their nack counters grow?",
        delete: "Delete " + n + " of queue " + q + " on every node holding a copy (ACKJOB)?",
        retry: "Retry " + n + " of queue " + q + ": each is added again to " +
               (origins.length ? origins.join(", ") : "its queue") + " with a new ID and removed from " + q + "?",
      }[action];
      const label = {enqueue: "Requeue", nack: "NACK", delete: "Delete", retry: "Retry"}[action];
      runAction({confirm: text, title: label + " " + n + " of " + q,
                 requests: [...byNode].map(([node, ids]) => ({action, ids, node})),
                 after: () => this.selected.clear()});
    },
    async search(text) {
      const out = this.searchOut;
      if (!text) { out.replaceChildren(); return; }
      out.replaceChildren(h("p", {class: "dim", text: "searching…"}));
      try {
        const r = await api("/api/console/search?limit=100&queue=" + encodeURIComponent(this.name_) +
                            "&text=" + encodeURIComponent(text));
        const rows = r.jobs.map((j) => h("tr", {"data-match": j.id},
          h("td", {class: "id"}, h("a", {href: jobHref(j.id), class: "mono", text: j.id})),
          h("td", {class: "l", text: age(j.age_ms)}),
          h("td", {class: "body mono", text: j.body + (bodyCut(j.body, j.body_size, LIST_BODY) ? " …" : "")}),
          h("td", {class: "l hide-s", text: nodeName(j.node)})));
        fill(out,
          h("p", {class: "dim", id: "search-summary", text: plural(r.jobs.length, "match", "matches") + " for “" + text +
            "” in " + plural(r.scanned, "job") + " scanned" + (r.complete ? "" : " (not every job was scanned)") +
            (r.nodes_answered < r.nodes_asked ? "; " + r.nodes_answered + " of " + r.nodes_asked + " nodes answered" : "")}),
          rows.length ? h("div", {class: "scroll"}, h("table", {id: "search-table"},
            h("thead", null, h("tr", null, ["job ID", "age", "body", "node"].map((t, i) =>
              h("th", {text: t, class: i === 3 ? "l hide-s" : "l"})))),
            h("tbody", null, rows))) : null);
      } catch (e) {
        out.replaceChildren(h("p", {class: "note", text: "search failed: " + e.message}));
      }
    },
  };

  const SHOW_ORDER = ["id", "queue", "state", "repl", "ttl", "ctime", "delay", "retry", "nacks",
    "additional-deliveries", "nodes-delivered", "nodes-confirmed", "next-requeue-within",
    "next-awake-within", "retry-interval", "backoff", "max-deliveries", "deadletter",
    "dead-lettered-from", "body_size"];

  function fieldValue(k, v) {
    if (v === null || v === undefined || v === "") return "–";
    if (k === "nodes-delivered" || k === "nodes-confirmed") {
      return Array.isArray(v) && v.length ? v.map((id) => nodeName(id) + " (" + short(id) + ")").join(", ") : "none";
    }
    if (k === "ctime" && typeof v === "number") {
      const ms = v / 1e6;
      return new Date(ms).toLocaleString() + " (" + dur(Date.now() - ms) + " ago)";
    }
    if ((k === "ttl" || k === "delay" || k === "retry" || k === "retry-interval") && typeof v === "number") {
      return num(v) + " s" + (v >= 60 ? " (" + dur(v * 1000) + ")" : "");
    }
    if ((k === "next-requeue-within" || k === "next-awake-within") && typeof v === "number") return dur(v);
    if (k === "body_size") return num(v) + " bytes";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  const jobView = {
    name: "job",
    mount(root, id) {
      this.id = id;
      this.job = null;
      this.holder = h("div", {class: "holder", id: "job-holder"});
      this.fields = h("tbody");
      this.cut = h("p", {class: "note", id: "job-body-cut", hidden: true});
      this.body = h("pre", {id: "job-body"});
      this.bar = S.actions ? h("div", {class: "toolbar", id: "job-actions", hidden: true},
        actionButton("act-requeue", "Requeue", "", () => this.act("enqueue")),
        actionButton("act-nack", "NACK", "", () => this.act("nack")),
        this.retryBtn = actionButton("act-retry", "Retry", "primary", () => this.act("retry")),
        actionButton("act-delete", "Delete", "danger", () => this.act("delete"))) : null;
      this.bodySection = h("section", {hidden: true}, h("h2", null, "Body"), this.cut, this.body);
      root.appendChild(h("section", null,
        h("h2", null, "Job", h("span", {class: "mono", id: "job-id", text: id})),
        this.holder, this.bar,
        h("div", {class: "scroll"}, h("table", {class: "fields", id: "job-fields"}, this.fields))));
      root.appendChild(this.bodySection);
    },
    async refresh(live) {
      const r = await api("/api/console/job?id=" + encodeURIComponent(this.id));
      if (!live()) return;
      showPartial(r.found ? null : r);
      if (!r.found) {
        this.job = null;
        this.holder.dataset.found = "0";
        delete this.holder.dataset.node;
        this.holder.replaceChildren(h("span", {class: "tag warn", text: "not found"}),
          " on any of the " + plural(r.nodes_answered, "node") + " that answered" +
          (r.routed_to ? "; its ID names node " + nodeName(r.routed_to) + " (" + short(r.routed_to) + ")" : "") +
          ": acknowledged, expired, or a wrong ID");
        this.fields.replaceChildren();
        if (this.bar) this.bar.hidden = true;
        this.bodySection.hidden = true;
        return;
      }
      const j = r.job;
      this.job = j;
      this.node = r.node;
      this.holder.dataset.found = "1";
      this.holder.dataset.node = r.node;
      fill(this.holder, "Held by node ", h("strong", {text: nodeName(r.node)}),
        h("span", {class: "mono dim", text: " (" + r.node + ")"}),
        r.routed_to && r.routed_to !== r.node
          ? h("span", {class: "dim", text: "; created on " + nodeName(r.routed_to) + ", which no longer has it"}) : null,
        r.node === S.me ? h("span", {class: "dim", text: " — this node"}) : null);
      const keys = SHOW_ORDER.filter((k) => k in j).concat(Object.keys(j).filter((k) => !SHOW_ORDER.includes(k) && k !== "body"));
      this.fields.replaceChildren(...keys.map((k) => h("tr", {"data-field": k},
        h("td", {text: k}),
        h("td", {class: k === "id" ? "mono" : ""},
          (k === "queue" || k === "dead-lettered-from" || k === "deadletter") && j[k]
            ? h("a", {href: queueHref(j[k]), text: j[k]}) : fieldValue(k, j[k])))));
      const body = j.body || "";
      if (this.body.textContent !== body) this.body.textContent = body;
      const cut = bodyCut(body, j.body_size, SHOW_BODY);
      this.cut.hidden = !cut;
      setText(this.cut, "body cut: " + num(j.body_size) + " bytes in all, the first " + num(Math.min(SHOW_BODY, j.body_size)) + " shown");
      this.bodySection.hidden = false;
      if (this.bar) {
        this.bar.hidden = false;
        const origin = j["dead-lettered-from"];
        this.retryBtn.hidden = !origin;
        if (origin) setText(this.retryBtn, "Retry in " + origin);
      }
    },
    act(action) {
      const j = this.job;
      if (!j) return;
      const origin = j["dead-lettered-from"];
      const text = {
        enqueue: "Requeue job " + j.id + " of queue " + j.queue + " now (ENQUEUE)?",
        nack: "NACK job " + j.id + " of queue " + j.queue + ": give it back, its nack counter grows?",
        delete: "Delete job " + j.id + " of queue " + j.queue + " on every node holding a copy (ACKJOB)?",
        retry: "Retry job " + j.id + ": add it again to queue " + origin + " with a new ID, and remove it from " + j.queue + "?",
      }[action];
      const label = {enqueue: "Requeue", nack: "NACK", delete: "Delete", retry: "Retry"}[action];
      runAction({confirm: text, title: label + " job " + j.id, requests: [{action, ids: [j.id], node: this.node}]});
    },
  };

  // ---- routing and the refresh loop ----------------------------------------------------

  function parseRoute() {
    const raw = location.hash.replace(/^#\/?/, "");
    const cut = raw.indexOf("/");
    const kind = cut < 0 ? raw : raw.slice(0, cut);
    let arg = cut < 0 ? "" : raw.slice(cut + 1);
    try { arg = decodeURIComponent(arg); } catch (e) { /* as written */ }
    if (kind === "queue" && arg) return [queueView, arg];
    if (kind === "job" && arg) return [jobView, arg];
    if (kind === "queues") return [queuesView, null];
    return [clusterView, null];
  }

  function route() {
    const [view, arg] = parseRoute();
    S.gen++;
    S.view = view;
    document.body.dataset.view = view.name;
    document.body.dataset.refreshes = "0";
    S.refreshes = 0;
    $("partial-warning").hidden = true;
    for (const a of document.querySelectorAll("header nav a")) {
      a.classList.toggle("here", a.id === "nav-" + view.name || (view.name === "queue" && a.id === "nav-queues"));
    }
    document.title = "Disque console · " + (arg || view.name);
    const root = $("view");
    root.replaceChildren();
    view.mount(root, arg);
    refreshNow();
  }

  async function refreshNow() {
    const view = S.view;
    const gen = S.gen;
    if (!view) return;
    if (S.busyGen === gen) { S.again = true; return; }   // once this one is done
    S.busyGen = gen;
    S.again = false;
    const live = () => gen === S.gen;
    try {
      if (!S.sessionOk) await session();
      await view.refresh(live);
      if (live()) {
        S.lastOk = Date.now();
        S.lastErr = null;
        S.refreshes++;
        document.body.dataset.refreshes = String(S.refreshes);
      }
    } catch (e) {
      if (live()) S.lastErr = e.message;
    } finally {
      if (S.busyGen === gen) S.busyGen = -1;
      showStatus();
    }
    if (S.again && live()) refreshNow();
  }

  function find() {
    const v = $("find-input").value.trim();
    if (!v) return;
    const target = /^D-[0-9a-f]{8}-/i.test(v) ? jobHref(v) : queueHref(v);
    if (location.hash === target) route(); else location.hash = target;
  }

  function start() {
    $("find-go").addEventListener("click", find);
    $("find-input").addEventListener("keydown", (e) => { if (e.key === "Enter") find(); });
    $("confirm-ok").addEventListener("click", () => confirmDone && confirmDone(true));
    $("confirm-cancel").addEventListener("click", () => confirmDone && confirmDone(false));
    $("confirm-dialog").addEventListener("cancel", (e) => { e.preventDefault(); if (confirmDone) confirmDone(false); });
    window.addEventListener("hashchange", route);
    session().then(() => { refreshNodes(); route(); });
    setInterval(() => { refreshNow(); }, REFRESH_MS);
    setInterval(() => { if (S.view !== clusterView) refreshNodes(); }, 5 * REFRESH_MS);
    setInterval(showStatus, 1000);
  }

  start();
})();
