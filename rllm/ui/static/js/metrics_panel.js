// A grid of metric charts for one run (run page) or several (compare view): a metric key picker, the
// smoothing slider, and live updates from each running run's metric stream.

import { followMetrics, getJSON } from "./api.js";
import { MetricChart, appendPoints, smoothingSlider } from "./chart.js";
import { h, mount, prefs } from "./util.js";

/** Shown first when a run has them (the trainer's and `rllm eval`'s headline numbers). */
const PREFERRED_KEYS = [
  "reward/mean", "eval/accuracy", "train/loss", "response_len/mean", "train/entropy",
  "train/trainer_rollout_logprob_diff", "train/grad_norm", "train/approx_kl",
];
const DEFAULT_CHART_COUNT = 6;
// Each stream holds an HTTP/1.1 connection, and a browser opens at most 6 per server: keep some for the
// page's other requests.
const MAX_STREAMS = 4;

export function defaultKeys(allKeys) {
  const chosen = PREFERRED_KEYS.filter((key) => allKeys.includes(key)).slice(0, DEFAULT_CHART_COUNT);
  return chosen.length ? chosen : allKeys.slice(0, 4);
}

/**
 * The metric key picker: a dropdown of checkboxes grouped by prefix ("train/…", "eval/…") with a
 * filter box. Calls onChange(selectedKeys) whenever a box is ticked.
 */
export function keyPicker(allKeys, selected, onChange) {
  const chosen = new Set(selected);
  const summary = h("summary", { class: "btn" });
  const list = h("div", { class: "picker-list" });
  const filter = h("input", { type: "search", placeholder: "filter metrics…", class: "input", oninput: () => draw() });
  const updateSummary = () => { summary.textContent = `Metrics (${chosen.size} of ${allKeys.length}) ▾`; };

  const draw = () => {
    const needle = filter.value.trim().toLowerCase();
    const groups = new Map();
    for (const key of allKeys) {
      if (needle && !key.toLowerCase().includes(needle)) continue;
      const prefix = key.includes("/") ? key.slice(0, key.indexOf("/")) : "(top level)";
      if (!groups.has(prefix)) groups.set(prefix, []);
      groups.get(prefix).push(key);
    }
    mount(list, [...groups].map(([prefix, keys]) => h("div", { class: "picker-group" },
      h("div", { class: "picker-group-name muted" }, prefix),
      keys.map((key) => h("label", { class: "picker-item" },
        h("input", {
          type: "checkbox", checked: chosen.has(key), dataset: { key },
          onchange: (event) => {
            if (event.target.checked) chosen.add(key);
            else chosen.delete(key);
            updateSummary();
            onChange(allKeys.filter((k) => chosen.has(k)));
          },
        }), " ", key)))));
    if (!groups.size) mount(list, h("div", { class: "muted" }, "no metric matches"));
  };
  updateSummary();
  draw();
  const picker = h("details", { class: "picker", testid: "key-picker" }, summary,
    h("div", { class: "picker-panel card" }, filter, list));
  // Close when the user clicks anywhere else, like a menu.
  const closeOutside = (event) => { if (!picker.contains(event.target)) picker.open = false; };
  picker.addEventListener("toggle", () => {
    if (picker.open) document.addEventListener("click", closeOutside);
    else document.removeEventListener("click", closeOutside);
  });
  return picker;
}

/**
 * Charts for `runs` ([{id, name, status, metric_keys}]). With one run each chart has one line (plus its
 * raw values under the smoothed line); with several, one line per run.
 * `onRunEnded(runId)` is awaited when a run's stream ends and says whether the run is still running.
 */
export class MetricsPanel {
  constructor({ runs, selected, prefsKey, isRunning }) {
    this.runs = runs;
    this.prefsKey = prefsKey;
    this.isRunning = isRunning;
    this.allKeys = unionKeys(runs);
    const saved = prefs.get(`keys:${prefsKey}`, null);
    this.selected = selected || (saved ? saved.filter((k) => this.allKeys.includes(k)) : null) || [];
    if (!this.selected.length) this.selected = defaultKeys(this.allKeys);
    this.smoothing = prefs.get("smoothing", 0.6);
    this.points = new Map(runs.map((run) => [run.id, new Map()])); // run id → key → [[step, value]]
    this.charts = [];
    this.stops = [];
    this.destroyed = false;
    this.grid = h("div", { class: "chart-grid" });
    this.pickerSlot = h("span", {});
    this.note = h("div", { class: "muted small" });
    this.el = h("div", { class: "metrics-panel" },
      h("div", { class: "toolbar" },
        this.pickerSlot,
        smoothingSlider(this.smoothing, (weight) => {
          this.smoothing = weight;
          prefs.set("smoothing", weight);
          // The slider fires on every pixel it moves: redraw once per frame at most.
          cancelAnimationFrame(this.smoothingFrame);
          this.smoothingFrame = requestAnimationFrame(() => this.charts.forEach((c) => c.setSmoothing(this.smoothing)));
        }),
        h("button", { class: "btn", onclick: () => this.charts.forEach((c) => c.resetZoom()) }, "Reset zoom"),
        h("span", { class: "muted hint" }, "drag on a chart to zoom · double-click to reset")),
      this.note,
      this.grid);
    this.drawPicker();
  }

