// One run: a header (status, model, task, timing), then tabs: charts, episodes, evals, profile, config.

import { getJSON } from "./api.js";
import { MetricChart } from "./chart.js";
import { episodeBrowser } from "./episodes.js";
import { MetricsPanel } from "./metrics_panel.js";
import { profileTab } from "./profile.js";
import {
  correctMark, enc, errorPanel, flatten, fmtAgo, fmtDuration, fmtNum, fmtPercent, fmtTime, h, jsonTree,
  loading, mount, pager, runDuration, statusBadge,
} from "./util.js";

const TABS = [["charts", "Charts"], ["episodes", "Episodes"], ["evals", "Evals"], ["profile", "Profile"], ["config", "Config"]];
const HEADER_REFRESH_MS = 5000;
const RESULTS_PAGE = 50;

/** #/runs/ID[/tab][?query] */
export function runView(root, { runId, tab, query }) {
  let run = null;
  let destroyed = false;
  let cleanupTab = () => {};
  let timer = null;
  const header = h("div", { class: "run-head" });
  const content = h("div", { class: "tab-content" });
  mount(root, loading());

  const refreshHeader = async () => {
    try {
      run = await getJSON(`runs/${enc(runId)}`);
      if (!destroyed) drawHeader(header, run, tab);
    } catch {
      /* keep the last header; the next refresh tries again */
    }
    return run;
  };
  const isRunning = async () => (await refreshHeader()).status === "running";

  const load = async () => {
    try {
      run = await getJSON(`runs/${enc(runId)}`);
    } catch (error) {
      if (!destroyed) mount(root, errorPanel(error, load));
      return;
    }
    if (destroyed) return;
    if (!tab) tab = run.kind === "eval" ? "evals" : "charts";
    drawHeader(header, run, tab);
    mount(root, h("section", {}, header, content));
    if (tab === "charts") cleanupTab = chartsTab(content, run, isRunning);
    else if (tab === "episodes") cleanupTab = episodeBrowser(content, run, query);
    else if (tab === "evals") cleanupTab = evalsTab(content, run, query);
    else if (tab === "profile") cleanupTab = profileTab(content, run);
    else if (tab === "config") configTab(content, run);
    else mount(content, errorPanel(`no tab '${tab}'`));
    const poll = async () => {
      if (destroyed) return;
      if (run.status === "running") await refreshHeader();
      timer = setTimeout(poll, HEADER_REFRESH_MS);
    };
    timer = setTimeout(poll, HEADER_REFRESH_MS);
  };
  load();
  return () => {
    destroyed = true;
    clearTimeout(timer);
    cleanupTab();
  };
}

function drawHeader(el, run, activeTab) {
  const fact = (label, value, title) => h("div", { class: "fact", title: title || "" },
    h("div", { class: "fact-label" }, label), h("div", { class: "fact-value" }, value));
  mount(el,
    h("div", { class: "page-head" },
      h("h1", {}, run.name || run.id, " ", statusBadge(run.status)),
      h("span", { class: "muted mono small" }, run.id)),
    alertBadges(run),
    h("div", { class: "facts" },
      fact("Kind", run.kind),
      fact("Model", run.model || "—", run.model),
      fact("Task", run.task || "—"),
      fact("Step", run.step ?? "—"),
      fact("Started", fmtAgo(run.started_at), fmtTime(run.started_at)),
      fact(run.status === "running" ? "Running for" : "Duration", fmtDuration(runDuration(run))),
      run.status === "running" || run.status === "crashed" ? fact("Last heartbeat", fmtAgo(run.heartbeat_at), fmtTime(run.heartbeat_at)) : null,
      Object.entries(run.metrics || {}).slice(0, 4).map(([key, value]) => fact(key, fmtNum(value)))),
    run.status === "crashed"
      ? h("div", { class: "panel warn-panel" }, "This run stopped sending heartbeats more than a minute ago without finishing: the process was probably killed. Everything it wrote before is shown.")
      : null,
    run.status === "failed" && run.error
      ? h("details", { class: "panel error-panel" }, h("summary", {}, h("strong", {}, "Failed: "), run.error.split("\n")[0]), h("pre", { class: "pre" }, run.error))
      : null,
    h("nav", { class: "tabs" }, TABS.map(([id, label]) => h("a", {
      href: `#/runs/${enc(run.id)}${id === "charts" ? "" : `/${id}`}`, class: `tab${id === activeTab ? " active" : ""}`,
    }, label))));
}

