// A run's profile: where the mean step's time goes (a stacked bar and a table of its phases), its idle
// times and rates, and its memory peaks; the same numbers `rllm profile RUN` prints (docs/profiling.md).

import { getJSON } from "./api.js";
import { enc, errorPanel, fmtNum, h, loading, mount } from "./util.js";

// The loop's phases in order (time/<name>_s); "other" is what the step spends outside them.
const PHASES = ["data", "rollout", "refill", "train", "sync"];
const TRAIN_PARTS = ["prepare", "old_logprobs", "ref_logprobs", "forward_backward", "optim"];
const COLORS = { data: "#a855f7", rollout: "#2563eb", refill: "#0ea5e9", train: "#f59e0b", sync: "#10b981", other: "#9ca3af" };
const RATES = ["perf/rollout_tokens_per_s", "perf/train_tokens_per_s", "perf/train_tflops", "perf/mfu"];

/** Mean of a series' values, leaving out the first (warm-up) step when three or more were logged. */
export function stepMean(points) {
  const values = (points || []).map(([, v]) => v).filter((v) => typeof v === "number");
  const measured = values.length >= 3 ? values.slice(1) : values;
  return measured.length ? measured.reduce((a, b) => a + b, 0) / measured.length : null;
}

export function profileTab(el, run) {
  mount(el, loading());
  const timeKeys = ["step", ...PHASES, ...TRAIN_PARTS, "trainer_idle", "sampler_idle"].map((k) => `time/${k}_s`);
  const memoryKeys = run.metric_keys.filter((k) => k.startsWith("perf/") && k.endsWith("_gb"));
  const keys = [...timeKeys, ...RATES, ...memoryKeys].filter((k) => run.metric_keys.includes(k));
  if (!keys.includes("time/step_s")) {
    mount(el, h("div", { class: "panel muted" }, "No step timings yet: the profile appears once a training step has logged."));
    return () => {};
  }
  getJSON(`runs/${enc(run.id)}/metrics`, { keys: keys.join(",") })
    .then((body) => mount(el, drawProfile(body.series)))
    .catch((error) => mount(el, errorPanel(error)));
  return () => {};
}

function drawProfile(series) {
  const mean = (key) => stepMean(series[key]);
  const step = mean("time/step_s") || 0;
  const phases = PHASES.map((p) => [p, mean(`time/${p}_s`) || 0]);
  phases.push(["other", Math.max(0, step - phases.reduce((a, [, s]) => a + s, 0))]);
  const share = (s) => (step > 0 ? (100 * s) / step : 0);
  const bar = h("div", { class: "phase-bar", testid: "phase-bar" }, phases.filter(([, s]) => s > 0).map(([p, s]) =>
    h("div", { class: "phase-seg", title: `${p}: ${s.toFixed(3)} s (${share(s).toFixed(0)} %)`, style: `width:${share(s)}%;background:${COLORS[p]}` })));
  const row = (label, s, indent) => h("tr", {},
    h("td", { class: indent ? "mono indent" : "mono" }, label),
    h("td", { class: "num" }, s.toFixed(3)), h("td", { class: "num" }, `${share(s).toFixed(0)} %`));
  const rows = [];
  for (const [p, s] of phases) {
    if (!(s > 0)) continue;
    rows.push(row(h("span", {}, h("span", { class: "swatch", style: `background:${COLORS[p]}` }), p), s, false));
    if (p === "train") for (const part of TRAIN_PARTS) if (mean(`time/${part}_s`) > 0) rows.push(row(part, mean(`time/${part}_s`), true));
  }
  for (const idle of ["trainer_idle", "sampler_idle"]) if (mean(`time/${idle}_s`) !== null) rows.push(row(idle.replace("_", " "), mean(`time/${idle}_s`), false));
  const extra = [...RATES.filter((k) => series[k]).map((k) => [k, k === "perf/mfu" ? `${(100 * mean(k)).toFixed(1)} %` : fmtNum(mean(k))]),
    ...Object.keys(series).filter((k) => k.endsWith("_gb")).sort()
      .map((k) => [k, `${Math.max(...series[k].map(([, v]) => v)).toFixed(2)} GB (peak)`])];
  return h("div", { testid: "profile" },
    h("div", { class: "card pad" }, h("h2", {}, `Mean step: ${step.toFixed(2)} s`), bar,
      h("table", { class: "table", testid: "phase-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Phase"), h("th", { class: "num" }, "s / step"), h("th", { class: "num" }, "Share"))),
        h("tbody", {}, rows))),
    extra.length
      ? h("div", { class: "table-wrap card" }, h("table", { class: "table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Rate or memory"), h("th", { class: "num" }, "Value"))),
        h("tbody", {}, extra.map(([k, v]) => h("tr", {}, h("td", { class: "mono" }, k), h("td", { class: "num" }, v))))))
      : null,
    h("div", { class: "muted small" }, "Means over the steps (the first left out when there are three or more); ",
      h("code", {}, "rllm profile RUN"), " prints the same with advice."));
}
