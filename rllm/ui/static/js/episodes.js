// The episode browser of a run (filters + paginated table) and the view of one episode:
// trajectories → steps → the chat messages of each LLM call, with the token view on demand.

import { getJSON } from "./api.js";
import { tokenView } from "./tokens.js";
import {
  buildQuery, correctMark, enc, errorPanel, fmtNum, h, jsonTree, loading, mount, pager,
} from "./util.js";

const PAGE = 50;
const TERMINATIONS = ["env_done", "max_turns", "max_response_length", "timeout", "error"];
const FILTERS = ["step", "min_reward", "max_reward", "role", "termination", "correct", "q"];

/** The Episodes tab of a run page; its filters live in the URL (#/runs/ID/episodes?step=3&q=...). */
export function episodeBrowser(el, run, query) {
  const state = Object.fromEntries(FILTERS.map((key) => [key, query[key] || ""]));
  let offset = Number(query.offset || 0);
  let requestId = 0;
  let searchTimer = null;
  const rolesSeen = new Set();
  const results = h("div", {}, loading());
  const roleList = h("datalist", { id: "roles-seen" });

  const setUrl = () => {
    // replaceState: the filters are bookmarkable without re-rendering the whole run page.
    history.replaceState(null, "", `#/runs/${enc(run.id)}/episodes${buildQuery({ ...state, offset: offset || "" })}`);
  };
  const change = (key, value) => {
    state[key] = value;
    offset = 0;
    setUrl();
    load();
  };
  const field = (label, input) => h("label", { class: "field" }, h("span", { class: "field-label" }, label), input);
  const stepSelect = h("select", { class: "input", onchange: () => change("step", stepSelect.value) }, h("option", { value: "" }, "all"));
  const number = (key, placeholder) => h("input", {
    class: "input input-num", type: "number", step: "any", placeholder, value: state[key],
    onchange: (event) => change(key, event.target.value),
  });
  const termination = h("select", { class: "input", onchange: () => change("termination", termination.value) },
    h("option", { value: "" }, "any"), TERMINATIONS.map((t) => h("option", { value: t }, t)));
  termination.value = state.termination;
  const correct = h("select", { class: "input", onchange: () => change("correct", correct.value) },
    h("option", { value: "" }, "any"), h("option", { value: "true" }, "correct"), h("option", { value: "false" }, "incorrect"));
  correct.value = state.correct;
  const search = h("input", {
    class: "input", type: "search", placeholder: "question or response text…", value: state.q, testid: "episode-search",
    oninput: () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => change("q", search.value.trim()), 300);
    },
  });
  const role = h("input", { class: "input", placeholder: "any", list: "roles-seen", value: state.role, onchange: () => change("role", role.value.trim()) });

  mount(el,
    h("form", { class: "filters card", onsubmit: (event) => event.preventDefault() },
      field("Step", stepSelect),
      field("Reward ≥", number("min_reward", "min")),
      field("Reward ≤", number("max_reward", "max")),
      field("Role", role), roleList,
      field("Termination", termination),
      field("Correct", correct),
      field("Search", search),
      h("button", { class: "btn", type: "button", onclick: () => { location.hash = `#/runs/${enc(run.id)}/episodes`; } }, "Clear")),
    results);

  getJSON(`runs/${enc(run.id)}/steps`).then((body) => {
    for (const step of body.steps.slice().reverse()) stepSelect.append(h("option", { value: String(step) }, `step ${step}`));
    stepSelect.value = state.step;
  }).catch(() => { /* the step list is a convenience; typing filters still work */ });

  const load = async () => {
    const mine = ++requestId;
    let body;
    try {
      body = await getJSON(`runs/${enc(run.id)}/episodes`, { ...state, limit: PAGE, offset });
    } catch (error) {
      if (mine === requestId) mount(results, errorPanel(error, load));
      return;
    }
    if (mine !== requestId) return; // a newer filter change is already on its way
    for (const episode of body.episodes) for (const r of episode.roles || []) rolesSeen.add(r);
    mount(roleList, Array.from(rolesSeen).map((r) => h("option", { value: r })));
    drawTable(results, run, body, offset, (next) => { offset = next; setUrl(); load(); });
  };
  load();
  return () => clearTimeout(searchTimer);
}

