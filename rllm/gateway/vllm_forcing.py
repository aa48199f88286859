"""Which tokens of a vLLM reply its tool-call grammar forced, read from what the request forced.

Under a forced ``tool_choice`` (``"required"`` or a named function) vLLM 0.32, started with
``--tool-call-parser hermes``, constrains the whole reply with a grammar (an xgrammar structural tag,
``vllm/tool_parsers/structural_tag_registry.py``) to tool calls of this shape::

    <tool_call>⏎{"name": "NAME", "arguments": ARGS}⏎</tool_call>      or, without both ⏎,
    <tool_call>{"name": "NAME", "arguments": ARGS}</tool_call>

NAME is the named function (or, under ``"required"``, one of the tools' names), ARGS a JSON value (held to
the tool's parameter schema where the tool is ``strict``). A named call is the only one, so the
end-of-sequence token after it is forced too; under ``"required"`` the model may go on with another call
or stop.

**Forced** here means text the request fixed: the format's literal pieces, the name, and (named) the final
end of sequence. Their tokens are recorded as not sampled (``completion_mask`` 0), like the local engine's
forced tokens; every other token (the arguments, the choice of the ⏎, what follows a ``"required"`` call)
counts as sampled. The decision is read from the reply's own token strings against the request, never from
the logprob value: a sampled token whose probability rounds to 1 also reads logprob 0.0.

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
from typing import Any

logger = logging.getLogger(__name__)

_START, _END = "<tool_call>", "</tool_call>"
_JSON = json.JSONDecoder()


def forced_reply_mask(
    token_strings: list[str] | None, n_tokens: int, tools: list[dict[str, Any]], tool_choice: Any
) -> list[int]:
    """``completion_mask`` of a vLLM reply of ``n_tokens`` tokens to a forced ``tool_choice``; without one
    token string per token there is no telling which tokens were forced, so none is trained on (every
    token 0), and a warning says so."""
    if token_strings is None or len(token_strings) != n_tokens:
        logger.warning(
            "a vLLM reply to a forced tool_choice has %s token strings for %d tokens: every token is recorded "
            "as not sampled (mask 0)",
            "no" if token_strings is None else len(token_strings),
            n_tokens,
        )
        return [0] * n_tokens
    return forced_tool_choice_mask(token_strings, tools, tool_choice)


def forced_tool_choice_mask(
    token_strings: list[str], tools: list[dict[str, Any]], tool_choice: Any
) -> list[int]:
    """``completion_mask`` of one vLLM reply to a forced ``tool_choice``: 0 for each token the request
    forced, 1 for each sampled one (see the module docstring)."""
    named = isinstance(tool_choice, dict)
    names = (
        [str((tool_choice.get("function") or {}).get("name", ""))]
        if named
        else [str((t.get("function") or {}).get("name", "")) for t in tools]
    )
    text = "".join(token_strings)
    forced = _forced_characters(text, names, named)
    if forced is None:
        logger.warning(
            "a vLLM reply to a forced tool_choice does not read as the hermes tool-call format "
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


def _forced_characters(text: str, names: list[str], named: bool) -> list[bool] | None:
    """Per character of ``text``: whether the request forced it; None when ``text`` does not open with a
    call of the expected format."""
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
    while (m := begin.match(text, pos)) is not None:
        calls += 1
        force(m.start(), m.start(1))  # <tool_call>
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
        if named:
            force(pos, len(text))  # a named call is the only one: the end of sequence is forced
            break
    return forced if calls else None
