"""Tool calls in model text: parse them into OpenAI ``tool_calls``, and write them back as text.

A model that was never given a native tool format (SmolLM2's plain ChatML) is taught one in its system
prompt; a model trained with one (Qwen2.5, Hermes) writes it by itself. Either way the gateway samples
plain text, and a *tool parser* turns that text into the ``content`` and ``tool_calls`` of an OpenAI
chat response. The ``format_*`` functions are the inverse: how the same format looks when rllm renders
it into a prompt (the tool list in the system message, an assistant's earlier calls, a tool's result).

The Hermes / Qwen2.5 format, the one implemented here::

    Let me look that up.
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Users name a parser in config (``get_tool_parser("hermes")``); ``"none"`` turns tool parsing off.

This module sits at the bottom of rllm's layers (it needs only pydantic): the chat renderer
(``rllm.inference``), the gateway and the tool runtime (``rllm.tools``, which re-exports it) all use it.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
# How much of a malformed call an error message quotes back, so the model can see what it wrote.
_SNIPPET_CHARS = 200


class ToolCall(BaseModel):
    """One function call the model asked for, as an OpenAI chat response carries it.

    ``arguments`` is JSON text of an object (OpenAI sends it as a string, not a dict), so a client can
    ``json.loads`` it; ``id`` is what the agent echoes back as ``tool_call_id`` in the tool's result.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"

    def to_openai(self) -> dict[str, Any]:
        """This call as one entry of an OpenAI assistant message's ``tool_calls`` list."""
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


class _OpenAIFunction(BaseModel):
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"


class _OpenAIToolCall(BaseModel):
    """An entry of ``tool_calls`` in an incoming (OpenAI-format) assistant message."""

    id: str = ""
    type: str = "function"
    function: _OpenAIFunction


def tool_calls_from_openai(raw: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """Validate an assistant message's OpenAI ``tool_calls`` list into ``ToolCall`` values.

    Accepts ``arguments`` as JSON text (OpenAI) or as a dict (Hugging Face chat-template convention).
    Raises ``ValueError`` naming the bad entry when one lacks ``function.name``.
    """
    calls = []
    for i, item in enumerate(raw):
        try:
            parsed = _OpenAIToolCall.model_validate(item)
        except ValueError as err:
            raise ValueError(
                f"tool_calls[{i}] is not an OpenAI tool call "
                f'{{"id": ..., "type": "function", "function": {{"name": ..., "arguments": "..."}}}}: {err}'
            ) from None
        args = parsed.function.arguments
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(id=parsed.id, name=parsed.function.name, arguments=text))
    return calls


class ParsedResponse(BaseModel):
    """A sampled completion split into what the user sees and what the agent should execute.

    ``content`` is the text outside any tool call (stripped; ``None`` when nothing is left).
    ``errors`` holds one message per call the model tried to make but got wrong (bad JSON, no name, an
    unclosed tag): written for the model, so an agent loop can send it back and let the model retry.
    """

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class CallSyntax(BaseModel):
    """How a format spells one tool call, for the grammars that hold calls to their tools (the gateway's
    forced ``tool_choice`` and strict tools): ``open`` + the name as a JSON string + ``between`` + the
    arguments as a JSON object + ``close``, several calls joined by ``separator``; ``trigger`` is the text
    that starts a call inside free text (where a strict tool's grammar takes over)."""

    model_config = ConfigDict(frozen=True)

    open: str
    between: str
    close: str
    separator: str
    trigger: str


class ToolParser(Protocol):
    """Turns sampled text into a ``ParsedResponse``. Never raises on bad model output: it reports it."""

    def parse(self, text: str) -> ParsedResponse: ...

    def call_syntax(self) -> CallSyntax:
        """How a call is spelt in this format (what ``format_tool_call_text`` writes), for constraining
        calls with a grammar. Raises ``ValueError`` when the format has no tool calls."""
        ...


# --- the Hermes / Qwen2.5 format: text rendering --------------------------------------------------


