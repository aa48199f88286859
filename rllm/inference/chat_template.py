"""Render OpenAI-format chat (tools, tool calls, tool results) into the prompt token ids a model is fed.

``ChatRenderer`` wraps a tokenizer's chat template. When the template knows about tools (Qwen2.5,
Hermes, Llama 3.1) tools and tool calls go straight through to it. When it silently ignores them
(SmolLM2's plain ChatML), rllm teaches the model a text format instead (Hermes ``<tool_call>``, see
``rllm.tool_calls``): the tool list goes into the system prompt, an assistant's earlier calls are
written into its content, and tool results become ``<tool_response>`` messages.

``check_template`` verifies the property token-faithful multi-turn training relies on: the prompt of
call k plus the tokens the model sampled for it must be an exact token prefix of the prompt of call k+1.
Where it fails the template *drifts* (re-renders history differently from how it was sampled), and
those turns cannot be merged into one training sequence. See docs/chat_templates.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from rllm.tool_calls import (
    format_assistant_text,
    format_tool_response_text,
    format_tools_prompt,
    tool_calls_from_openai,
)

Message = Mapping[str, Any]
# Text formats rllm can teach a model whose template ignores tools (the model's own format, if native).
TOOL_FORMATS = ("hermes",)

_PROBE_TOOL_NAME = "rllm_probe_tool"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": _PROBE_TOOL_NAME,
        "description": "Probe whether the chat template renders tools.",
        "parameters": {"type": "object", "properties": {}},
    },
}
_PROBE_TOOL_RESULT = "rllm-probe-tool-result"


class TemplateRenderError(ValueError):
    """The tokenizer's chat template refused these messages (e.g. roles that must alternate)."""


