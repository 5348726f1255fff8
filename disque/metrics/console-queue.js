// The console's view of one queue (its jobs, pause, dead letters, search) and of one job.
import {PAGE, START_MAX, LIST_BODY, SHOW_BODY, S, $, h, fill, setText, num, rateText, bytes, dur, age, rate, plural, bodyCut, short, nodeName, pausedTag, queueHref, jobHref, kpi, api, showPartial, runAction} from "./console-lib.js";
import {actionButton} from "./console-views.js";
import {refreshNow} from "./console-lib.js";

export const queueView = {
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
    // job groups (docs/job-groups.md): shown while the queue has some
    this.groupRows = h("tbody");
    this.groupSection = h("section", {id: "q-groups-section", hidden: true},
      h("h2", null, "Job groups", h("span", {class: "dim", id: "groups-count"})),
      h("div", {class: "scroll"}, h("table", {id: "groups-table"},
        h("thead", null, h("tr", null, ["group", "jobs", "waits on", "its state", "home node"].map((t) =>
          h("th", {text: t, class: "l"})))),
        this.groupRows)));
    root.appendChild(this.groupSection);
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
    const groups = this.info && this.info.groups
      ? await api("/api/console/groups?name=" + encodeURIComponent(name) + "&limit=50").catch(() => null) : null;
    if (live()) this.renderGroups(groups);
  },
  renderGroups(data) {
    this.groupSection.hidden = !data || !data.groups.length;
    if (!data) return;
    setText($("groups-count"), "(" + num(data.count) + (data.count > data.groups.length
      ? ", the " + num(data.groups.length) + " largest shown)" : ")"));
    this.groupRows.replaceChildren(...data.groups.map((g) => h("tr", {"data-group": g.key},
      h("td", {class: "mono", text: g.key}),
      h("td", {class: "l", text: num(g.jobs)}),
      h("td", {class: "id"}, h("a", {href: jobHref(g.head), class: "mono", text: g.head})),
      h("td", {class: "l", text: g.head_state}),
      h("td", {class: "l", text: nodeName(g.node), title: g.node}))));
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
      q && q.groups ? kpi("job groups", num(q.groups), "q-groups") : null,
      q && q.groups ? kpi("held behind a group's head", num(q.held), "q-held") : null,
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

export const SHOW_ORDER = ["id", "queue", "state", "repl", "ttl", "ctime", "delay", "retry", "nacks",
  "additional-deliveries", "nodes-delivered", "nodes-confirmed", "next-requeue-within",
  "next-awake-within", "retry-interval", "backoff", "max-deliveries", "deadletter",
  "dead-lettered-from", "body_size"];

export function fieldValue(k, v) {
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

export const jobView = {
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
