// The operations console (docs/console.md): one page, views chosen by the URL's hash
// (#/cluster, #/queues, #/queue/<name>, #/job/<id>), reading /api/console/* every 2 s.
// Every value from the API reaches the document as text (textContent, text nodes), never
// as HTML; the page's policy runs no script but these module files.
import {REFRESH_MS, S, $, queueHref, jobHref, session, refreshNodes, showStatus, confirmDone,
        refreshNow} from "./console-lib.js";
import {clusterView, queuesView} from "./console-views.js";
import {queueView, jobView} from "./console-queue.js";

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