def _content_text(message: Message, index: int) -> str | None:
    """A message's content as one string: OpenAI text parts are joined; ``None`` stays ``None``."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ValueError(
        f"messages[{index}].content must be a string, null, or a list of "
        f'{{"type": "text", "text": ...}} parts; got {content!r}'
    )


class ChatRenderer:
    """Turns OpenAI chat messages (+ ``tools``) into exactly the token ids the model is fed.

    ``tool_format`` is the text format used when the template ignores tools (``supports_tools`` is
    False); it is also the format ``assistant_text`` writes calls in, i.e. what the model is expected to
    sample. ``template_kwargs`` go to every template render (e.g. ``{"enable_thinking": False}``).
    """

    def __init__(
        self, tokenizer: Any, tool_format: str = "hermes", *, template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"unknown tool_format {tool_format!r}: use one of {', '.join(TOOL_FORMATS)}")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template: use an instruct "
                "model, or set tokenizer.chat_template to a Jinja template"
            )
        self.tokenizer = tokenizer
        self.tool_format = tool_format
        self._template_kwargs = dict(template_kwargs or {})
        self._supports_tools = self._probe_native_tools()
        self._tool_role_renders = self._probe_tool_role()

    @property
    def supports_tools(self) -> bool:
        """Whether the template renders ``tools`` itself (else rllm injects them as ``tool_format`` text)."""
        return self._supports_tools

    @property
    def tool_role_renders(self) -> bool:
        """Whether the template renders ``role: "tool"`` messages (else they are sent as user messages)."""
        return self._tool_role_renders

    # --- public rendering ------------------------------------------------------------------------

    def render_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt as text (for reading and debugging; the model is fed ``render_ids``)."""
        prepared, native_tools = self._prepare(messages, tools)
        return self._apply(prepared, native_tools, add_generation_prompt, tokenize=False)

    def render_ids(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The prompt token ids, as ``tokenizer.apply_chat_template(..., tokenize=True)`` makes them."""
        prepared, native_tools = self._prepare(messages, tools)
        return self._apply(prepared, native_tools, add_generation_prompt, tokenize=True)

    def assistant_text(self, message: Message) -> str:
        """The text a model samples for this assistant message: content, then its calls in ``tool_format``.

        Its tokens followed by the end-of-turn token are the completion ``check_template`` assumes.
        """
        calls = tool_calls_from_openai(message.get("tool_calls") or [])
        return format_assistant_text(_content_text(message, 0), calls)

    # --- internals -------------------------------------------------------------------------------

    def _apply(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        *,
        tokenize: bool,
    ) -> Any:
        try:
            out = self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=tokenize,
                return_dict=False,
                **self._template_kwargs,
            )
        except Exception as err:  # jinja2 errors, and whatever a template's raise_exception raises
            raise TemplateRenderError(f"the chat template could not render these messages: {err}") from err
        if not tokenize:
            return out
        if isinstance(out, Mapping) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return [int(i) for i in out]

    def _probe_native_tools(self) -> bool:
        probe = [{"role": "user", "content": "Hi"}]
        try:
            with_tools = self._apply(probe, [_PROBE_TOOL], True, tokenize=False)
            without = self._apply(probe, None, True, tokenize=False)
        except TemplateRenderError:
            return False
        return _PROBE_TOOL_NAME in with_tools and _PROBE_TOOL_NAME not in without

    def _probe_tool_role(self) -> bool:
        # Some templates raise on unknown roles, others silently drop them: both mean "not rendered".
        probe = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "tool", "content": _PROBE_TOOL_RESULT, "tool_call_id": "call_0"},
        ]
        try:
            return _PROBE_TOOL_RESULT in self._apply(probe, None, True, tokenize=False)
        except TemplateRenderError:
            return False

    def _prepare(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The messages and ``tools`` argument to hand the template, for native or text tool rendering."""
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise TypeError(
                    f'messages[{i}] must be an OpenAI chat message, a dict with a string "role" '
                    f'("user", "assistant", ...); got {message!r}'
                )
        if self._supports_tools:
            return [self._native_message(m, i) for i, m in enumerate(messages)], (
                [dict(t) for t in tools] if tools else None
            )
        return self._text_messages(messages, tools), None

    def _native_message(self, message: Message, index: int) -> dict[str, Any]:
        out = dict(message)
        out["content"] = _content_text(message, index)
        if message.get("tool_calls"):
            # HF templates expect arguments as a dict (they ``tojson`` it); OpenAI sends JSON text.
            calls = tool_calls_from_openai(message["tool_calls"])
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _as_json(c.arguments)},
                }
                for c in calls
            ]
        return out

    def _text_messages(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        results_as_user = False  # whether out[-1] is a user message made of tool results
        for i, message in enumerate(messages):
            msg = {k: v for k, v in message.items() if k != "tool_calls"}
            content = _content_text(message, i)
            is_result_as_user = message["role"] == "tool" and not self._tool_role_renders
            if message["role"] == "assistant" and message.get("tool_calls"):
                msg["content"] = format_assistant_text(content, tool_calls_from_openai(message["tool_calls"]))
            elif message["role"] == "tool":
                msg["content"] = format_tool_response_text(content or "")
                if is_result_as_user and results_as_user:
                    # Consecutive results become one user message, as Qwen2.5's template groups them.
                    out[-1]["content"] += "\n" + msg["content"]
                    continue
                if is_result_as_user:
                    msg = {"role": "user", "content": msg["content"]}
            else:
                msg["content"] = content or ""
            out.append(msg)
            results_as_user = is_result_as_user
        if tools:
            prompt = format_tools_prompt(tools)
            if out and out[0]["role"] == "system":
                system = out[0]["content"]
                out[0] = {**out[0], "content": f"{system}\n\n{prompt}" if system else prompt}
            else:
                out.insert(0, {"role": "system", "content": prompt})
        return out


def _as_json(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


# --- the drift check ----------------------------------------------------------------------------------

_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
_CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _chat(*pairs: str, system: str | None = None) -> list[dict[str, Any]]:
    """user, assistant, user, assistant, ... from alternating strings, after an optional system prompt."""
    head = [{"role": "system", "content": system}] if system is not None else []
    return head + [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(pairs)]


# name -> (messages, tools). Every assistant turn is followed by the user/tool message of the next call.
CHECK_CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "plain multi-turn": (
        _chat("Hi! Who are you?", "I am a helpful assistant.", "What is 2 + 2?", "2 + 2 = 4.", "Thanks!"),
        None,
    ),
    "system prompt": (
        _chat("Solve x + 3 = 5.", "x = 2", "And 2x = 10?", "x = 5", "Great.", system="Be a terse tutor."),
        None,
    ),
    "tool calls": (
        [
            {"role": "user", "content": "What's the weather in Paris and in Tōkyō?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _call("call_1", "get_weather", {"city": "Paris"}),
                    _call("call_2", "get_weather", {"city": "Tōkyō"}),
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18, "sky": "sunny"}'},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"temp_c": 24, "sky": "rain"}'},
            {
                "role": "assistant",
                "content": "Paris: 18 °C. Let me convert Tōkyō to °F.",
                "tool_calls": [
                    _call("call_3", "calculate", {"expression": "24 * 9 / 5 + 32"}),
                ],
            },
            {"role": "tool", "tool_call_id": "call_3", "content": "75.2"},
            {"role": "assistant", "content": "Paris is sunny at 18 °C; Tōkyō is rainy at 75.2 °F."},
            {"role": "user", "content": "Thanks!"},
        ],
        [_WEATHER_TOOL, _CALC_TOOL],
    ),
    "tool calls with system prompt": (
        [
            {"role": "system", "content": "You answer with tools when you can."},
            {"role": "user", "content": "What is 17 * 23?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _call("call_1", "calculate", {"expression": "17 * 23"}),
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "391"},
            {"role": "assistant", "content": "17 * 23 = 391."},
            {"role": "user", "content": "And 391 / 17?"},
        ],
        [_CALC_TOOL],
    ),
    "whitespace in content": (
        _chat(
            "Say something.",
            " one leading space",
            "Again.",
            "  two leading spaces",
            "Again.",
            "\none leading newline",
            "Again.",
            "\n\ntwo leading newlines",
            "Again.",
            "a trailing space ",
            "Again.",
            "a trailing newline\n",
            "Again.",
            "inner\n\n  blank line  ",
            "Done.",
        ),
        None,
    ),
    "unicode": (
        _chat(
            "Say hello in many scripts.",
            "héllo wörld — 世界 🙂 ∑x² naïve café",
            "Thanks.",
            "Ça va ! ¿Qué tal?",
            "Ok.",
        ),
        None,
    ),
}

