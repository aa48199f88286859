"""What every inference engine offers: token-faithful sampling with per-token logprobs."""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rllm.inference.chat_template import ChatRenderer


class SamplingParams(BaseModel):
    """Sampling settings for one request. ``top_k=0`` and ``top_p=1.0`` switch those filters off;
    ``temperature=0`` is greedy. ``logprobs`` reported are under ``logits / temperature`` before top-k/top-p
    filtering (the distribution the trainer recomputes), or the raw logits when greedy.

    ``ignore_eos`` keeps sampling past the eos token until ``max_tokens`` (stop strings still apply), as
    vLLM's option of the same name: a benchmarking knob that makes every row generate exactly
    ``max_tokens`` tokens, not something to train with (and what Tinker's ``stop=[]`` asks for).

    ``stop_token_ids`` end a row on any of those tokens, which is kept in the completion as an eos token
    is (vLLM's option of the same name; Tinker's stop given as token ids)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, le=2**31)
    max_tokens: int = Field(256, ge=1, le=2**31)
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    n: int = Field(1, ge=1, le=1024)
    # Any 63-bit value: engines derive per-row / per-call seeds from it modulo 2**63.
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    ignore_eos: bool = False

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v


class WeightSyncError(RuntimeError):
    """Weights could not be pushed into an inference engine (a server refused or lost them): the trainer
    stops rather than let the next rollouts sample from stale weights."""


class Completion(BaseModel):
    """One sampled continuation. ``completion_ids`` are exactly the sampled tokens (including the eos
    token when the model stopped on it); ``logprobs`` has one value per completion token."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" (eos or stop string) | "length" (hit max_tokens)
    weight_version: int = 0  # the weights that sampled its first token
    last_weight_version: int | None = None  # ... and its last (differs when a weight sync paused it)
    pauses: int = 0  # times a weight sync paused it mid-decode (a partial rollout)
    # Under a grammar (generate(constraint=...)): per completion token, how many tokens the grammar allowed
    # at its position (1: forced, the model had no choice); None when it was sampled unconstrained.
    allowed_counts: list[int] | None = None

    def recorded(self) -> tuple[list[float], list[int] | None]:
        """The logprobs and completion mask to record: a token a grammar forced (allowed that one only) is
        mask 0 with logprob 0.0, one the model chose mask 1 with its logprob; mask None when unconstrained."""
        if self.allowed_counts is None:
            return list(self.logprobs), None
        mask = [int(n != 1) for n in self.allowed_counts]
        return [lp if m else 0.0 for lp, m in zip(self.logprobs, mask)], mask


WeightTransfer = Literal["tensors", "files", "service"]


