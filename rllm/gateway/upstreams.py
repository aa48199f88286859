"""Where the gateway's calls are sampled: an **upstream** turns one validated OpenAI request into choices
with the exact prompt/completion token ids and per-token logprobs behind them.

``LocalUpstream`` samples in this process from a :class:`~rllm.inference.local.LocalEngine` (no HTTP hop:
the embedded gateway of a training run). It renders chat messages with the model's chat template
(:class:`~rllm.inference.chat_template.ChatRenderer`, which also describes ``tools`` to models whose
template ignores them) and parses tool calls out of the sampled text. A ``tool_choice`` that forces a call
(``"required"`` or a named function), a ``response_format`` and ``strict`` tools are honoured by
grammar-constrained decoding (:mod:`rllm.gateway.structured` builds the grammar,
:mod:`rllm.inference.grammar` samples under it): a token the grammar forced (it allowed that one only) is
marked 0 in ``completion_mask`` with logprob 0.0, so training never treats it as sampled; a token the model
chose keeps its unrestricted logprob. HTTP upstreams (vLLM, SGLang, any
OpenAI-compatible server) live in :mod:`rllm.gateway.http_upstream`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rllm.gateway.structured import StructureError, output_grammar
from rllm.inference.base import SamplingParams
from rllm.inference.chat_template import ChatRenderer
from rllm.inference.grammar import Grammar, GrammarError
from rllm.tool_calls import CallSyntax, get_tool_parser
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
    # Chat's response_format ({"type": "json_object"} / {"type": "json_schema", ...}) and
    # parallel_tool_calls (false: at most one call), as the client sent them.
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
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
        self._grammars: OrderedDict[str, Grammar] = OrderedDict()  # the latest grammars, by their text

    async def complete(self, request: UpstreamRequest, *, session_id: str) -> UpstreamResult:
        grammar = await self._grammar(request)
        prompt_ids = self._prompt_ids(request)
        request = self._fit_context(request, len(prompt_ids))
        options: dict[str, Any] = {}  # only what is set: an engine without these takes no such argument
        if grammar is not None:
            options["constraint"] = grammar
        # The request's own "<model>:<adapter>" first, else the adapter of the session's role (a run's roles).
        adapter = request.adapter
        if adapter is None and self.adapters is not None:
            adapter = self.adapters.get(session_role(session_id), DEFAULT_ADAPTER)
        if adapter is not None:
            options["adapter"] = adapter
        try:
            completions = await self.engine.generate(prompt_ids, request.params, **options)
        except ValueError as exc:
            if adapter is None:
                raise
            raise UpstreamError(400, str(exc)) from exc  # an unknown adapter, named with the loaded ones
        parse = (
            request.endpoint == "chat.completions" and bool(request.tools) and request.tool_choice != "none"
        )
        choices = [
            self._choice(c, with_tokens=request.logprobs, parse_tools=parse, stop=request.params.stop)
            for c in completions
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

    async def _grammar(self, request: UpstreamRequest) -> Grammar | None:
        """The grammar the reply must match (:mod:`rllm.gateway.structured`), or ``None``. Grammars are
        kept by their text (an agent sends the same tools every turn); the first one also builds the
        tokenizer's grammar vocabulary, so it is made off the event loop. Bad input is a 400."""
        forced = request.tool_choice not in (None, "none", "auto")
        if request.tool_choice is not None and forced:
            self._check_forced(request)
        if request.endpoint != "chat.completions" or (
            not forced and request.response_format is None and not _any_strict(request.tools)
        ):
            return None
        try:
            text = output_grammar(
                tools=request.tools,
                tool_choice=request.tool_choice,
                response_format=request.response_format,
                parallel_tool_calls=request.parallel_tool_calls,
                syntax=self._call_syntax(required=forced),
            )
        except StructureError as exc:
            raise UpstreamError(400, str(exc)) from exc
        if text is None:
            return None
        if not self.engine.capabilities.constraints:
            raise UpstreamError(
                400,
                f"the {self.engine.capabilities.name} engine cannot constrain decoding, which this request "
                "needs (a forced tool_choice, response_format or a strict tool): leave those out, or serve "
                "it with inference.engine=local",
            )
        grammar = self._grammars.get(text)
        if grammar is None:
            try:
                grammar = await asyncio.to_thread(Grammar, text, self.engine.tokenizer)
            except GrammarError as exc:
                raise UpstreamError(400, f"the reply's grammar cannot be compiled: {exc}") from exc
            self._grammars[text] = grammar
            while len(self._grammars) > _GRAMMARS_KEPT:
                self._grammars.popitem(last=False)
        self._grammars.move_to_end(text)
        return grammar

    def _call_syntax(self, *, required: bool) -> CallSyntax | None:
        """The tool format's call spelling; a format without calls cannot force one (a 400)."""
        try:
            return self.tool_parser.call_syntax()
        except ValueError as exc:
            if required:
                raise UpstreamError(400, str(exc)) from exc
            return None

    def _check_forced(self, request: UpstreamRequest) -> None:
        """A forced ``tool_choice`` needs tools, and a named function must be one of them (else a 400)."""
        choice = request.tool_choice
        if request.endpoint != "chat.completions" or not request.tools:
            raise UpstreamError(400, f"tool_choice {choice!r} needs tools: send the tools the model may call")
        if choice == "required":
            return
        name = _named_function(choice)
        names = [(t.get("function") or {}).get("name") for t in request.tools]
        if name not in names:
            raise UpstreamError(
                400,
                f"tool_choice names the function {name!r}, which is not in tools "
                f"({', '.join(map(repr, names))}): name one of them, or add it to tools",
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
        self, c: Any, *, with_tokens: bool, parse_tools: bool, stop: Sequence[str] = ()
    ) -> UpstreamChoice:
        """One completion as a choice; with ``parse_tools``, a well-formed tool call becomes ``tool_calls``.
        Under a grammar (``c.allowed_counts``), a token it forced (allowed that one only) is logprob 0.0 and
        ``completion_mask`` 0; a token the model chose is mask 1 with its unrestricted logprob."""
        logprobs, mask = c.recorded()
        choice = UpstreamChoice(
            text=c.text,
            finish_reason=c.finish_reason,
            stop_sequence=self._stop_sequence(c, stop),
            completion_ids=list(c.completion_ids),
            logprobs=logprobs,
            completion_mask=mask,
            token_strings=[self.engine.tokenizer.decode([t]) for t in c.completion_ids]
            if with_tokens
            else None,
        )
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


_GRAMMARS_KEPT = 64  # compiled grammars an upstream keeps, by their text


def _any_strict(tools: list[dict[str, Any]] | None) -> bool:
    return any((t.get("function") or {}).get("strict") for t in tools or [])


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