/** The monitors' alerts (docs/monitoring.md): a badge per monitor that alerted, with its checks and the
 * drift monitor's temperature changes in the tooltip. Read from the monitor/<name>/alert metrics. */
function alertBadges(run) {
  const alerts = run.alerts || [];
  const monitors = alerts.filter((a) => a.check === null);
  if (!monitors.length) return null;
  const label = { drift: "drift", hacking: "reward hacking?" };
  const steps = (a) => (a.first_step === a.last_step ? `step ${a.first_step}` : `steps ${a.first_step}–${a.last_step}`);
  return h("div", { class: "alerts", testid: "run-alerts" }, monitors.map((a) => {
    const lines = alerts.filter((c) => c.monitor === a.monitor && c.check)
      .map((c) => `${c.check}: ${steps(c)}${c.active ? " (now)" : ""}`);
    if (a.monitor === "drift") {
      lines.push(...(run.temperature_changes || []).map(([step, t]) => `temperature ${fmtNum(t)} from step ${step + 1}`));
    }
    return h("span", {
      class: `alert-badge${a.active ? " alert-active" : ""}`,
      testid: `alert-${a.monitor}`,
      title: [...lines, `metric ${a.key}; see docs/monitoring.md`].join("\n"),
    }, `⚠ ${label[a.monitor] || a.monitor}: ${steps(a)}${a.active ? ", now" : ""}`);
  }));
}

function chartsTab(el, run, isRunning) {
  if (!run.metric_keys.length) {
    mount(el, h("div", { class: "panel muted" }, run.status === "running"
      ? "No metrics yet: the first step is still running. Charts appear as soon as it logs."
      : "This run logged no metrics."));
    if (run.status !== "running") return () => {};
    // Wait for the first metrics, then draw the charts.
    let cleanup = () => {};
    let timer = setTimeout(async function wait() {
      const fresh = await getJSON(`runs/${enc(run.id)}`).catch(() => run);
      if (fresh.metric_keys.length) cleanup = chartsTab(el, fresh, isRunning);
      else if (fresh.status === "running") timer = setTimeout(wait, 2000);
    }, 2000);
    return () => { clearTimeout(timer); cleanup(); };
  }
  const panel = new MetricsPanel({
    runs: [run],
    prefsKey: run.kind,
    isRunning,
  });
  mount(el, panel.el);
  panel.start().catch((error) => mount(el, errorPanel(error)));
  // A running run may log new metric names later (eval/* at the first eval step): offer them.
  let timer = null;
  if (run.status === "running") {
    timer = setInterval(async () => {
      const fresh = await getJSON(`runs/${enc(run.id)}`).catch(() => null);
      if (fresh) panel.updateKeys([fresh]);
      if (fresh && fresh.status !== "running") clearInterval(timer);
    }, HEADER_REFRESH_MS);
  }
  return () => {
    clearInterval(timer);
    panel.destroy();
  };
}

