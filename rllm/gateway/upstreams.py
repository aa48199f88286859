"""Where the gateway's calls are sampled: an **upstream** turns one validated OpenAI request into choices
with the exact prompt/completion token ids and per-token logprobs behind them.

``LocalUpstream`` samples in this process from a :class:`~rllm.inference.local.LocalEngine` (no HTTP hop:
the embedded gateway of a training run). It renders chat messages with the model's chat template
(:class:`~rllm.inference.chat_template.ChatRenderer`, which also describes ``tools`` to models whose
template ignores them) and parses tool calls out of the sampled text. A ``tool_choice`` that forces a call
(``"required"`` or a named function) is honoured by constrained decoding: the tool format's opening (and
the function's name) is written into the completion; under ``"required"`` the model then writes one of the
tools' names (its tokens restricted to them), and each call's arguments open as its schema's first
required key; then the model samples the rest. Forced tokens (written, or the only one allowed) are marked 0
in ``completion_mask`` so training never treats them as sampled. HTTP upstreams (vLLM, SGLang, any
OpenAI-compatible server) live in :mod:`rllm.gateway.http_upstream`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rllm.inference.base import SamplingParams
from rllm.inference.chat_template import ChatRenderer
from rllm.inference.constraints import OneOfTexts, allowed_counts
from rllm.tool_calls import ForcedCall, get_tool_parser
from rllm.types import DEFAULT_ADAPTER


class UpstreamRequest(BaseModel):
    """One request as the gateway understood it, with the session's sampling overrides applied.

    ``messages`` are OpenAI-format dicts (assistant ``tool_calls`` and ``tool`` messages included);
    ``prompt`` is set for text completions instead. ``logprobs`` says whether the *client* asked for
    logprobs in its reply (the trace always records them).
    """

    model_config = ConfigDict(extra="forbid")

    endpoint: Literal["chat.completions", "completions"]
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    prompt: str | list[int] | None = None
    params: SamplingParams
    logprobs: bool = False
    # False when neither the client nor the session set max_tokens: an engine may then lower the default
    # to what fits in the model's context (as vLLM does) instead of refusing the call.
    max_tokens_given: bool = True
    # The LoRA adapter to sample with (the client asked for model "<gateway model>:<adapter>"); None: the
    # upstream's single policy.
    adapter: str | None = None


class UpstreamChoice(BaseModel):
    """One sampled choice. ``text`` is what the client sees as content (tool-call markup removed when
    calls were parsed out of it); ``completion_ids`` and ``logprobs`` are every completion token.
    ``completion_mask`` is 0 for a token the upstream forced rather than sampled (logprob 0.0), 1 for a
    sampled one; ``None`` when every token was sampled."""

    model_config = ConfigDict(extra="forbid")

    text: str
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str
    completion_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    completion_mask: list[int] | None = None
    token_strings: list[str] | None = None  # one per completion token, for the client's logprobs reply
    stop_sequence: str | None = None  # the client's stop string that ended the choice, when one did


class UpstreamResult(BaseModel):
    """All choices of one request. ``trainable`` is false when the upstream gave no token ids."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    choices: list[UpstreamChoice]
    weight_version: int = 0
    trainable: bool = True
    upstream: str = "local"
    last_weight_version: int | None = None  # set when a weight sync landed mid-decode (a partial rollout)


