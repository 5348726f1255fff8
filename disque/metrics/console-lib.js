// The console's shared part (docs/console.md): constants, the state, DOM helpers that put
// data in as text only, the API calls, the session, the status line, the confirmation
// dialog and the action runner.


export const REFRESH_MS = 2000;
export const STALE_MS = 6500;
export const PAGE = 50;
export const START_MAX = 10000;
export const LIST_BODY = 200;
export const SHOW_BODY = 65536;
export const QUEUE_LIMITS = [50, 200, 1000];

export const S = {
  token: null, actions: false, me: null, sessionOk: false,
  nodes: new Map(),           // node id -> {addr, state}
  view: null, gen: 0, busyGen: -1, again: false, lastOk: 0, lastErr: null, refreshes: 0,
  queueFilter: "", queueLimit: 200,
};

// ---- small helpers ---------------------------------------------------------------

export const $ = (id) => document.getElementById(id);

// An element: props.text is its text; data-* / aria-* / role go through setAttribute;
// the others are properties (id, className, href, type, checked, ...). Children given as
// strings become text nodes.
export function h(tag, props, ...kids) {
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
export function fill(el, ...kids) {
  el.replaceChildren(...kids.flat().filter((c) => c !== null && c !== undefined && c !== false));
}
export const setText = (el, t) => { const s = String(t); if (el.textContent !== s) el.textContent = s; };

export const nf = new Intl.NumberFormat("en-US");
export function num(n) { return n === null || n === undefined ? "–" : nf.format(n); }
export function rateText(r) {
  if (r === null || r === undefined) return "–";
  return r < 10 && !Number.isInteger(r) ? r.toFixed(1) : nf.format(Math.round(r));
}
export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
export function dur(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
export const age = (ms) => (ms ? dur(ms) : "–");
export function rate(cur, old, dt) {
  return old === undefined || old === null || dt <= 0 ? null : Math.max(0, (cur - old) / dt);
}
export function plural(n, one, many) { return num(n) + " " + (n === 1 ? one : (many || one + "s")); }
export function utf8len(s) { return new TextEncoder().encode(s).length; }
export function bodyCut(body, size, limit) { return size > Math.min(limit, utf8len(body || "")); }
export const short = (id) => (id ? String(id).slice(0, 8) : "?");
export function nodeName(id) {
  const n = S.nodes.get(id);
  return n && n.addr ? n.addr : short(id);
}
export function stateTag(state) {
  const cls = state === "ok" ? "" : (["fail", "pfail", "disconnected"].includes(state) ? " bad" : " warn");
  return h("span", {class: "tag" + cls, text: state});
}
export function pausedTag(p) {
  if (!p || p === "none") return h("span", {class: "tag none", text: "no"});
  return h("span", {class: "tag warn", text: p === "all" ? "in+out" : p});
}
export const queueHref = (q) => "#/queue/" + encodeURIComponent(q);
export const jobHref = (id) => "#/job/" + encodeURIComponent(id);
export function kpi(label, value, id) {
  return h("div", {class: "kpi"}, h("div", {class: "v", id: id, text: value}),
           h("div", {class: "l", text: label}));
}

export class HttpError extends Error {
  constructor(status, why) { super("HTTP " + status + (why ? ": " + why : "")); this.status = status; this.why = why; }
}

export async function api(path) {
  const r = await fetch(path, {cache: "no-store", credentials: "same-origin"});
  if (!r.ok) throw new HttpError(r.status, (await r.text()).trim());
  return r.json();
}

export async function post(body) {
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

export async function session() {
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

export function showNode() {
  if (!S.me) return;
  const n = S.nodes.get(S.me);
  setText($("node-info"), (n && n.addr ? n.addr + " · " : "") + short(S.me));
}

export function learnNodes(list) {
  for (const n of list) {
    S.nodes.set(n.id, {addr: n.addr, state: n.state});
  }
  showNode();
}

export async function refreshNodes() {
  try { learnNodes((await api("/api/console/cluster")).nodes); } catch (e) { /* shown elsewhere */ }
}

export function showStatus() {
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

export function showPartial(resp) {
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

export let confirmDone = null;
export function confirmDialog(text) {
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

export function showResult(state, title, lines, extra) {
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

export const VERB = {enqueue: "requeued", nack: "nacked", delete: "deleted", retry: "retried",
              retry_all: "retried", delete_all: "deleted"};

// desc: {confirm, title, requests: [action bodies], after(summary)}
export async function runAction(desc) {
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

// The current view's data again (every REFRESH_MS, and after an action); one at a time.
export async function refreshNow() {
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
