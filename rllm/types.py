"""The data model every part of rllm reads and writes.

An **Episode** is one attempt at one task. It holds one or more **Trajectories**, one per role
(``"solver"``, ``"judge"``, or ``"default"`` for a single-agent flow). A trajectory is the ordered list
of **Steps** that role took; a step is one LLM call with the exact token ids the inference engine saw and
produced and the logprob it reported for each produced token. The workflow runner creates episodes; the
transform pipeline turns them into a **TrainBatch**; the training backend consumes that batch and
discards it after the optimizer step. An **Outcome** is the verdict on one episode (or one response):
rewards, evaluators and workflows return one, and the workflow runner copies it onto the Episode. A **Trace** is what the model gateway records for one
sampled choice of one request; the engine assembles Steps from a session's traces.

Token in, token out: training uses ``prompt_ids`` / ``response_ids`` as sampled, never re-tokenized text.
"""

from __future__ import annotations

import math
import time
import uuid
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TerminationReason(str, Enum):
    """Why an episode ended. Every episode has one; failed episodes are kept, never dropped."""

    ENV_DONE = "env_done"  # the task/environment said it is finished (the normal case)
    MAX_TURNS = "max_turns"  # a multi-turn flow hit its turn limit
    MAX_RESPONSE_LENGTH = "max_response_length"  # a response was cut at max_tokens
    TIMEOUT = "timeout"  # the episode exceeded its wall-clock budget
    ERROR = "error"  # the flow raised; see Episode.error


class Outcome(BaseModel):
    """The verdict on one episode: the reward training optimises, whether the answer was right, and why.

    Whoever judges makes one: a reward function scoring a response (``reward_fn(task, response)``), an
    evaluator scoring an episode (``@rllm.evaluator``), a workflow at the end of its episode (``return
    Outcome(...)``; a float or a bool will do). The workflow runner copies it onto the Episode and its
    trajectories, then drops it.

    ``reward`` is every trajectory's reward, except those ``role_rewards`` names: a role its own reward,
    keyed by trajectory key (``"solver#2"``, one of several trajectories of a role) or role name
    (``{"solver": 1.0, "judge": 0.0}``). ``is_correct`` is what accuracy counts (``None``: not graded).
    ``signals`` are named parts of the reward (``format``, ``tool_use``), logged as ``signal/<name>``
    metrics; ``metrics`` are other numbers about the episode, averaged into the training step's metrics
    under their own names. ``info`` says why (the extracted answer, per-test results, the judge's
    verdict), JSON-serialisable, merged into ``Episode.info`` (a reward function's under
    ``info["reward"]``).
    """

    model_config = ConfigDict(extra="forbid")

    reward: float = 0.0
    is_correct: bool | None = None
    role_rewards: dict[str, float] = Field(default_factory=dict)
    signals: dict[str, float] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    termination_reason: TerminationReason = TerminationReason.ENV_DONE


def as_outcome(value: Any, *, source: str = "a reward") -> Outcome:
    """Read what ``source`` (``"a workflow"``, ``"an evaluator"``) returned as an :class:`Outcome`: an
    Outcome as it is, a bool as a reward of 1.0 or 0.0 that also says whether the answer is correct, a
    number as the reward, a dict with ``"reward"`` as an Outcome's fields."""
    if isinstance(value, Outcome):
        return value
    if isinstance(value, bool):
        return Outcome(reward=float(value), is_correct=value)
    if hasattr(type(value), "__float__"):  # int, float, and numpy's or torch's scalars
        return Outcome(reward=float(value))
    if isinstance(value, dict) and "reward" in value:
        return Outcome.model_validate(value)
    raise TypeError(f"{source} must return an Outcome, a float or a bool, not {type(value).__name__}")


