// rllm ui: a single-page app over the JSON API of `rllm ui` (docs/ui.md). Hash routes:
//   #/                       runs list (empty state when the store has no run)
//   #/compare?runs=a,b       metrics of several runs overlaid
//   #/runs/ID[/TAB]          one run: charts (default), episodes, evals, config
//   #/episodes/EID[?t=&s=]   one episode, optionally with the token view of trajectory t, step s
// Each view renders into #view and returns a cleanup function (closes streams, stops timers) that the
// router calls before the next view.

import { episodeView } from "./js/episodes.js";
import { runView } from "./js/run.js";
import { compareView, runsView } from "./js/runs.js";
import { getJSON } from "./js/api.js";
import { errorPanel, h, mount, parseQuery, prefs } from "./js/util.js";

const view = document.getElementById("view");
const storeLabel = document.getElementById("store-path");
let cleanup = () => {};

const context = {
  setStore(path) {
    storeLabel.textContent = path || "";
    storeLabel.title = path ? `run store: ${path}` : "";
  },
};

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, queryText] = hash.split("?", 2);
  const query = parseQuery(queryText);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  cleanup();
  cleanup = () => {};
  window.scrollTo(0, 0);
  let result;
  if (parts.length === 0) result = runsView(view, context);
  else if (parts[0] === "compare") result = compareView(view, { query });
  else if (parts[0] === "runs" && parts.length >= 2) result = runView(view, { runId: parts[1], tab: parts[2] || null, query });
  else if (parts[0] === "episodes" && parts.length === 2) result = episodeView(view, { episodeId: parts[1], query });
  else mount(view, errorPanel(`no page at #${hash}`), h("a", { href: "#/" }, "← all runs"));
  if (typeof result === "function") cleanup = result;
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", parts.length === 0 && a.dataset.nav === "runs"));
}

/** Light/dark: follows the system unless the user picked one with the toggle. */
function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

document.getElementById("theme-toggle").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const theme = dark ? "light" : "dark";
  prefs.set("theme", theme);
  applyTheme(theme);
  route(); // charts read their colours from CSS variables when they are created
});

applyTheme(prefs.get("theme", null));
getJSON("runs").then((body) => context.setStore(body.store)).catch(() => { /* the runs page reports it */ });
window.addEventListener("hashchange", route);
route();
