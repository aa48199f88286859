"""Which tokens of a vLLM reply its tool-call grammar forced, read from what the request forced.

vLLM 0.32, started with ``--tool-call-parser hermes`` (and its default ``--tool-strict-level auto``),
constrains a reply with a grammar (an xgrammar structural tag, ``vllm/tool_parsers/structural_tag_registry.py``)
whenever the request says how calls must come out (:func:`tool_grammar`):

- **forced**: ``tool_choice`` ``"required"`` or a named function. The whole reply is tool calls::

    <tool_call>⏎{"name": "NAME", "arguments": ARGS}⏎</tool_call>      or, without both ⏎,
    <tool_call>{"name": "NAME", "arguments": ARGS}</tool_call>

- **triggered**: ``tool_choice`` ``"auto"`` (or unset) with a ``strict`` tool, or with
  ``parallel_tool_calls: false``. The reply is free text, but once the model writes ``<tool_call>`` the
  rest of that call must follow the same shape; then free text again.

NAME is the named function (or one of the tools' names), ARGS a JSON value (held to the tool's parameter
schema where the tool is ``strict``). A call that must be the only one (a named function, or
``parallel_tool_calls: false``) ends the reply: the end-of-sequence token after it is forced too; under
``"required"`` the model may go on with another call or stop.

**Forced** here means text the request fixed: the format's literal pieces after ``<tool_call>``, the name,
the closing and (a single call) the final end of sequence; under *forced* also the opening ``<tool_call>``,
which under *triggered* is the model's own choice. Their tokens are recorded as not sampled
(``completion_mask`` 0), like the local engine's forced tokens; every other token (the arguments, the
choice of the ⏎, free text) counts as sampled. The decision is read from the reply's own token strings
against the request, never from the logprob value: a sampled token whose probability rounds to 1 also reads
logprob 0.0.

A token is forced when every character of it lies in forced text. The forced text may be spelt in several
pieces (the grammar allows any tokenization of a literal), so a forced token's vLLM logprob is
renormalised over the allowed pieces: a reason more to leave it out of the loss. A reply that does not
read as this format (another tool parser) is recorded with every token masked, and a warning says why: its
logprobs are the grammar's, which the trainer cannot reproduce.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Literal

logger = logging.getLogger(__name__)

_START, _END = "<tool_call>", "</tool_call>"
_JSON = json.JSONDecoder()


Mode = Literal["forced", "triggered"]


def _strict(tool: dict[str, Any]) -> bool:
    return bool((tool.get("function") or {}).get("strict"))


def tool_grammar(
    tools: list[dict[str, Any]] | None, tool_choice: Any, parallel_tool_calls: bool | None
) -> Mode | None:
    """Whether vLLM 0.32 (hermes, ``--tool-strict-level auto``) holds a chat reply's tool calls to a grammar,
    and how: ``"forced"`` (the reply is calls), ``"triggered"`` (free text, calls held once begun) or
    ``None`` (no grammar: vLLM parses whatever the model wrote)."""
    if not tools or tool_choice == "none":
        return None
    if tool_choice == "required" or isinstance(tool_choice, dict):
        return "forced"
    if parallel_tool_calls is False or any(_strict(t) for t in tools):
        return "triggered"
    return None


def forced_reply_mask(
    token_strings: list[str] | None,
    n_tokens: int,
    tools: list[dict[str, Any]],
    tool_choice: Any,
    parallel_tool_calls: bool | None = None,
) -> list[int]:
    """``completion_mask`` of a vLLM reply of ``n_tokens`` tokens sampled under a tool-call grammar
    (:func:`tool_grammar`); without one token string per token there is no telling which tokens were
    forced, so none is trained on (every token 0), and a warning says so."""
    if token_strings is None or len(token_strings) != n_tokens:
        logger.warning(
            "a vLLM reply under a tool-call grammar has %s token strings for %d tokens: every token is "
            "recorded as not sampled (mask 0)",
            "no" if token_strings is None else len(token_strings),
            n_tokens,
        )
        return [0] * n_tokens
    return forced_tool_choice_mask(token_strings, tools, tool_choice, parallel_tool_calls)


def forced_tool_choice_mask(
    token_strings: list[str],
    tools: list[dict[str, Any]],
    tool_choice: Any,
    parallel_tool_calls: bool | None = None,
) -> list[int]:
    """``completion_mask`` of one vLLM reply under a tool-call grammar: 0 for each token the request
    forced, 1 for each sampled one (see the module docstring)."""
    mode = tool_grammar(tools, tool_choice, parallel_tool_calls)
    if mode is None:
        return [1] * len(token_strings)
    named = isinstance(tool_choice, dict)
    names = (
        [str((tool_choice.get("function") or {}).get("name", ""))]
        if named
        else [str((t.get("function") or {}).get("name", "")) for t in tools]
    )
    text = "".join(token_strings)
    single = named or parallel_tool_calls is False
    forced = _forced_characters(text, names, single=single, triggered=mode == "triggered")
    if forced is None:
        logger.warning(
            "a vLLM reply under a tool-call grammar does not read as the hermes tool-call format "
            "(--tool-call-parser hermes): its %d tokens are recorded as not sampled (mask 0), since their "
            "logprobs are the grammar's; reply starts %r",
            len(token_strings),
            text[:80],
        )
        return [0] * len(token_strings)
    mask, pos = [], 0
    for s in token_strings:
        span = forced[pos : pos + len(s)]
        mask.append(0 if span and all(span) else 1)
        pos += len(s)
    return mask


def _forced_characters(text: str, names: list[str], *, single: bool, triggered: bool) -> list[bool] | None:
    """Per character of ``text``: whether the request forced it; None when ``text`` does not read as the
    grammar allows (forced: it does not open with a call; triggered: a ``<tool_call>`` not followed by the
    rest of a call's opening)."""
    begin = re.compile(
        re.escape(_START)
        + r"(\n?)"
        + re.escape('{"name": "')
        + "("
        + "|".join(map(re.escape, names))
        + ")"
        + re.escape('", "arguments": ')
    )
    forced = [False] * len(text)

    def force(start: int, end: int) -> None:
        forced[start:end] = [True] * (end - start)

    pos, calls = 0, 0
    while True:
        at = text.find(_START, pos) if triggered else pos
        if at < 0:  # triggered: no further call, the rest is free text
            return forced
        m = begin.match(text, at)
        if m is None:
            if triggered:  # the grammar allows nothing else after the trigger, unless cut short in it
                rest = text[at:]
                openings = [
                    _START + nl + '{"name": "' + n + '", "arguments": ' for nl in ("", "\n") for n in names
                ]
                return forced if any(o.startswith(rest) for o in openings) else None
            return forced if calls else None
        calls += 1
        if not triggered:
            force(m.start(), m.start(1))  # <tool_call> (under a triggered grammar, the model's choice)
        force(m.end(1), m.end())  # {"name": "NAME", "arguments": (the name is forced or constrained)
        try:
            _, args_end = _JSON.raw_decode(text, m.end())
        except ValueError:
            return forced  # cut short inside the arguments (max_tokens): nothing forced after them
        closing = "}" + m.group(1) + _END
        if not text.startswith(closing, args_end):
            return forced
        force(args_end, args_end + len(closing))
        pos = args_end + len(closing)
        if single:
            force(pos, len(text))  # the only call the grammar allows: the end of sequence is forced
            return forced