def _arguments_json(arguments: str | Mapping[str, Any]) -> str:
    """``arguments`` as the JSON that goes after ``"arguments": `` in a rendered call."""
    if isinstance(arguments, Mapping):
        return json.dumps(dict(arguments), ensure_ascii=False)
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        # Not JSON (a client sent garbage back): keep it as a JSON string, which still parses.
        return json.dumps(arguments, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def format_tool_call_text(name: str, arguments: str | Mapping[str, Any]) -> str:
    """One call as the model writes it: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

    ``arguments`` is JSON text (as in OpenAI messages) or a dict. JSON text is re-serialised with
    ``json.dumps`` (``", "`` and ``": "`` separators, unicode kept), which is also how ``HermesToolParser``
    normalises what it parsed and how Qwen2.5's own template writes calls, so parse → format is stable.
    """
    payload = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {_arguments_json(arguments)}}}'
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def format_assistant_text(content: str | None, tool_calls: Sequence[ToolCall]) -> str:
    """The full text of an assistant turn: its content, then each call on its own lines.

    Joined with newlines exactly as Qwen2.5's template joins them, so a model trained on that template
    and this renderer agree on what the turn looked like. Without calls this is just ``content``.
    """
    parts = [content] if content else []
    parts += [format_tool_call_text(call.name, call.arguments) for call in tool_calls]
    return "\n".join(parts)


def format_tools_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system-prompt section that tells a model which functions exist and how to call them.

    ``tools`` is the OpenAI ``tools`` list (``{"type": "function", "function": {"name", "description",
    "parameters"}}``). Wording follows Qwen2.5 / Hermes, the format this module parses.
    """
    lines = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not function.get("name"):
            raise ValueError(
                f"tools[{i}] must be an OpenAI tool "
                f'{{"type": "function", "function": {{"name": ..., "parameters": {{...}}}}}}, got {tool!r}'
            )
        lines.append(json.dumps(dict(tool), ensure_ascii=False))
    signatures = "\n".join(lines)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        f'{TOOL_CALL_OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{TOOL_CALL_CLOSE}'
    )


def format_tool_response_text(content: str) -> str:
    """A tool's result as the model reads it: ``<tool_response>\\n...\\n</tool_response>``."""
    return f"<tool_response>\n{content}\n</tool_response>"


# --- parsers ----------------------------------------------------------------------------------------


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "…"


class HermesToolParser:
    """Parses ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen2.5).

    ``arguments`` may be an object or a string holding a JSON object; missing ``arguments`` means no
    arguments (``{}``). Each call gets a fresh ``call_<24 hex>`` id; ``id_seed`` makes the sequence of
    ids reproducible (for tests and replay), otherwise ids are random.
    """

    def __init__(self, *, id_seed: int | None = None) -> None:
        self._rng = random.Random(id_seed) if id_seed is not None else None

    def _new_id(self) -> str:
        bits = self._rng.getrandbits(96) if self._rng is not None else int(secrets.token_hex(12), 16)
        return f"call_{bits:024x}"

    def parse(self, text: str) -> ParsedResponse:
        """Split ``text`` into content, well-formed calls, and one error per malformed call."""
        content_parts: list[str] = []
        calls: list[ToolCall] = []
        errors: list[str] = []
        pos = 0
        n = 0  # calls the model attempted so far, for 1-based numbering in error messages
        while True:
            start = text.find(TOOL_CALL_OPEN, pos)
            outside = text[pos:] if start < 0 else text[pos:start]
            if TOOL_CALL_CLOSE in outside:
                errors.append(
                    f"found {TOOL_CALL_CLOSE} without an opening {TOOL_CALL_OPEN}; write each call as "
                    f'{TOOL_CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{TOOL_CALL_CLOSE}'
                )
            content_parts.append(outside)
            if start < 0:
                break
            n += 1
            body_start = start + len(TOOL_CALL_OPEN)
            end = text.find(TOOL_CALL_CLOSE, body_start)
            next_open = text.find(TOOL_CALL_OPEN, body_start)
            if end < 0 or 0 <= next_open < end:
                stop = next_open if next_open >= 0 else len(text)
                errors.append(
                    f"tool call {n} was not closed: {TOOL_CALL_OPEN} needs a matching {TOOL_CALL_CLOSE} "
                    f"after the JSON; the call was not run: {_snippet(text[body_start:stop])}"
                )
                pos = stop
                continue
            call = self._parse_block(text[body_start:end], n, errors)
            if call is not None:
                calls.append(call)
            pos = end + len(TOOL_CALL_CLOSE)
        content = "".join(content_parts).strip()
        return ParsedResponse(content=content or None, tool_calls=calls, errors=errors)

    def _parse_block(self, body: str, n: int, errors: list[str]) -> ToolCall | None:
        """One block's JSON as a ``ToolCall``, or ``None`` after appending the reason to ``errors``."""
        expected = 'write {"name": "<function name>", "arguments": {<JSON object>}}'
        try:
            value = json.loads(body)
        except json.JSONDecodeError as err:
            errors.append(
                f"tool call {n} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                f"{expected}: {_snippet(body)}"
            )
            return None
        if not isinstance(value, dict):
            errors.append(f"tool call {n} is a JSON {type(value).__name__}, not an object; {expected}")
            return None
        name = value.get("name")
        if not isinstance(name, str) or not name.strip():
            errors.append(f'tool call {n} has no "name" (a non-empty string); {expected}: {_snippet(body)}')
            return None
        arguments = value.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as err:
                errors.append(
                    f'tool call {n} ({name}): "arguments" is a string that is not valid JSON ({err.msg}); '
                    f"{expected}"
                )
                return None
        if not isinstance(arguments, dict):
            errors.append(
                f'tool call {n} ({name}): "arguments" must be a JSON object, got a JSON '
                f"{type(arguments).__name__}; {expected}"
            )
            return None
        return ToolCall(id=self._new_id(), name=name, arguments=json.dumps(arguments, ensure_ascii=False))

    def call_syntax(self) -> CallSyntax:
        """``<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>``, calls on separate lines: what
        ``format_tool_call_text`` and ``format_assistant_text`` write."""
        return CallSyntax(
            open=f'{TOOL_CALL_OPEN}\n{{"name": ',
            between=', "arguments": ',
            close=f"}}\n{TOOL_CALL_CLOSE}",
            separator="\n",
            trigger=TOOL_CALL_OPEN,
        )