  drawPicker() {
    mount(this.pickerSlot, keyPicker(this.allKeys, this.selected, (keys) => this.select(keys)));
  }

  /** New metric names appeared (a running run logged a new key): offer them in the picker. */
  updateKeys(runs) {
    const keys = unionKeys(runs);
    if (keys.length === this.allKeys.length) return;
    this.allKeys = keys;
    this.drawPicker();
  }

  async start() {
    await this.load(this.selected);
    this.drawCharts();
    this.follow();
  }

  async select(keys) {
    this.selected = keys;
    prefs.set(`keys:${this.prefsKey}`, keys);
    this.stopFollowing();
    const missing = keys.filter((key) => !this.runs.every((run) => this.points.get(run.id).has(key)));
    await this.load(missing);
    if (this.destroyed) return;
    this.drawCharts();
    this.follow();
  }

  async load(keys) {
    if (!keys.length) return;
    await Promise.all(this.runs.map(async (run) => {
      const body = await getJSON(`runs/${encodeURIComponent(run.id)}/metrics`, { keys: keys.join(",") });
      for (const key of keys) appendPoints(this.pointsOf(run.id, key), body.series[key] || []);
    }));
  }

  /** The points list of one run's metric; charts hold these very arrays, so appends show on redraw. */
  pointsOf(runId, key) {
    const byKey = this.points.get(runId);
    if (!byKey.has(key)) byKey.set(key, []);
    return byKey.get(key);
  }

  drawCharts() {
    for (const chart of this.charts) chart.destroy();
    const many = this.runs.length > 1;
    this.charts = this.selected.map((key, i) => new MetricChart({
      title: key,
      lines: this.runs.map((run) => ({ label: many ? run.name || run.id : key, points: this.pointsOf(run.id, key) })),
      smoothing: this.smoothing,
      pointsTestId: i === 0 ? "chart-points" : null,
    }));
    if (!this.charts.length) {
      mount(this.grid, h("div", { class: "panel muted" }, "No metric selected: pick some from the Metrics menu."));
      return;
    }
    mount(this.grid, this.charts.map((chart) => chart.el));
    for (const chart of this.charts) chart.redraw();
  }

  follow() {
    const live = this.runs.filter((run) => run.status === "running");
    if (live.length > MAX_STREAMS) {
      this.note.textContent = `${live.length} runs are live; the first ${MAX_STREAMS} update as they train, reload for the others.`;
    }
    for (const run of live.slice(0, MAX_STREAMS)) {
      if (!this.selected.length) continue;
      // Resume after the oldest of the selected keys' last points; appendPoints drops the repeats.
      const lastSteps = this.selected.map((key) => lastStep(this.pointsOf(run.id, key))).filter((s) => s !== null);
      const afterStep = lastSteps.length ? Math.min(...lastSteps) : null;
      this.stops.push(followMetrics(run.id, {
        keys: this.selected,
        afterStep,
        onData: (payload) => this.receive(run.id, payload.series || {}),
        onEnd: () => this.isRunning(run.id),
      }));
    }
  }

  receive(runId, series) {
    let changed = false;
    for (const [key, fresh] of Object.entries(series)) {
      if (appendPoints(this.pointsOf(runId, key), fresh)) changed = true;
    }
    if (changed) for (const chart of this.charts) chart.redraw();
  }

  stopFollowing() {
    for (const stop of this.stops) stop();
    this.stops = [];
  }

  destroy() {
    this.destroyed = true;
    this.stopFollowing();
    for (const chart of this.charts) chart.destroy();
  }
}

function lastStep(points) {
  return points && points.length ? points[points.length - 1][0] : null;
}

function unionKeys(runs) {
  const keys = new Set();
  for (const run of runs) for (const key of run.metric_keys || []) keys.add(key);
  return Array.from(keys).sort();
}
