// Small DOM and formatting helpers shared by every view. No framework: views build elements with h()
// and replace a container's children when their data changes.

/** Create an element: h("a", {href: "#/", class: "x", onclick: fn, dataset: {testid: "y"}}, child, ...). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "testid") el.setAttribute("data-testid", value);
    else if (key === "style" && typeof value === "object") Object.assign(el.style, value);
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace all children of `el`. */
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A number for a table cell or a tooltip: 4 significant digits, exponent for very large/small values. */
export function fmtNum(value, digits = 4) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (!Number.isFinite(value)) return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e6) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) return value.toExponential(2);
  return String(Number(value.toPrecision(digits)));
}

export function fmtPercent(value) {
  return value === null || value === undefined ? "—" : `${(value * 100).toFixed(1)} %`;
}

/** Unix seconds → local "YYYY-MM-DD HH:MM:SS". */
export function fmtTime(seconds) {
  if (!seconds) return "—";
  const d = new Date(seconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Unix seconds → "3 min ago". */
export function fmtAgo(seconds) {
  if (!seconds) return "—";
  return `${fmtDuration(Date.now() / 1000 - seconds)} ago`;
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  seconds = Math.max(0, seconds);
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
  return `${Math.floor(seconds / 86400)} d ${Math.round((seconds % 86400) / 3600)} h`;
}

/** How long a run has been going (running) or went (ended). */
export function runDuration(run) {
  if (!run.started_at) return null;
  const end = run.ended_at || (run.status === "running" ? Date.now() / 1000 : run.heartbeat_at);
  return end ? end - run.started_at : null;
}

/** The status badge: "running" reads as "live" with a pulsing dot. */
export function statusBadge(status) {
  const label = status === "running" ? "live" : status;
  return h("span", { class: `badge badge-${status}`, title: `status: ${status}` }, label);
}

export function correctMark(isCorrect) {
  if (isCorrect === true) return h("span", { class: "mark-ok", title: "correct" }, "✓");
  if (isCorrect === false) return h("span", { class: "mark-bad", title: "incorrect" }, "✗");
  return h("span", { class: "muted" }, "—");
}

/** Parse "a=1&b=x" into an object (empty values dropped). */
export function parseQuery(query) {
  const out = {};
  for (const [key, value] of new URLSearchParams(query || "")) if (value !== "") out[key] = value;
  return out;
}

/** Build "?a=1&b=x" from an object, skipping empty values; "" when nothing is left. */
export function buildQuery(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value === null || value === undefined || value === "") continue;
    search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export const enc = encodeURIComponent;

/** A collapsible, syntax-coloured view of any JSON value (used for tasks, info dicts and configs). */
export function jsonTree(value, { open = 2, depth = 0 } = {}) {
  if (value === null || typeof value !== "object") return jsonScalar(value);
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  if (entries.length === 0) return h("span", { class: "json-punct" }, Array.isArray(value) ? "[]" : "{}");
  const details = h("details", { class: "json-node", open: depth < open });
  const count = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
  details.append(h("summary", { class: "json-punct" }, count));
  const list = h("div", { class: "json-children" });
  for (const [key, child] of entries) {
    list.append(h("div", { class: "json-entry" },
      h("span", { class: "json-key" }, String(key)), h("span", { class: "json-punct" }, ": "),
      jsonTree(child, { open, depth: depth + 1 })));
  }
  details.append(list);
  return details;
}

function jsonScalar(value) {
  if (value === null) return h("span", { class: "json-null" }, "null");
  if (typeof value === "string") return h("span", { class: "json-string" }, JSON.stringify(value));
  if (typeof value === "number") return h("span", { class: "json-number" }, String(value));
  if (typeof value === "boolean") return h("span", { class: "json-bool" }, String(value));
  return h("span", {}, String(value));
}

/** A panel shown when a request failed: says what failed and how to retry. */
export function errorPanel(error, retry) {
  return h("div", { class: "panel error-panel" },
    h("strong", {}, "Could not load this page. "), h("span", {}, String(error && error.message ? error.message : error)),
    retry ? h("button", { class: "btn", onclick: retry }, "Retry") : null);
}

export function loading(text = "Loading…") {
  return h("div", { class: "loading muted" }, text);
}

/** localStorage with a JSON fallback that never throws (private windows, disabled storage). */
export const prefs = {
  get(key, fallback) {
    try {
      const raw = localStorage.getItem(`rllm-ui:${key}`);
      return raw === null ? fallback : JSON.parse(raw);
    } catch {
      return fallback;
    }
  },
  set(key, value) {
    try {
      localStorage.setItem(`rllm-ui:${key}`, JSON.stringify(value));
    } catch {
      /* storage unavailable: the preference lasts for this page only */
    }
  },
};

/**
 * "1–50 of 312  ‹ Prev  Next ›". `total` may be null (unknown): Next is then offered while a page
 * comes back full.
 */
export function pager({ offset, limit, count, total, onPage }) {
  const end = offset + count;
  const hasNext = total === null || total === undefined ? count === limit : end < total;
  const label = count === 0 ? "no rows" : `${offset + 1}–${end}${total === null || total === undefined ? "" : ` of ${total}`}`;
  return h("div", { class: "pager", testid: "pager" },
    h("span", { class: "muted" }, label),
    h("button", { class: "btn btn-small", disabled: offset === 0, onclick: () => onPage(Math.max(0, offset - limit)) }, "‹ Prev"),
    h("button", { class: "btn btn-small", disabled: !hasNext, onclick: () => onPage(offset + limit) }, "Next ›"));
}

/** Flatten a nested config into [["a.b.c", value], ...] rows (lists of scalars stay one value). */
export function flatten(value, prefix = "", out = []) {
  if (value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
    for (const [key, child] of Object.entries(value)) flatten(child, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out.push([prefix, value]);
  }
  return out;
}