class EngineCapabilities(BaseModel):
    """What an inference engine can do; start-up checks ask this instead of branching on engine names.

    ``weight_transfer`` is how new weights reach it: ``tensors`` (handed over in this process:
    :meth:`InferenceEngine.load_weights`), ``files`` (an adapter or model directory its servers read:
    :meth:`InferenceEngine.sync_from` asks the backend to write them), ``service`` (a remote training service
    samples from weights it holds itself: ``sync_from`` asks the backend for a sampler of its latest
    weights). The training backend must offer the same mode (``BackendCapabilities.weight_transfer``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    weight_transfer: WeightTransfer
    # Calls take session_id= (the episode id): one server per episode, traced together by its own gateway.
    routes_by_session: bool = False
    own_gateway: bool = False  # @rllm.rollout flows call its own gateway(s) (gateway_urls, trace_store)
    # generate(constraint=Grammar) holds the output to a grammar (the gateway's forced tool calls,
    # response_format and strict tools; rllm.inference.grammar)
    constraints: bool = False
    # Logprobs after top-p/top-k are those the trainer recomputes (over the full vocabulary); an engine whose
    # logprobs are renormalised over the kept tokens cannot train with rollout.top_p < 1 or top_k.
    truncation_logprobs_exact: bool = True
    # Async training without LoRA: a full-model sync while calls are in flight (a vLLM pool restarts).
    full_sync_in_flight: bool = True
    keeps_versions: bool = False  # older weight versions stay loaded for calls in flight (keep_versions)
    # Serves several named LoRA adapters at once, picked per call (generate(adapter=...)): the local engine
    # mixes rows of different adapters in one batch, the vLLM pool hot-loads each as its own model name.
    adapters: bool = False


@runtime_checkable
class InferenceEngine(Protocol):
    """What the trainer, the workflow runner and the gateway use of an inference engine, in full: nothing
    else is probed. Implementations: :class:`~rllm.inference.local.LocalEngine` (in this process), the vLLM
    pool (``rllm.trainer.vllm_pool``), the tinker sampler (``rllm.trainer.backends.tinker``); a new engine
    registers in ``rllm.trainer.engines.ENGINES``. :class:`EngineBase` gives the optional members' defaults.
    """

    capabilities: EngineCapabilities
    weight_version: int  # the weights the next call samples from
    tokenizer: Any  # a Hugging Face tokenizer (decode, chat template, save_pretrained)
    pad_id: int
    stats: dict[str, float]  # counters the trainer reads: generated_tokens
    batch_wait_s: float  # an engine that batches waits this long for requests that arrive over HTTP
    keep_versions: int  # with keeps_versions: how many weight versions stay loaded (the trainer sets it)
    gateway_urls: list[str]  # with own_gateway: where agent flows call it; [] otherwise
    trace_store: Any  # with own_gateway: the TraceStore its gateway records in; None otherwise
    context_length: int | None  # most tokens of prompt + completion, when known

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        session_id: str | None = None,
        constraint: Any = None,
        adapter: str | None = None,
    ) -> list[Completion]:
        """Sample ``params.n`` continuations of ``prompt_ids``. ``session_id`` (the episode id) when the
        engine ``routes_by_session``; ``constraint`` (a :class:`~rllm.inference.grammar.Grammar`) when it has ``constraints``;
        ``adapter`` (a loaded LoRA adapter's name; None: the engine's single policy) when it has
        ``adapters``. An unknown adapter name raises ``ValueError`` naming the loaded ones."""
        ...

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        """Render chat messages to prompt token ids, ending with the assistant generation prompt."""
        ...

    def load_weights(self, named_tensors: Any, *, version: int) -> None:
        """``weight_transfer == "tensors"``: sample from these weights (Hugging Face names), as ``version``.
        A value is a tensor or a :class:`WeightWriter`, which the engine hands its own tensor to fill."""
        ...

    def sync_from(self, backend: Any, *, version: int) -> None:
        """``weight_transfer`` ``files`` or ``service``: take the backend's current weights, as ``version``."""
        ...

    def metrics(self) -> dict[str, float]:
        """Per-step metrics of the engine itself (a pool's healthy servers, re-routed calls); may be empty."""
        ...

    def close(self) -> None:
        """Stop what the engine started (servers, gateways, threads)."""
        ...


@runtime_checkable
class WeightWriter(Protocol):
    """A weight handed to ``load_weights`` that computes itself straight into the engine's tensor: a LoRA
    merge written into the engine's copy reads the base weight and writes the copy once, where a merged
    tensor and then a copy of it pass over the weight twice (SmolLM2-135M's 210 adapted weights merged
    alone on the reference machine: 75-81 against 159-163 ms; a 2 x 4 x 32 step's sync 0.12 -> 0.11 s)."""

    def write_into(self, target: Any) -> None:
        """Fill ``target`` (the engine's tensor of this weight, any dtype) with the weight's values."""
        ...


class EngineBase:
    """Defaults for the members of :class:`InferenceEngine` an engine without that capability has, and the
    one chat rendering every engine with a Hugging Face ``tokenizer`` shares."""

    tool_format: str = "hermes"  # how tool calls and tool lists become text in the prompt
    _renderer: Any = None  # the ChatRenderer, made on first use
    batch_wait_s: float = 0.0
    keep_versions: int = 1
    gateway_urls: list[str] = []  # noqa: RUF012 (read-only default; an engine with a gateway sets its own)
    trace_store: Any = None
    context_length: int | None = None

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        """Prompt ids for OpenAI-format ``messages`` (+ ``tools``), rendered as the gateway renders them: tool
        calls, tool results and a tool list the template ignores become text in ``tool_format`` (see
        ``ChatRenderer``)."""
        if self._renderer is None:
            self._renderer = ChatRenderer(self.tokenizer, tool_format=self.tool_format)  # type: ignore[attr-defined]
        return self._renderer.render_ids(messages, tools=tools)  # type: ignore[no-any-return]

    def load_weights(self, named_tensors: Any, *, version: int) -> None:
        raise WeightSyncError(f"engine {type(self).__name__} does not take weights as tensors")

    def sync_from(self, backend: Any, *, version: int) -> None:
        raise WeightSyncError(f"engine {type(self).__name__} does not take weights from files or a service")

    def metrics(self) -> dict[str, float]:
        return {}

    def check_adapter(self, adapter: str | None) -> None:
        """Refuse ``generate(adapter=...)`` on an engine without ``capabilities.adapters``."""
        if adapter is not None and not self.capabilities.adapters:  # type: ignore[attr-defined]
            raise ValueError(
                f"engine {type(self).__name__} serves one policy (capabilities.adapters is false): it "
                f"cannot sample with adapter {adapter!r}; use inference.engine=local or vllm"
            )

    def close(self) -> None:
        return None
