// The token view of one LLM call: every token coloured by rollout logprob, advantage, loss mask or
// the trainer-minus-rollout logprob difference, with the values in a tooltip and the drift point marked.

import { getJSON } from "./api.js";
import { enc, errorPanel, fmtNum, h, loading, mount, prefs } from "./util.js";

/**
 * Colour modes. Each maps a token to a background colour (or "" for none) and describes its legend.
 * Logprobs are shown as probabilities p = exp(logprob): the rollout's confidence in what it sampled.
 */
const MODES = {
  logprob: {
    label: "rollout logprob",
    legend: ["p = exp(logprob): ", swatchRange("hsl(0 75% 55% / .45)", "hsl(120 60% 45% / .35)"), " low → high"],
    colour: (t) => (t.logprob === null ? "" : `hsl(${Math.round(120 * Math.exp(t.logprob))} 70% 50% / .38)`),
  },
  advantage: {
    label: "advantage",
    legend: [swatchRange("hsl(0 75% 55% / .55)", "hsl(140 60% 42% / .5)"), " negative → positive (scaled to the largest |advantage| here)"],
    colour: (t, scale) => {
      if (t.advantage === null || t.advantage === 0) return "";
      const strength = 0.12 + 0.6 * Math.min(1, Math.abs(t.advantage) / (scale.advantage || 1));
      return t.advantage > 0 ? `hsl(140 60% 42% / ${strength})` : `hsl(0 75% 55% / ${strength})`;
    },
  },
  mask: {
    label: "loss mask",
    legend: [h("span", { class: "swatch", style: { background: "hsl(217 90% 60% / .35)" } }), " trained on (mask 1)   ",
      h("span", { class: "swatch swatch-empty" }), " not trained on (mask 0: prompt or spliced-in environment text)"],
    colour: (t) => (t.mask ? "hsl(217 90% 60% / .35)" : ""),
  },
  diff: {
    label: "trainer − rollout logprob",
    legend: ["|trainer − rollout|: ", swatchRange("hsl(30 95% 55% / .08)", "hsl(30 95% 55% / .8)"), " 0 → ≥ 1 nat (tokens without both values stay blank)"],
    colour: (t) => {
      const d = diff(t);
      return d === null ? "" : `hsl(30 95% 55% / ${0.08 + 0.72 * Math.min(1, Math.abs(d))})`;
    },
  },
};

function swatchRange(from, to) {
  return h("span", { class: "swatch swatch-range", style: { background: `linear-gradient(90deg, ${from}, ${to})` } });
}

function diff(token) {
  return token.logprob === null || token.trainer_logprob === null || token.logprob === undefined || token.trainer_logprob === undefined
    ? null : token.trainer_logprob - token.logprob;
}

/** A token's text as shown inline: line breaks and tabs made visible, empty (special) tokens by id. */
function display(token) {
  if (!token.text) return `⟨${token.id}⟩`;
  return token.text.replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
}

