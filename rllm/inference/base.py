"""What every inference engine offers: token-faithful sampling with per-token logprobs."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator


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


@runtime_checkable
class InferenceEngine(Protocol):
    """An engine that samples from the current policy. Implementations: the local PyTorch engine,
    and (through the gateway) vLLM / SGLang / OpenAI-compatible servers."""

    weight_version: int

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        """Sample ``params.n`` continuations of ``prompt_ids``.

        An engine that sets ``routes_by_session = True`` (one behind the gateway) also takes
        ``session_id=``: the episode id, so an episode's calls stick to one server and are traced together."""
        ...

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        """Render chat messages to prompt token ids, ending with the assistant generation prompt."""
        ...
