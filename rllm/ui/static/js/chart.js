// Line charts on uPlot (vendor/uPlot.iife.min.js, a global): one metric, one or more lines (runs),
// EMA smoothing, drag-to-zoom on the x axis, double-click or "reset zoom" to see everything again.

import { fmtNum, h } from "./util.js";

/** Line colours, picked to stay distinct on both the light and the dark theme. */
export const PALETTE = ["#3b82f6", "#f97316", "#10b981", "#e11d48", "#8b5cf6", "#eab308", "#06b6d4", "#ec4899"];

/**
 * Exponential moving average with TensorBoard's debiasing:
 *   s_t = w * s_{t-1} + (1 - w) * x_t,   shown value = s_t / (1 - w^n)   (n = points seen so far)
 * so the first points are not pulled towards 0. Missing values stay missing and do not advance n.
 */
export function ema(values, weight) {
  if (!weight) return values.slice();
  const out = new Array(values.length);
  let state = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || v === undefined || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    state = weight * state + (1 - weight) * v;
    n += 1;
    out[i] = state / (1 - weight ** n);
  }
  return out;
}

/** Align several [[step, value], ...] lists on the union of their steps (missing → null). */
export function alignSeries(lists) {
  const steps = new Set();
  for (const points of lists) for (const [step] of points) steps.add(step);
  const xs = Array.from(steps).sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = lists.map((points) => {
    const y = new Array(xs.length).fill(null);
    for (const [step, value] of points) y[index.get(step)] = value;
    return y;
  });
  return [xs, ...ys];
}

const STEP_SERIES = { label: "step", value: (u, v) => (v === null || v === undefined ? "—" : String(v)) };

/** Steps are integers: x-axis ticks at 1, 2, 5, 10, 20, 25, 50, ... steps apart, never fractions. */
const STEP_INCREMENTS = [1, 2, 5].concat(...[1, 2, 3, 4, 5, 6, 7].map((e) => [1, 2, 2.5, 5].map((m) => m * 10 ** e)));

/** The y range: uPlot's rounded range with 10 % padding; a flat line gets a band around its value
 * (uPlot's default for a constant 0 is 0..100, which reads as "this metric is tiny"). */
function yRange(u, min, max) {
  if (min === null || max === null) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) * 0.1 || 1;
    return [min - pad, max + pad];
  }
  return uPlot.rangeNum(min, max, 0.1, true);
}

/** Tick labels with as many decimals as the tick spacing needs (10.7890, 10.7895, not 10.79 twice). */
function yTickLabels(u, ticks) {
  if (ticks.length === 0) return [];
  const spacing = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : Math.abs(ticks[0]) || 1;
  const decimals = Math.max(0, -Math.floor(Math.log10(spacing)));
  const largest = Math.max(...ticks.map(Math.abs));
  if (largest >= 1e6 || decimals > 6) {
    const digits = Math.min(6, Math.max(1, Math.ceil(Math.log10(largest / spacing))));
    return ticks.map((t) => (t === 0 ? "0" : t.toExponential(digits)));
  }
  return ticks.map((t) => t.toFixed(decimals));
}