function drawTable(el, run, body, offset, onPage) {
  if (!body.total && offset === 0) {
    mount(el, h("div", { class: "panel muted", testid: "episodes-empty" },
      "No stored episode matches these filters.",
      run.status === "running" ? " Episodes are stored at the end of each training step." : ""));
    return;
  }
  const rows = body.episodes.map((episode) => h("tr", {
    class: `clickable${episode.error ? " row-error" : ""}`, testid: "episode-row", dataset: { episodeId: episode.id },
    onclick: () => { location.hash = `#/episodes/${enc(episode.id)}`; },
  },
  h("td", { class: "num" }, episode.step ?? "—"),
  h("td", { class: "mono ellipsis", title: episode.task_id }, episode.task_id),
  h("td", { class: "num" }, fmtNum(episode.reward)),
  h("td", {}, correctMark(episode.is_correct)),
  h("td", { title: episode.error || "" }, h("span", { class: `term term-${episode.termination_reason}` }, episode.termination_reason)),
  h("td", {}, (episode.roles || []).join(", ")),
  h("td", { class: "num" }, episode.n_steps),
  h("td", { class: "preview" }, h("a", { href: `#/episodes/${enc(episode.id)}` }, episode.preview || "(empty response)"))));
  mount(el,
    h("div", { class: "table-wrap card" }, h("table", { class: "table", testid: "episodes-table" },
      h("thead", {}, h("tr", {}, h("th", { class: "num" }, "Step"), h("th", {}, "Task"), h("th", { class: "num" }, "Reward"),
        h("th", {}, "Correct"), h("th", {}, "Termination"), h("th", {}, "Roles"), h("th", { class: "num" }, "Calls"), h("th", {}, "Last response"))),
      h("tbody", {}, rows))),
    pager({ offset, limit: PAGE, count: body.episodes.length, total: body.total, onPage }));
}

/** #/episodes/EID[?t=I&s=J] — one episode; t/s open the token view of trajectory I, step J. */
export function episodeView(root, { episodeId, query }) {
  let openTokens = null;
  let destroyed = false;
  mount(root, loading());

  const load = async () => {
    let episode;
    try {
      episode = await getJSON(`episodes/${enc(episodeId)}`);
    } catch (error) {
      if (!destroyed) mount(root, errorPanel(error, load));
      return;
    }
    if (destroyed) return;
    const toggleTokens = (slot, t, s, button) => {
      const same = openTokens && openTokens.t === t && openTokens.s === s;
      if (openTokens) {
        openTokens.view.destroy();
        openTokens.slot.replaceChildren();
        openTokens.button.textContent = "Tokens";
        openTokens = null;
      }
      history.replaceState(null, "", `#/episodes/${enc(episodeId)}${same ? "" : buildQuery({ t, s })}`);
      if (same) return;
      const view = tokenView(episodeId, t, s);
      slot.append(view.el);
      button.textContent = "Hide tokens";
      openTokens = { t, s, view, slot, button };
    };
    const fact = (label, value) => h("div", { class: "fact" }, h("div", { class: "fact-label" }, label), h("div", { class: "fact-value" }, value));
    const trajectories = episode.trajectories.map((trajectory, t) => h("section", { class: "trajectory card" },
      h("h2", {}, trajectory.name, h("span", { class: "muted small" },
        `  reward ${fmtNum(trajectory.reward)} · ${trajectory.steps.length} call${trajectory.steps.length === 1 ? "" : "s"}`)),
      trajectory.steps.map((step, s) => stepCard(step, t, s, trajectory.steps[s - 1], (slot, button) => toggleTokens(slot, t, s, button)))));
    mount(root, h("section", { testid: "episode-view" },
      h("div", { class: "crumbs" }, h("a", { href: `#/runs/${enc(episode.run_id)}/episodes` }, `← episodes of ${episode.run_id}`)),
      h("div", { class: "page-head" }, h("h1", {}, "Episode ", h("span", { class: "mono" }, episode.id.slice(0, 12)))),
      h("div", { class: "facts" },
        fact("Task", h("span", { class: "mono" }, episode.task_id)),
        fact("Step", episode.step ?? "—"),
        fact("Reward", fmtNum(episode.reward)),
        fact("Correct", correctMark(episode.is_correct)),
        fact("Termination", h("span", { class: `term term-${episode.termination_reason}` }, episode.termination_reason))),
      episode.error ? h("div", { class: "panel error-panel" }, h("strong", {}, "Error: "), h("pre", { class: "pre" }, episode.error)) : null,
      h("details", { class: "card pad", open: true }, h("summary", {}, "Task"), jsonTree(episode.task, { open: 1 })),
      Object.keys(episode.info || {}).length ? h("details", { class: "card pad" }, h("summary", {}, "Info"), jsonTree(episode.info)) : null,
      trajectories.length ? trajectories : h("div", { class: "panel muted" }, "This episode has no trajectory (it failed before its first call).")));
    // Open the token view named in the URL (a shared link).
    if (query.t !== undefined && query.s !== undefined) {
      const button = root.querySelector(`[data-tokens="${Number(query.t)}:${Number(query.s)}"]`);
      if (button) button.click();
    }
  };
  load();
  return () => {
    destroyed = true;
    if (openTokens) openTokens.view.destroy();
  };
}

