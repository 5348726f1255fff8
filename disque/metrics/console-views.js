// The cluster and queues views of the console (docs/console.md).
import {QUEUE_LIMITS, S, h, fill, setText, num, rateText, bytes, dur, age, rate, short, nodeName, stateTag, pausedTag, queueHref, kpi, api, learnNodes, showPartial} from "./console-lib.js";
import {refreshNow} from "./console-lib.js";

// ---- views ---------------------------------------------------------------------------

export const clusterView = {
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

export const queuesView = {
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
    document.body.dataset.rowsMade = String(+(document.body.dataset.rowsMade || 0) + 1);
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
    if (!sameOrder(this.tbody.children, order)) {   // a steady table is left where it is
      const frag = document.createDocumentFragment();
      for (const tr of order) frag.appendChild(tr);
      if (!order.length) frag.appendChild(h("tr", null, h("td", {class: "empty", colSpan: 10,
        text: S.queueFilter ? "no queue name holds “" + S.queueFilter + "”" : "no queues"})));
      this.tbody.replaceChildren(frag);
      document.body.dataset.tableBuilds = String(+(document.body.dataset.tableBuilds || 0) + 1);
    }
    setText(this.count, "(" + num(data.total) + (S.queueFilter ? " matching" : "") + ", " +
            num(data.queues.length) + " longest shown)");
    this.prev = {t: now, q: new Map(data.queues.map((q) => [q.queue, q]))};
    document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);   // the DOM's share
  },
};

function sameOrder(children, order) {
  if (!order.length || children.length !== order.length) return false;
  for (let i = 0; i < order.length; i++) if (children[i] !== order[i]) return false;
  return true;
}

export function actionButton(id, label, cls, onclick) {
  return h("button", {id, type: "button", class: cls || "", text: label, on: {click: onclick}});
}