/** Width of the y axis: its longest tick label, plus the tick marks and the gap uPlot draws. */
function yAxisSize(u, values) {
  const longest = Math.max(0, ...(values || []).map((v) => String(v).length));
  return Math.max(40, 22 + longest * 7.5);
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** Append new points to a [[step, value], ...] list, keeping steps strictly increasing (no duplicates). */
export function appendPoints(points, fresh) {
  let last = points.length ? points[points.length - 1][0] : -Infinity;
  let added = 0;
  for (const point of fresh) {
    if (point[0] > last) {
      points.push(point);
      last = point[0];
      added += 1;
    }
  }
  return added;
}

/**
 * A chart card for one metric. `lines` is [{label, points: [[step, value], ...]}]; mutate a line's
 * points (appendPoints) and call redraw() to show new data without losing the zoom.
 * `pointsTestId` puts data-testid on the element whose text is the number of points drawn.
 */
export class MetricChart {
  constructor({ title, lines, smoothing = 0, pointsTestId = null, height = 220 }) {
    this.title = title;
    this.lines = lines;
    this.smoothing = smoothing;
    this.height = height;
    this._zoomed = false;
    this.plot = null;
    this.count = h("span", { class: "chart-count", ...(pointsTestId ? { testid: pointsTestId } : {}) }, "0");
    this.body = h("div", { class: "chart-body" });
    this.el = h("div", { class: "chart card", testid: "chart", dataset: { metric: title, zoomed: "false" } },
      h("div", { class: "chart-head" },
        h("span", { class: "chart-title", title }, title),
        h("span", { class: "chart-meta muted" }, this.count, " pts"),
        h("button", { class: "btn btn-small", title: "Show all steps (or double-click the chart)", onclick: () => this.resetZoom() }, "reset zoom")),
      this.body);
    this.resizer = new ResizeObserver(() => this.resize());
    this.resizer.observe(this.body);
  }

  /** Whether the user zoomed in (new points then keep the zoom); mirrored in data-zoomed for tests. */
  get zoomed() {
    return this._zoomed;
  }

  set zoomed(value) {
    this._zoomed = value;
    this.el.dataset.zoomed = String(value);
  }

  /** How many points the chart draws: the longest line's count. */
  get pointCount() {
    return Math.max(0, ...this.lines.map((line) => line.points.length));
  }

  data() {
    const aligned = alignSeries(this.lines.map((line) => line.points));
    const [xs, ...ys] = aligned;
    if (this.lines.length === 1) {
      // One line: draw the raw values faintly under the smoothed ones (TensorBoard style).
      return [xs, ys[0], ema(ys[0], this.smoothing)];
    }
    return [xs, ...ys.map((y) => ema(y, this.smoothing))];
  }

  series() {
    if (this.lines.length === 1) {
      const color = PALETTE[0];
      return [
        STEP_SERIES,
        { label: "raw", stroke: color + "55", width: 1, show: this.smoothing > 0, value: (u, v) => fmtNum(v) },
        { label: this.smoothing > 0 ? "smoothed" : "value", stroke: color, width: 1.75, value: (u, v) => fmtNum(v) },
      ];
    }
    return [STEP_SERIES, ...this.lines.map((line, i) => ({
      label: line.label, stroke: PALETTE[i % PALETTE.length], width: 1.75, spanGaps: true, value: (u, v) => fmtNum(v),
    }))];
  }

  create() {
    const width = Math.max(200, this.body.clientWidth || 400);
    const axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--grid"), width: 1 }, ticks: { stroke: cssVar("--grid"), width: 1 } };
    const opts = {
      width, height: this.height,
      scales: { x: { time: false }, y: { range: yRange } },
      series: this.series(),
      axes: [{ ...axis, incrs: STEP_INCREMENTS }, { ...axis, size: yAxisSize, values: yTickLabels }],
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      legend: { live: true },
      hooks: {
        setSelect: [(u) => { if (u.select.width > 0) this.zoomed = true; }],  // a drag zooms to the selection
      },
    };
    this.plot = new uPlot(opts, this.data(), this.body);
    this.plot.over.addEventListener("dblclick", () => { this.zoomed = false; });
    this.count.textContent = String(this.pointCount);
  }

  /** Draw again after points were added: keeps the current zoom, if any. */
  redraw() {
    if (!this.plot) return this.create();
    this.plot.setData(this.data(), !this.zoomed);
    this.count.textContent = String(this.pointCount);
  }

  setSmoothing(weight) {
    const relabel = weight > 0 !== this.smoothing > 0;
    this.smoothing = weight;
    if (!this.plot) return;
    if (!relabel) return this.redraw();
    // Turning smoothing on or off shows or hides the raw line and renames the other: build the plot
    // again, in the same zoom.
    const { min, max } = this.plot.scales.x;
    this.plot.destroy();
    this.plot = null;
    this.body.replaceChildren();
    this.create();
    if (this.zoomed) this.plot.setScale("x", { min, max });
  }

  resetZoom() {
    this.zoomed = false;
    if (this.plot) this.plot.setData(this.plot.data, true);
  }

  resize() {
    if (!this.plot) {
      if (this.body.clientWidth > 0) this.create();
      return;
    }
    const width = this.body.clientWidth;
    if (width > 0 && width !== this.plot.width) this.plot.setSize({ width, height: this.height });
  }

  destroy() {
    this.resizer.disconnect();
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}

/** The "Smoothing" slider; calls onChange(weight) as it moves. */
export function smoothingSlider(value, onChange) {
  const out = h("output", { class: "slider-value" }, value.toFixed(2));
  const input = h("input", {
    type: "range", min: "0", max: "0.99", step: "0.01", value: String(value), "aria-label": "EMA smoothing",
    testid: "smoothing",
    oninput: () => {
      out.textContent = Number(input.value).toFixed(2);
      onChange(Number(input.value));
    },
  });
  return h("label", { class: "slider", title: "Exponential moving average weight (0 = raw values)" }, "Smoothing ", input, out);
}