_CONTEXT_TOKENS = 8


class TurnCheck(BaseModel):
    """The prefix check for one assistant turn of one conversation.

    ``position`` is the first token index where prompt + sampled completion and the re-rendered next
    prompt disagree, ``tokens_before_completion`` how far before the completion that is (0 or less: in
    the completion itself, the template rewrote what the model said; 1: the generation prompt's last token
    merged with the completion's first; more: the template rewrote older history). ``context`` is the
    decoded text just before it; ``sampled`` / ``rerendered`` are the tokens from it on, each decoded.
    """

    conversation: str
    turn: int  # 1-based assistant turn within the conversation
    assistant: str  # the turn's text, as sampled (shortened)
    ok: bool
    position: int | None = None
    tokens_before_completion: int | None = None
    context: str | None = None
    sampled: list[str] | None = None
    rerendered: list[str] | None = None
    error: str | None = None  # the template refused the conversation


class TemplateReport(BaseModel):
    """Whether a tokenizer's chat template drifts, turn by turn, over ``CHECK_CONVERSATIONS``."""

    model: str
    tool_format: str
    supports_tools: bool
    tool_role_renders: bool
    cases: list[TurnCheck] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every assistant turn passed: multi-turn calls can be merged token-faithfully."""
        return all(case.ok for case in self.cases)

    def format(self) -> str:
        """A human-readable summary: how tools are rendered, one line per turn, details for failures."""
        tools = (
            "rendered by the template itself"
            if self.supports_tools
            else f"ignored by the template; rllm injects {self.tool_format} tool text into the system prompt"
        )
        role = "role 'tool'" if self.tool_role_renders else "user messages (the template drops role 'tool')"
        lines = [f"Chat template check: {self.model}", f"  tools: {tools}", f"  tool results: {role}", ""]
        for case in self.cases:
            status = "ok" if case.ok else ("ERROR" if case.error else "DRIFT")
            lines.append(f"  {status:5}  {case.conversation}, turn {case.turn}: {case.assistant}")
            if case.error:
                lines.append(f"         {case.error}")
            elif not case.ok:
                lines += [
                    f"         first difference at token {case.position}: {_where(case)}",
                    f"           after: {case.context!r}",
                    f"           prompt + sampled tokens: {case.sampled!r}",
                    f"           next prompt's tokens:    {case.rerendered!r}",
                ]
        bad = [case for case in self.cases if not case.ok]
        lines.append("")
        if not bad:
            n = len(self.cases)
            lines.append(f"No drift: all {n} assistant turns are token prefixes of the next call's prompt.")
        else:
            where = ", ".join(dict.fromkeys(case.conversation for case in bad))
            lines.append(
                f"Drift in {len(bad)} of {len(self.cases)} assistant turns ({where}): calls like those "
                "cannot be merged into one training sequence (see docs/chat_templates.md)."
            )
        return "\n".join(lines)


def _where(case: TurnCheck) -> str:
    before = case.tokens_before_completion or 0
    if before <= 0:
        return "in the sampled completion"
    if before == 1:
        return "the generation prompt's last token merges with the completion's first"
    return f"in the history, {before} tokens before the completion"


def _first_difference(left: list[int], right: list[int]) -> int | None:
    """First index where ``left`` stops being a prefix of ``right``; ``None`` when it is one."""
    for i, token in enumerate(left):
        if i >= len(right) or right[i] != token:
            return i
    return None


def _shorten(text: str, limit: int = 48) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def check_template(
    tokenizer: Any,
    tool_format: str = "hermes",
    *,
    eos_token_id: int | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> TemplateReport:
    """Check every assistant turn of ``CHECK_CONVERSATIONS`` for template drift.

    For assistant message k at index i: ``render_ids(msgs[:i]) + encode(assistant_text) + [eos]`` (what
    the model was fed plus what it sampled, ending in the end-of-turn token ``eos_token_id``, default
    the tokenizer's eos) must be a prefix of ``render_ids(msgs[:i + 2])`` (the next call's prompt).
    """
    renderer = ChatRenderer(tokenizer, tool_format, template_kwargs=template_kwargs)
    eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token: pass eos_token_id (the token that ends a turn)")
    report = TemplateReport(
        model=str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__),
        tool_format=tool_format,
        supports_tools=renderer.supports_tools,
        tool_role_renders=renderer.tool_role_renders,
    )
    for name, (messages, tools) in CHECK_CONVERSATIONS.items():
        turn = 0
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            turn += 1
            text = renderer.assistant_text(message)
            case = TurnCheck(conversation=name, turn=turn, assistant=_shorten(text), ok=True)
            try:
                prompt = renderer.render_ids(messages[:i], tools)
                following = renderer.render_ids(messages[: i + 2], tools)
            except TemplateRenderError as err:
                report.cases.append(case.model_copy(update={"ok": False, "error": str(err)}))
                continue
            sampled = prompt + tokenizer.encode(text, add_special_tokens=False) + [eos]
            pos = _first_difference(sampled, following)
            if pos is not None:
                case = case.model_copy(
                    update={
                        "ok": False,
                        "position": pos,
                        "tokens_before_completion": len(prompt) - pos,
                        "context": tokenizer.decode(sampled[max(0, pos - _CONTEXT_TOKENS) : pos]),
                        "sampled": [tokenizer.decode([t]) for t in sampled[pos : pos + _CONTEXT_TOKENS]],
                        "rerendered": [tokenizer.decode([t]) for t in following[pos : pos + _CONTEXT_TOKENS]],
                    }
                )
            report.cases.append(case)
    return report