/** Held-out evaluations: accuracy per eval step, and for `rllm eval` runs every graded item. */
function evalsTab(el, run, query) {
  let offset = Number(query.offset || 0);
  let chart = null;
  const resultsSlot = h("div", {});
  mount(el, loading());

  const load = async () => {
    let body;
    try {
      body = await getJSON(`runs/${enc(run.id)}/evals`, { limit: RESULTS_PAGE, offset });
    } catch (error) {
      mount(el, errorPanel(error, load));
      return;
    }
    if (chart) chart.destroy();
    chart = null;
    const evals = body.evals || [];
    const results = body.results || [];
    if (!evals.length && !results.length && offset === 0) {
      mount(el, h("div", { class: "panel muted" }, "No evaluation yet. Training runs evaluate every ",
        h("code", {}, "eval.every_steps"), " steps; ", h("code", {}, "rllm eval"), " runs list each graded item here."));
      return;
    }
    const parts = [];
    if (evals.length > 1) {
      chart = new MetricChart({ title: "held-out accuracy", lines: [{ label: "accuracy", points: evals.map((e) => [e.step, e.accuracy]) }] });
      parts.push(h("div", { class: "chart-grid single" }, chart.el));
    }
    if (evals.length) {
      parts.push(h("div", { class: "table-wrap card" }, h("table", { class: "table", testid: "evals-table" },
        h("thead", {}, h("tr", {}, h("th", { class: "num" }, "Step"), h("th", { class: "num" }, "Accuracy"), h("th", { class: "num" }, "Items"))),
        h("tbody", {}, evals.map((e) => h("tr", {}, h("td", { class: "num" }, e.step ?? "—"),
          h("td", { class: "num" }, fmtPercent(e.accuracy)), h("td", { class: "num" }, e.n ?? "—")))))));
    }
    if (results.length || offset > 0) {
      drawResults(resultsSlot, results, offset, body.total ?? null, (next) => { offset = next; load(); });
      parts.push(h("h2", {}, "Graded items"), resultsSlot);
    }
    mount(el, parts);
    if (chart) chart.redraw();
  };
  load();
  return () => { if (chart) chart.destroy(); };
}

function drawResults(el, results, offset, total, onPage) {
  const rows = [];
  for (const result of results) {
    const detail = h("tr", { class: "drill", hidden: true }, h("td", { colspan: 5 },
      h("div", { class: "drill-body" },
        h("div", { class: "drill-label" }, "Output"), h("pre", { class: "pre" }, result.output ?? ""),
        result.error ? [h("div", { class: "drill-label" }, "Error"), h("pre", { class: "pre mark-bad" }, result.error)] : null,
        result.termination_reason ? [h("div", { class: "drill-label" }, "Ended"), h("span", { class: `term term-${result.termination_reason}` }, result.termination_reason)] : null,
        h("div", { class: "drill-label" }, "Info"), jsonTree(result.info ?? {}, { open: 3 }))));
    rows.push(h("tr", { class: "clickable", testid: "eval-row", onclick: () => { detail.hidden = !detail.hidden; } },
      h("td", { class: "mono" }, result.task_id), h("td", { class: "num" }, result.sample ?? "—"),
      h("td", { class: "num" }, fmtNum(result.reward)), h("td", {}, correctMark(result.is_correct)),
      h("td", { class: "preview" }, (result.output || "").slice(0, 160))), detail);
  }
  mount(el, h("div", { class: "table-wrap card" }, h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", { class: "num" }, "Sample"), h("th", { class: "num" }, "Reward"),
      h("th", {}, "Correct"), h("th", {}, "Output (click a row for all of it)"))),
    h("tbody", {}, rows))),
  pager({ offset, limit: RESULTS_PAGE, count: results.length, total, onPage }));
}

/** The config snapshot as dotted keys (what `rllm train key=value` takes), with a filter. */
function configTab(el, run) {
  const rows = flatten(run.config || {});
  const tbody = h("tbody", {});
  const draw = (needle) => mount(tbody, rows
    .filter(([key, value]) => !needle || key.toLowerCase().includes(needle) || JSON.stringify(value).toLowerCase().includes(needle))
    .map(([key, value]) => h("tr", {}, h("td", { class: "mono" }, key), h("td", { class: "mono" }, formatValue(value)))));
  const filter = h("input", { type: "search", class: "input", placeholder: "filter keys…", oninput: () => draw(filter.value.trim().toLowerCase()) });
  draw("");
  mount(el,
    h("div", { class: "toolbar" }, filter, h("span", { class: "muted" }, `${rows.length} keys`),
      run.code_version ? h("span", { class: "muted" }, "code version ", h("code", {}, run.code_version)) : null),
    run.summary ? h("div", { class: "card pad" }, h("h2", {}, "Summary"), jsonTree(run.summary, { open: 2 })) : null,
    rows.length
      ? h("div", { class: "table-wrap card" }, h("table", { class: "table config-table", testid: "config-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Key"), h("th", {}, "Value"))), tbody))
      : h("div", { class: "panel muted" }, "This run stored no config snapshot."));
}

function formatValue(value) {
  if (value === null) return "null";
  if (typeof value === "string") return value === "" ? '""' : value;
  return JSON.stringify(value);
}