class UpstreamError(Exception):
    """The upstream failed or answered something the gateway cannot use. ``status_code`` is what the
    gateway returns to its client (4xx passes an upstream's refusal of bad input through; 502/503 when
    the upstream itself is broken or unreachable)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class Upstream(Protocol):
    """What the gateway needs from an inference backend."""

    name: str
    trainable: bool

    async def complete(self, request: UpstreamRequest, *, session_id: str) -> UpstreamResult:
        """Sample ``request.params.n`` choices; ``session_id`` routes to a sticky worker."""
        ...

    async def health(self) -> dict[str, Any]:
        """A JSON-able status (``{"ok": bool, ...}``)."""
        ...

    async def aclose(self) -> None: ...


def session_role(session_id: str) -> str:
    """The role a gateway session belongs to: ``role`` for an episode's role sub-session
    ``{episode_id}:{role}``, ``default`` for the episode's own session (as ``traces_to_trajectories``
    names their trajectories; an episode id has no ':')."""
    return session_id.split(":", 1)[1] if ":" in session_id else "default"


class LocalUpstream:
    """Samples from an in-process :class:`~rllm.inference.local.LocalEngine` (the engine the trainer
    syncs weights into), so an embedded gateway adds no network hop between gateway and model.

    ``adapters`` (separate weights per role: role -> adapter) makes each call sample from the adapter of
    its session's role (:func:`session_role`; a role not in it uses ``default``)."""

    trainable = True

    def __init__(
        self, engine: Any, *, tool_format: str = "hermes", adapters: Mapping[str, str] | None = None
    ) -> None:
        self.engine = engine
        self.adapters = adapters
        self.name = "local"
        self.renderer = ChatRenderer(engine.tokenizer, tool_format=tool_format)
        self.tool_parser = get_tool_parser(tool_format)
        self.vocab_size = len(engine.tokenizer)  # len() of an HF tokenizer recounts added tokens: once, here
        self.context_length: int | None = engine.context_length

    async def complete(self, request: UpstreamRequest, *, session_id: str) -> UpstreamResult:
        forced = self._forced_call(request)
        prompt_ids = self._prompt_ids(request)
        request = self._fit_context(request, len(prompt_ids))
        forced_ids: list[int] = []
        params = request.params
        constraint = None
        if forced is not None:
            forced_ids, params = self._forced_ids(forced, params)
            if forced.choices:
                constraint = OneOfTexts(self.engine.tokenizer, forced.choices)
        options: dict[str, Any] = {}  # only what is set: an engine without these takes no such argument
        if constraint is not None:
            options["constraint"] = constraint
        # The request's own "<model>:<adapter>" first, else the adapter of the session's role (a run's roles).
        adapter = request.adapter
        if adapter is None and self.adapters is not None:
            adapter = self.adapters.get(session_role(session_id), DEFAULT_ADAPTER)
        if adapter is not None:
            options["adapter"] = adapter
        try:
            completions = await self.engine.generate(prompt_ids + forced_ids, params, **options)
        except ValueError as exc:
            if adapter is None:
                raise
            raise UpstreamError(400, str(exc)) from exc  # an unknown adapter, named with the loaded ones
        parse = (
            request.endpoint == "chat.completions" and bool(request.tools) and request.tool_choice != "none"
        )
        force = {
            "forced": forced,
            "forced_ids": forced_ids,
            "stop": request.params.stop,
            "constraint": constraint,
        }
        choices = [
            self._choice(c, with_tokens=request.logprobs, parse_tools=parse, **force) for c in completions
        ]
        version = completions[0].weight_version if completions else self.engine.weight_version
        last = max((c.last_weight_version or c.weight_version for c in completions), default=version)
        return UpstreamResult(
            prompt_ids=prompt_ids,
            choices=choices,
            weight_version=version,
            upstream=self.name,
            last_weight_version=last if last != version else None,
        )

    def _forced_call(self, request: UpstreamRequest) -> ForcedCall | None:
        """The call ``tool_choice`` forces (``"required"``: any tool; a named function: that one), or
        ``None``. A name that is not among ``tools``, or a format that cannot force a call, is a 400."""
        choice = request.tool_choice
        if choice in (None, "none", "auto"):
            return None
        if request.endpoint != "chat.completions" or not request.tools:
            raise UpstreamError(400, f"tool_choice {choice!r} needs tools: send the tools the model may call")
        try:
            if choice == "required":
                return self.tool_parser.forced_call(tools=request.tools)
            name = _named_function(choice)
            names = [(t.get("function") or {}).get("name") for t in request.tools]
            if name not in names:
                raise UpstreamError(
                    400,
                    f"tool_choice names the function {name!r}, which is not in tools "
                    f"({', '.join(map(repr, names))}): name one of them, or add it to tools",
                )
            return self.tool_parser.forced_call(name, tools=request.tools)
        except ValueError as exc:  # the tool format cannot force a call
            raise UpstreamError(400, str(exc)) from exc

    def _forced_ids(self, forced: ForcedCall, params: SamplingParams) -> tuple[list[int], SamplingParams]:
        """The forced opening's token ids, and the params to sample the rest with: what is left of
        ``max_tokens`` (the forced tokens are part of the completion), stopping after the call closes."""
        forced_ids = list(self.engine.tokenizer(forced.prefix, add_special_tokens=False)["input_ids"])
        left = params.max_tokens - len(forced_ids)
        if left < 1:
            raise UpstreamError(
                400,
                f"max_tokens {params.max_tokens} leaves no room to sample a forced tool call: its opening "
                f"{forced.prefix!r} alone is {len(forced_ids)} tokens; raise max_tokens",
            )
        return forced_ids, params.model_copy(
            update={"max_tokens": left, "stop": [*params.stop, forced.close]}
        )

    def _prompt_ids(self, request: UpstreamRequest) -> list[int]:
        """The prompt as token ids: rendered chat messages, a tokenized string, or the ids given."""
        if request.endpoint == "chat.completions":
            assert request.messages is not None
            try:
                prompt_ids = self.renderer.render_ids(request.messages, tools=request.tools)
            except Exception as exc:  # the template rejects some message orders (e.g. two system messages)
                raise UpstreamError(400, f"the chat template cannot render these messages: {exc}") from exc
        elif isinstance(request.prompt, str):
            try:
                prompt_ids = list(self.engine.tokenizer(request.prompt)["input_ids"])
            except Exception as exc:  # the tokenizer refuses some strings (lone surrogates)
                raise UpstreamError(400, f"the tokenizer cannot encode this prompt: {exc}") from exc
        else:
            prompt_ids = list(request.prompt or [])
        if not prompt_ids:
            raise UpstreamError(400, "the prompt renders to no tokens")
        vocab = self.vocab_size
        if any(not 0 <= t < vocab for t in prompt_ids):
            raise UpstreamError(400, f"prompt token ids must lie in [0, {vocab}) for this model")
        return prompt_ids

    def _fit_context(self, request: UpstreamRequest, prompt_len: int) -> UpstreamRequest:
        """A default max_tokens shrinks to what the context leaves; an explicit one that does not fit is refused."""
        context = self.context_length
        if context is None:
            return request
        if not request.max_tokens_given and prompt_len < context:
            fits = min(request.params.max_tokens, context - prompt_len)
            request = request.model_copy(
                update={"params": request.params.model_copy(update={"max_tokens": fits})}
            )
        if prompt_len + request.params.max_tokens > context:
            raise UpstreamError(
                400,
                f"this model's maximum context length is {context} tokens; the prompt has {prompt_len} "
                f"and max_tokens asks for {request.params.max_tokens} more: shorten the prompt or lower max_tokens",
            )
        return request

    def _choice(
        self,
        c: Any,
        *,
        with_tokens: bool,
        parse_tools: bool,
        forced: ForcedCall | None = None,
        forced_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        constraint: OneOfTexts | None = None,
    ) -> UpstreamChoice:
        """One completion as a choice; with ``parse_tools``, a well-formed tool call becomes ``tool_calls``.
        After a forced opening (``forced``), the choice is the forced tokens (logprob 0.0, mask 0) then the
        sampled ones, and its text runs from the opening to the call's close (or a client stop string).
        Under a ``constraint``, a position where it allowed one token only is forced too (logprob 0.0,
        mask 0); one where it allowed several is sampled (mask 1, the unrestricted logprob)."""
        completion_ids = [*forced_ids, *c.completion_ids]
        sampled_mask = [1] * len(c.completion_ids)
        if constraint is not None:
            sampled_mask = [int(n != 1) for n in allowed_counts(constraint, c.completion_ids)]
        choice = UpstreamChoice(
            text=c.text,
            finish_reason=c.finish_reason,
            stop_sequence=self._stop_sequence(c, stop),
            completion_ids=completion_ids,
            logprobs=[0.0] * len(forced_ids) + [lp if m else 0.0 for lp, m in zip(c.logprobs, sampled_mask)],
            token_strings=[self.engine.tokenizer.decode([t]) for t in completion_ids]
            if with_tokens
            else None,
        )
        if forced is not None:
            choice.completion_mask = [0] * len(forced_ids) + sampled_mask
            sampled = self.engine.tokenizer.decode(c.completion_ids, skip_special_tokens=True)
            choice.text = forced.prefix + _cut_forced(sampled, forced.close, stop)
        if not parse_tools:
            return choice
        parsed = self.tool_parser.parse(choice.text)
        if parsed.tool_calls and not parsed.errors:
            choice.text = parsed.content or ""
            choice.tool_calls = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in parsed.tool_calls
            ]
            if c.finish_reason == "stop":
                choice.finish_reason = "tool_calls"
        return choice

    def _stop_sequence(self, c: Any, stop: Sequence[str]) -> str | None:
        """Which of the client's ``stop`` strings ended completion ``c``: the engine cuts its text just
        before the string that stopped it (a forced call's close is not the client's, so never named)."""
        if c.finish_reason != "stop" or not stop:
            return None
        rest = self.engine.tokenizer.decode(c.completion_ids, skip_special_tokens=True)[len(c.text) :]
        return next((s for s in stop if s and rest.startswith(s)), None)

    async def count_tokens(self, request: UpstreamRequest, *, session_id: str) -> int:
        """How many prompt tokens ``request`` renders to: the ids a call with it would be sampled from."""
        return len(self._prompt_ids(request))

    async def health(self) -> dict[str, Any]:
        return {"ok": True, "upstream": self.name, "weight_version": self.engine.weight_version}

    async def aclose(self) -> None:
        return None


def _named_function(choice: Any) -> str:
    """The name in a ``{"type": "function", "function": {"name": ...}}`` tool choice; a 400 otherwise."""
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(choice, dict)
        or choice.get("type") != "function"
        or set(choice) != {"type", "function"}
        or set(function or {}) != {"name"}
        or not isinstance(name, str)
    ):
        raise UpstreamError(
            400,
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
            f'{{"name": "<one of the tools>"}}}}, got {choice!r}',
        )
    return name


def _cut_forced(sampled: str, close: str, stop: Sequence[str]) -> str:
    """The sampled rest of a forced call as the client gets it: up to and including ``close`` (the engine
    stopped there), or cut before a client stop string that came first (OpenAI's stop semantics)."""
    end = sampled.find(close)
    cut = len(sampled) if end < 0 else end + len(close)
    for s in stop:
        hit = sampled.find(s) if s else -1
        if 0 <= hit < cut:
            cut = hit
    return sampled[:cut]
