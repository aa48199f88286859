// The runs list (the home page), its empty state, and the compare view.

import { getJSON } from "./api.js";
import { PALETTE } from "./chart.js";
import { MetricsPanel } from "./metrics_panel.js";
import {
  enc, errorPanel, fmtAgo, fmtDuration, fmtNum, fmtTime, h, loading, mount, runDuration, statusBadge,
} from "./util.js";

const REFRESH_MS = 5000;
const METRIC_COLUMN_ORDER = ["reward/mean", "eval/accuracy", "accuracy", "train/loss"];
const MAX_METRIC_COLUMNS = 4;

/** The home page: every run in the store, newest first, refreshed every few seconds. */
export function runsView(root, { setStore }) {
  const selected = new Set();
  let filterText = "";
  let runs = null;
  let timer = null;

  const compareButton = h("button", { class: "btn btn-primary", disabled: true, testid: "compare-button", onclick: () => {
    location.hash = `#/compare?runs=${Array.from(selected).map(enc).join(",")}`;
  } }, "Compare");
  const filter = h("input", { type: "search", class: "input", placeholder: "filter by name, model, task…", oninput: () => {
    filterText = filter.value.trim().toLowerCase();
    draw();
  } });
  const body = h("div", {}, loading());
  mount(root, h("section", {},
    h("div", { class: "page-head" }, h("h1", {}, "Runs"),
      h("div", { class: "toolbar" }, filter, compareButton)),
    body));

  const updateCompare = () => {
    compareButton.disabled = selected.size < 2;
    compareButton.textContent = selected.size ? `Compare (${selected.size})` : "Compare";
    compareButton.title = selected.size < 2 ? "tick two or more runs to compare them" : "";
  };

  const draw = () => {
    if (!runs.length) return mount(body, emptyState());
    const shown = runs.filter((run) => !filterText
      || [run.name, run.id, run.model, run.task, run.kind].some((v) => v && String(v).toLowerCase().includes(filterText)));
    const metricKeys = metricColumns(runs);
    const rows = shown.map((run) => h("tr", { testid: "run-row", dataset: { runId: run.id, status: run.status } },
      h("td", {}, h("input", {
        type: "checkbox", checked: selected.has(run.id), "aria-label": `select ${run.name} to compare`,
        onchange: (event) => {
          if (event.target.checked) selected.add(run.id);
          else selected.delete(run.id);
          updateCompare();
        },
      })),
      h("td", {}, h("a", { href: `#/runs/${enc(run.id)}`, class: "run-link" }, run.name || run.id),
        h("div", { class: "muted small mono" }, run.id)),
      h("td", {}, h("span", { class: "kind" }, run.kind)),
      h("td", {}, statusBadge(run.status)),
      h("td", { class: "num" }, run.step ?? "—"),
      h("td", { class: "ellipsis", title: run.model || "" }, run.model || "—"),
      h("td", {}, run.task || "—"),
      h("td", { title: fmtTime(run.started_at) }, fmtAgo(run.started_at)),
      h("td", {}, fmtDuration(runDuration(run))),
      metricKeys.map((key) => h("td", { class: "num" }, fmtNum((run.metrics || {})[key])))));
    mount(body, h("div", { class: "table-wrap card" }, h("table", { class: "table", testid: "runs-table" },
      h("thead", {}, h("tr", {},
        h("th", {}, ""), h("th", {}, "Run"), h("th", {}, "Kind"), h("th", {}, "Status"), h("th", { class: "num" }, "Step"),
        h("th", {}, "Model"), h("th", {}, "Task"), h("th", {}, "Started"), h("th", {}, "Duration"),
        metricKeys.map((key) => h("th", { class: "num" }, key)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 9 + metricKeys.length, class: "muted" }, "no run matches the filter"))))));
  };

  const refresh = async () => {
    try {
      const answer = await getJSON("runs");
      runs = answer.runs;
      setStore(answer.store);
      for (const id of Array.from(selected)) if (!runs.some((run) => run.id === id)) selected.delete(id);
      updateCompare();
      draw();
    } catch (error) {
      if (runs === null) mount(body, errorPanel(error, refresh));
    }
    timer = setTimeout(refresh, REFRESH_MS);
  };
  refresh();
  return () => clearTimeout(timer);
}

function metricColumns(runs) {
  const keys = new Set();
  for (const run of runs) for (const key of Object.keys(run.metrics || {})) keys.add(key);
  const ordered = METRIC_COLUMN_ORDER.filter((key) => keys.has(key));
  for (const key of Array.from(keys).sort()) if (!ordered.includes(key)) ordered.push(key);
  return ordered.slice(0, MAX_METRIC_COLUMNS);
}

/** What an empty store shows: how to put a first run in it. */
function emptyState() {
  const command = (text, what) => h("div", { class: "command" }, h("code", {}, text), h("span", { class: "muted" }, what));
  return h("div", { class: "panel empty-state card", testid: "empty-state" },
    h("h2", {}, "No runs yet"),
    h("p", {}, "This store has no training or evaluation run. Start one in another terminal and it appears here within seconds, with live charts:"),
    command("rllm train", "train the built-in model on the built-in task (a few minutes on a laptop CPU)"),
    command("rllm eval larger", "evaluate a model on the \"which number is larger?\" task"),
    h("p", { class: "muted" }, "Runs are written to ", h("code", {}, "runs/rllm.db"),
      " by default. Started with another store? Point the UI at it: ", h("code", {}, "rllm ui --store PATH"), "."));
}

/** #/compare?runs=a,b — the same metrics of several runs overlaid on one chart each. */
export function compareView(root, { query }) {
  const ids = (query.runs || "").split(",").filter(Boolean);
  let panel = null;
  let destroyed = false;
  mount(root, loading());
  if (ids.length === 0) {
    mount(root, h("div", { class: "panel" }, "No runs to compare: tick two or more runs on the ", h("a", { href: "#/" }, "runs page"), "."));
    return () => {};
  }
  const load = async () => {
    try {
      const runs = await Promise.all(ids.map((id) => getJSON(`runs/${enc(id)}`)));
      if (destroyed) return;
      panel = new MetricsPanel({
        runs,
        selected: query.keys ? query.keys.split(",") : null,
        prefsKey: "compare",
        isRunning: async (runId) => (await getJSON(`runs/${enc(runId)}`)).status === "running",
      });
      mount(root, h("section", {},
        h("div", { class: "page-head" }, h("h1", {}, `Compare ${runs.length} runs`)),
        h("div", { class: "legend-runs" }, runs.map((run, i) => h("a", { class: "legend-run", href: `#/runs/${enc(run.id)}` },
          h("span", { class: "swatch", style: { background: PALETTE[i % PALETTE.length] } }), run.name || run.id, " ", statusBadge(run.status)))),
        panel.el));
      await panel.start();
    } catch (error) {
      if (!destroyed) mount(root, errorPanel(error, load));
    }
  };
  load();
  return () => {
    destroyed = true;
    if (panel) panel.destroy();
  };
}