/** The token view of trajectory `trajectory`, step `step` of an episode. Returns {el, destroy}. */
export function tokenView(episodeId, trajectory, step) {
  const el = h("div", { class: "token-view card", testid: "token-view" }, loading("Loading tokens…"));
  const tooltip = h("div", { class: "token-tooltip", testid: "token-tooltip", hidden: true });
  document.body.append(tooltip);
  let data = null;
  let mode = prefs.get("tokenMode", "logprob");
  let showPrompt = prefs.get("tokenShowPrompt", false);

  const draw = () => {
    const tokens = data.tokens;
    const hasTrainer = tokens.some((t) => t.trainer_logprob !== null && t.trainer_logprob !== undefined);
    if (mode === "diff" && !hasTrainer) mode = "logprob";
    const scale = { advantage: Math.max(0, ...tokens.map((t) => Math.abs(t.advantage || 0))) };
    const select = h("select", { class: "input", testid: "token-colour", onchange: () => {
      mode = select.value;
      prefs.set("tokenMode", mode);
      draw();
    } }, Object.entries(MODES).map(([id, m]) => h("option", {
      value: id, disabled: id === "diff" && !hasTrainer,
      title: id === "diff" && !hasTrainer ? "no trainer logprobs stored for this call" : "",
    }, m.label)));
    select.value = mode;
    const promptToggle = h("input", { type: "checkbox", checked: showPrompt, onchange: () => {
      showPrompt = promptToggle.checked;
      prefs.set("tokenShowPrompt", showPrompt);
      draw();
    } });

    const text = h("div", { class: "token-text" });
    const frag = document.createDocumentFragment();
    const nPrompt = tokens.filter((t) => t.is_prompt).length;
    tokens.forEach((token, i) => {
      if (token.is_prompt && !showPrompt) return;
      const span = document.createElement("span");
      span.className = token.is_prompt ? "tok tok-prompt" : token.mask ? "tok" : "tok tok-unmasked";
      if (i === data.drift_at) span.className += " tok-drift";
      span.dataset.testid = "token";
      span.dataset.index = String(i);
      span.textContent = display(token);
      if (!token.is_prompt) span.style.backgroundColor = MODES[mode].colour(token, scale);
      frag.append(span);
    });
    text.append(frag);

    const responseTokens = tokens.filter((t) => !t.is_prompt);
    const stats = summary(responseTokens);
    const drift = data.drift_at !== null && data.drift_at !== undefined ? tokens[data.drift_at] : null;
    mount(el,
      h("div", { class: "token-toolbar" },
        h("label", {}, "Colour by ", select),
        nPrompt ? h("label", {}, promptToggle, ` show the ${nPrompt} prompt tokens`) : null,
        h("span", { class: "muted" }, stats)),
      h("div", { class: "token-legend muted" }, MODES[mode].legend),
      drift ? h("div", { class: "panel warn-panel drift-note" }, "Trainer and rollout logprobs drift apart from token ",
        h("a", { href: "#", onclick: (event) => { event.preventDefault(); jumpTo(text, data.drift_at); } },
          drift.is_prompt ? `prompt token ${data.drift_at}` : `response token ${data.drift_at - nPrompt}`),
        ` (${JSON.stringify(drift.text)}, trainer − rollout = ${fmtNum(diff(drift))}), marked `, h("span", { class: "tok tok-drift" }, "like this"), ".")
        : null,
      text);
  };

  el.addEventListener("mouseover", (event) => {
    const span = event.target.closest("[data-testid=token]");
    if (!span || !data) return;
    const index = Number(span.dataset.index);
    const nPrompt = data.tokens.filter((t) => t.is_prompt).length;
    showTooltip(tooltip, span, data.tokens[index], index, index - nPrompt, data.drift_at);
  });
  el.addEventListener("mouseout", (event) => {
    if (event.target.closest("[data-testid=token]")) tooltip.hidden = true;
  });

  getJSON(`episodes/${enc(episodeId)}/tokens`, { trajectory, step })
    .then((body) => {
      data = body;
      if (!data.tokens.length) mount(el, h("div", { class: "muted" }, "No tokens stored for this call."));
      else draw();
    })
    .catch((error) => mount(el, errorPanel(error)));
  return { el, destroy: () => tooltip.remove() };
}

function summary(tokens) {
  const lps = tokens.map((t) => t.logprob).filter((v) => v !== null && v !== undefined);
  const trained = tokens.filter((t) => t.mask).length;
  const diffs = tokens.map(diff).filter((d) => d !== null).map(Math.abs);
  const parts = [`${tokens.length} response tokens, ${trained} trained on`];
  if (lps.length) parts.push(`mean logprob ${fmtNum(lps.reduce((a, b) => a + b, 0) / lps.length)}`);
  if (diffs.length) parts.push(`max |trainer − rollout| ${fmtNum(Math.max(...diffs))}`);
  return parts.join(" · ");
}

function jumpTo(container, index) {
  const span = container.querySelector(`[data-index="${index}"]`);
  if (!span) return;
  span.scrollIntoView({ block: "center", behavior: "smooth" });
  span.classList.add("tok-flash");
  setTimeout(() => span.classList.remove("tok-flash"), 1200);
}

function showTooltip(tooltip, span, token, index, responseIndex, driftAt) {
  const row = (label, value) => h("tr", {}, h("th", {}, label), h("td", {}, value));
  const d = diff(token);
  mount(tooltip,
    h("div", { class: "tt-title mono" }, JSON.stringify(token.text), h("span", { class: "muted" },
      token.is_prompt ? `  prompt token ${index} · id ${token.id}` : `  response token ${responseIndex} · id ${token.id}`)),
    h("table", {},
      row("rollout logprob", token.logprob === null || token.logprob === undefined ? "—" : `${fmtNum(token.logprob)}  (p = ${fmtNum(Math.exp(token.logprob), 3)})`),
      row("trainer logprob", fmtNum(token.trainer_logprob)),
      d === null ? null : row("trainer − rollout", fmtNum(d)),
      row("advantage", fmtNum(token.advantage)),
      row("loss mask", token.is_prompt ? "0 (prompt)" : String(token.mask))),
    index === driftAt ? h("div", { class: "tt-drift" }, "drift point: trainer and rollout disagree from here") : null);
  tooltip.hidden = false;
  const box = span.getBoundingClientRect();
  const width = tooltip.offsetWidth;
  const left = Math.min(window.innerWidth - width - 8, Math.max(8, box.left));
  const below = box.bottom + 6 + tooltip.offsetHeight < window.innerHeight;
  tooltip.style.left = `${left + window.scrollX}px`;
  tooltip.style.top = `${(below ? box.bottom + 6 : box.top - tooltip.offsetHeight - 6) + window.scrollY}px`;
}