class NoToolParser:
    """Tool parsing off: the whole completion is content (``None`` when empty), never a tool call."""

    def parse(self, text: str) -> ParsedResponse:
        return ParsedResponse(content=text or None)

    def call_syntax(self) -> CallSyntax:
        raise ValueError(
            "tool parsing is off (tool format 'none'), so a tool call cannot be forced: "
            "use a tool format such as 'hermes', or send tool_choice 'auto' or 'none'"
        )


TOOL_PARSERS: dict[str, Callable[[int | None], ToolParser]] = {
    "hermes": lambda id_seed: HermesToolParser(id_seed=id_seed),
    "none": lambda id_seed: NoToolParser(),
}


def get_tool_parser(name: str, *, id_seed: int | None = None) -> ToolParser:
    """The parser a config names (``"hermes"`` or ``"none"``). ``id_seed`` fixes hermes call ids."""
    try:
        factory = TOOL_PARSERS[name]
    except KeyError:
        raise ValueError(
            f"unknown tool parser {name!r}: use one of {', '.join(sorted(TOOL_PARSERS))}"
        ) from None
    return factory(id_seed)


ToolExchange = tuple[str, Mapping[str, Any], str]
"""One call in a worked example: the tool's name, the arguments, and the result the tool returned."""


def solved_example(
    question: str, turns: Sequence[Sequence[ToolExchange]], answer: str, *, id_prefix: str = "call_example"
) -> list[dict[str, Any]]:
    """A solved question as OpenAI chat messages: the question, then for each turn an assistant message
    making that turn's calls and one ``tool`` message per result, then the final answer. A small model
    shown such examples before its question copies their shape (see ``ToolAgentWorkflow``'s ``examples``).
    The call ids are ``{id_prefix}_{turn}_{call}`` (``id_prefix`` alone for a single call)."""
    single = len(turns) == 1 and len(turns[0]) == 1
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for t, turn in enumerate(turns, start=1):
        if not turn:
            raise ValueError(f"turn {t} of the example {question!r} makes no call")
        ids = [id_prefix if single else f"{id_prefix}_{t}_{c}" for c in range(1, len(turn) + 1)]
        calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, (name, arguments, _) in zip(ids, turn)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": call_id, "name": name, "content": result}
            for call_id, (name, _, result) in zip(ids, turn)
        ]
    messages.append({"role": "assistant", "content": answer})
    return messages