class Step(BaseModel):
    """One LLM call: what the model was shown (``prompt_ids``) and what it produced.

    ``response_mask`` marks which response tokens the model generated (1) versus tokens that were spliced
    in by the environment in a merged multi-turn sequence (0); only masked-in tokens are trained on.
    ``logprobs`` has one entry per response token: the log-probability the sampler assigned to it
    (0.0 for masked-out tokens).
    """

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    response_mask: list[int] | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    response_text: str = ""
    finish_reason: str | None = None  # "stop" | "length" | ...
    reward: float = 0.0
    advantage: float | None = None
    weight_version: int = 0
    info: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_lengths(self) -> Step:
        n = len(self.response_ids)
        if len(self.logprobs) != n:
            raise ValueError(
                f"Step needs one logprob per response token: got {len(self.logprobs)} logprobs for "
                f"{n} response tokens"
            )
        if self.response_mask is None:
            self.response_mask = [1] * n
        elif len(self.response_mask) != n:
            raise ValueError(
                f"Step.response_mask must match response_ids in length: {len(self.response_mask)} != {n}"
            )
        elif any(m not in (0, 1) for m in self.response_mask):
            raise ValueError("Step.response_mask may hold only 0 and 1")
        return self

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


class Trajectory(BaseModel):
    """The steps one role took in an episode, in order. ``reward`` is the role's outcome reward."""

    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    steps: list[Step] = Field(default_factory=list)
    reward: float | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class Episode(BaseModel):
    """One attempt at one task, created by the workflow runner.

    ``task_id`` groups attempts at the same task for group-relative advantages; ``attempt`` counts
    retries. A failed episode carries ``termination_reason=ERROR`` (or ``TIMEOUT``) and ``error``.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    task_id: str
    task: dict[str, Any] = Field(default_factory=dict)
    trajectories: list[Trajectory] = Field(default_factory=list)
    reward: float | None = None
    is_correct: bool | None = None
    termination_reason: TerminationReason = TerminationReason.ENV_DONE
    error: str | None = None
    attempt: int = 0
    metrics: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.termination_reason in (TerminationReason.ERROR, TerminationReason.TIMEOUT)

    @property
    def truncated(self) -> bool:
        return self.termination_reason == TerminationReason.MAX_RESPONSE_LENGTH or any(
            s.truncated for t in self.trajectories for s in t.steps
        )


class Trace(BaseModel):
    """One sampled choice of one gateway request, recorded token-faithfully.

    ``request`` is the validated request as the gateway understood it (messages or prompt, tools, and the
    sampling params it used). ``response_text`` is the text returned to the client (cut before a stop
    string when one matched); ``completion_token_ids`` keep every sampled token, the stop string's and the
    eos token included. ``completion_mask`` says which of those tokens the model sampled (1) and which the
    gateway's grammar forced (0: the only token it allowed there, e.g. a forced tool call's fixed text; logprob 0.0);
    ``None`` means all were sampled. ``weight_version`` is the policy version that sampled its first token, and
    ``last_weight_version`` its last when a weight sync landed while it decoded (a partial rollout; else
    ``None``). ``trainable`` is false
    when the upstream could not report token ids and logprobs (a plain OpenAI-compatible server): such a
    trace documents the call but cannot be trained on. ``upstream`` names the worker that served it.
    """

    model_config = ConfigDict(extra="forbid")

    trace_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    session_id: str
    request_id: str
    choice_index: int = 0
    created_at: float = Field(default_factory=time.time)
    endpoint: Literal["chat.completions", "completions", "responses", "messages"]
    request: dict[str, Any]
    response_text: str
    response_message: dict[str, Any] | None = None
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    completion_mask: list[int] | None = None
    finish_reason: str | None = None
    latency_ms: float
    weight_version: int = 0
    trainable: bool = True
    upstream: str = "local"
    last_weight_version: int | None = None

    @model_validator(mode="after")
    def _check_lengths(self) -> Trace:
        if len(self.logprobs) != len(self.completion_token_ids):
            raise ValueError(
                f"Trace needs one logprob per completion token: got {len(self.logprobs)} logprobs for "
                f"{len(self.completion_token_ids)} tokens"
            )
        mask = self.completion_mask
        if mask is not None and (
            len(mask) != len(self.completion_token_ids) or any(m not in (0, 1) for m in mask)
        ):
            raise ValueError(
                f"Trace.completion_mask needs one 0 (forced) or 1 (sampled) per completion token: got "
                f"{len(mask)} entries for {len(self.completion_token_ids)} tokens"
            )
        if self.trainable and not self.completion_token_ids and self.finish_reason != "length":
            # An empty sampled completion is impossible from an engine (eos is itself a token).
            raise ValueError("a trainable Trace needs its completion token ids")
        return self

    @property
    def sampled_mask(self) -> list[int]:
        """1 for each completion token the model sampled, 0 for one the gateway forced."""
        if self.completion_mask is None:
            return [1] * len(self.completion_token_ids)
        return list(self.completion_mask)

    def public(self) -> dict[str, Any]:
        """JSON-safe form for the HTTP API: ``-inf`` logprobs (a token the filter had ruled out) become
        ``-9999.0`` (vLLM's convention), since JSON has no infinities."""
        data = self.model_dump()
        data["logprobs"] = [finite_logprob(lp) for lp in self.logprobs]
        return data


# Separate weights per role: the adapter of every role (trajectory name) the run's roles do not map to one.
DEFAULT_ADAPTER = "default"


def finite_logprob(lp: float) -> float:
    """JSON has no infinities: ``-inf`` (a token the sampling filter had excluded) becomes -9999.0, as in
    vLLM's API."""
    return lp if math.isfinite(lp) else -9999.0


class TrainSequence(BaseModel):
    """One training row: a full token sequence with per-token loss mask, rollout logprobs and advantages.

    All four lists have the same length as ``input_ids``. Position ``i`` of ``loss_mask``,
    ``rollout_logprobs`` and ``advantages`` describes the token ``input_ids[i]`` (so prompt positions are
    masked out). ``group_id`` names the advantage group the row came from (for metrics and GSPO-style
    sequence losses). ``weight_version`` is the policy version that sampled it.
    """

    model_config = ConfigDict(extra="forbid")

    input_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    advantages: list[float]
    group_id: str = ""
    episode_id: str = ""
    trajectory_name: str = "default"
    weight_version: int = 0

    @model_validator(mode="after")
    def _check_lengths(self) -> TrainSequence:
        n = len(self.input_ids)
        for name in ("loss_mask", "rollout_logprobs", "advantages"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"TrainSequence.{name} must have one entry per token: {len(getattr(self, name))} != {n}"
                )
        return self

    @property
    def num_response_tokens(self) -> int:
        return sum(self.loss_mask)


class TrainBatch(BaseModel):
    """What the transform pipeline hands a training backend for one optimizer step.

    Backend-neutral lists of ints/floats (a remote backend can ship it as JSON); the local backend pads
    them into tensors per micro-batch.
    """

    model_config = ConfigDict(extra="forbid")

    sequences: list[TrainSequence] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    # Denominators of the loss mean (response tokens, sequences with any); None = this batch's own counts.
    # The trainer adds the rows of skipped zero-advantage groups, so skipping them changes no update.
    loss_norm_tokens: float | None = None
    loss_norm_sequences: float | None = None

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def num_tokens(self) -> int:
        return sum(len(s.input_ids) for s in self.sequences)

    @property
    def num_response_tokens(self) -> int:
        return sum(s.num_response_tokens for s in self.sequences)

    def loss_norms(self) -> tuple[float, float]:
        """The loss mean's denominators ``(tokens, sequences)``: ``loss_norm_*`` when set, else this batch's
        trained tokens and the sequences that have any (what every backend divides by)."""
        tokens = self.loss_norm_tokens or float(self.num_response_tokens)
        sequences = self.loss_norm_sequences or float(sum(1 for s in self.sequences if s.num_response_tokens))
        return tokens, sequences