/** One LLM call: its prompt messages (earlier turns folded away), its response, reward and advantage. */
function stepCard(step, t, s, previous, onTokens) {
  const messages = step.messages || [];
  const shared = previous ? sharedPrefix(previous.messages || [], messages) : 0;
  const slot = h("div", {});
  const button = h("button", { class: "btn btn-small", testid: "tokens-button", dataset: { tokens: `${t}:${s}` } }, "Tokens");
  button.onclick = () => onTokens(slot, button);
  return h("div", { class: "step" },
    h("div", { class: "step-head" },
      h("strong", {}, `Call ${s}`),
      h("span", { class: "muted" }, `reward ${fmtNum(step.reward)} · advantage ${fmtNum(step.advantage)}`),
      button),
    shared ? h("details", { class: "folded" }, h("summary", { class: "muted" }, `${shared} earlier message${shared === 1 ? "" : "s"} (as in call ${s - 1})`),
      messages.slice(0, shared).map(messageBubble)) : null,
    messages.slice(shared).map(messageBubble),
    h("div", { class: "msg msg-response" }, h("div", { class: "msg-role" }, "response"), h("div", { class: "msg-content" }, step.response || "")),
    Object.keys(step.info || {}).length ? h("details", { class: "folded" }, h("summary", { class: "muted" }, "step info"), jsonTree(step.info)) : null,
    slot);
}

function sharedPrefix(before, after) {
  let n = 0;
  while (n < before.length && n < after.length && JSON.stringify(before[n]) === JSON.stringify(after[n])) n++;
  return n;
}

/** An OpenAI chat message: text (or content parts), tool calls with their arguments, tool results. */
function messageBubble(message) {
  const role = message.role || "?";
  const content = contentText(message.content);
  const parts = [h("div", { class: "msg-role" }, role,
    message.name ? h("span", { class: "muted" }, ` · ${message.name}`) : null,
    message.tool_call_id ? h("span", { class: "muted" }, ` · result of ${message.tool_call_id}`) : null)];
  if (content) {
    parts.push(role === "system" && content.length > 400
      ? h("details", {}, h("summary", { class: "muted" }, `${content.slice(0, 120)}…`), h("div", { class: "msg-content" }, content))
      : h("div", { class: "msg-content" }, content));
  }
  for (const call of message.tool_calls || []) {
    const fn = call.function || {};
    parts.push(h("div", { class: "tool-call" },
      h("span", { class: "tool-name" }, `⚙ ${fn.name || "?"}`), h("span", { class: "muted small" }, call.id ? `  ${call.id}` : ""),
      h("pre", { class: "pre" }, prettyArguments(fn.arguments))));
  }
  return h("div", { class: `msg msg-${role}` }, parts);
}

function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (part.type === "text" ? part.text : `[${part.type}]`)).join("\n");
  return JSON.stringify(content);
}

function prettyArguments(args) {
  if (typeof args !== "string") return JSON.stringify(args, null, 2);
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}
