"""One step of the algorithm between the rollout and the optimizer: scored episodes in, training batch out.

    shapers = reward_shapers(cfg.algorithm.shaping, max_tokens=cfg.rollout.max_tokens)
    prepared = prepare_batch(episodes, cfg.algorithm, shapers=shapers)
    if not prepared.empty:
        backend.forward_backward(prepared.batch, cfg.algorithm.loss)

This is where the algorithm config (``algorithm.*``) is read: which estimator by name, which credit
assignment, which filters, which shaping, which loss normaliser. ``prepare_batch`` runs, in order:

1. shape: adjust trajectory rewards (format bonus, overlong penalty, the caller's own shapers);
2. group: the attempts at each task, one group per role (``group_episodes``);
3. filter: drop failed or truncated attempts and groups without signal (``filter_groups``);
4. advantages: the estimator over the kept groups, spread over the steps by the credit assignment
   (``compute_advantages``);
5. rows: one token row per step or merged run of turns, with its advantages (``build_train_batch``).

Each step is a function of ``transforms``, ``advantages`` or ``rllm.rewards.shaping``, tested on its own;
this module only chooses and orders them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from rllm.algorithms.advantages import StdKind, takes_norm_std, takes_std
from rllm.algorithms.transforms import (
    Credit,
    FilterConfig,
    TrajectoryGroup,
    attach_trainer_logprobs,
    build_train_batch,
    compute_advantages,
    filter_groups,
    group_episodes,
    state_signal,
    step_returns,
)
from rllm.rewards.shaping import Shaper, apply_shaping, format_bonus, overlong_penalty
from rllm.types import Episode, TrainBatch


class ShapingSettings(Protocol):
    """The reward-shaping knobs (the trainer's ``algorithm.shaping`` section)."""

    format_regex: str | None
    format_bonus: float
    format_penalty: float
    overlong_buffer: int
    overlong_coef: float


class AlgorithmSettings(Protocol):
    """What ``prepare_batch`` reads of the algorithm config: the trainer's ``algorithm`` section (see
    ``rllm train --help-config`` for each key's meaning), described here because the config lives in the
    trainer, a layer above this one."""

    advantage: str | dict[str, str]
    norm_std: bool
    std: StdKind
    credit: Credit
    gamma: float
    step_weight: float
    merge_turns: bool
    loss_norm: Literal["kept", "sampled"]
    filters: FilterConfig


@dataclass
class PreparedBatch:
    """What one step trains on, made from its episodes by ``prepare_batch``; discarded after the update.

    ``groups`` are the kept groups, whose steps now carry their advantages; ``batch`` holds their token
    rows (None when every group was filtered out); ``metrics`` are the filter/*, advantage/* and batch/*
    metrics of the step.
    """

    groups: list[TrajectoryGroup]
    batch: TrainBatch | None
    metrics: dict[str, float]
    merge_turns: bool = True

    @property
    def empty(self) -> bool:
        """Nothing to learn from: no group kept, or the kept groups have no response token to train."""
        return self.batch is None or self.batch.num_response_tokens == 0

    def record_trainer_logprobs(self, logprobs_per_row: list[list[float]]) -> None:
        """Keep on each step the trainer's logprobs of its response (one list per row of ``batch``), for
        the run store to show beside the sampler's."""
        attach_trainer_logprobs(self.groups, logprobs_per_row, merge=self.merge_turns)

    def digest(self) -> str:
        """sha256 of what the update trains on (``batch_digests`` of ``batch``, all fields together)."""
        return combined_digest(batch_digests(self.batch))


# The TrainBatch fields a digest covers, each hashed on its own so that a mismatch names the field.
DIGEST_FIELDS = (
    "input_ids",
    "loss_mask",
    "rollout_logprobs",
    "advantages",
    "group_id",
    "trajectory_name",
    "weight_version",
    "loss_norm",
)


def batch_digests(batch: TrainBatch | None) -> dict[str, str]:
    """sha256 (hex) of each field of ``batch``'s token rows, in row order (``DIGEST_FIELDS``): ids as
    int64, floats as the exact bits of their float64, strings as UTF-8, each row prefixed by its length.
    ``loss_norm`` covers the batch's loss denominators. Episode ids are left out (they name the rows'
    sources, not what is trained), so two runs that sample the same tokens have the same digests.
    None (every group filtered out) hashes as an empty batch."""
    seqs = batch.sequences if batch is not None else []
    out: dict[str, str] = {}
    for name in DIGEST_FIELDS[:4]:
        h = hashlib.sha256()
        for seq in seqs:
            values = getattr(seq, name)
            h.update(len(values).to_bytes(8, "little"))
            dtype = np.int64 if name in ("input_ids", "loss_mask") else np.float64
            h.update(np.asarray(values, dtype=dtype).tobytes())
        out[name] = h.hexdigest()
    for name in ("group_id", "trajectory_name"):
        h = hashlib.sha256()
        for seq in seqs:
            text = getattr(seq, name).encode()
            h.update(len(text).to_bytes(8, "little") + text)
        out[name] = h.hexdigest()
    out["weight_version"] = hashlib.sha256(
        np.asarray([s.weight_version for s in seqs], dtype=np.int64).tobytes()
    ).hexdigest()
    norms = (None, None) if batch is None else (batch.loss_norm_tokens, batch.loss_norm_sequences)
    out["loss_norm"] = hashlib.sha256(repr(norms).encode()).hexdigest()
    return out


def combined_digest(digests: dict[str, str]) -> str:
    """One sha256 over the field digests of ``batch_digests`` (in ``DIGEST_FIELDS`` order)."""
    return hashlib.sha256("".join(f"{k}={digests[k]};" for k in DIGEST_FIELDS).encode()).hexdigest()


def prepare_batch(
    episodes: list[Episode], algorithm: AlgorithmSettings, *, shapers: Sequence[Shaper] = ()
) -> PreparedBatch:
    """Shape, group, filter, compute advantages and build the token rows of one step's episodes.

    Works in place as the steps do: shapers adjust the trajectories' rewards (and add shaping/* to
    ``episode.metrics``) and every kept step gets its ``advantage``.
    """
    apply_shaping(episodes, list(shapers))
    groups = group_episodes(episodes)
    groups, metrics = filter_groups(
        groups, algorithm.filters, signal=credit_signal(algorithm.credit, algorithm.gamma)
    )
    if not groups:
        return PreparedBatch(groups, None, metrics, algorithm.merge_turns)
    metrics.update(
        compute_advantages(
            groups,
            algorithm.advantage,
            credit=algorithm.credit,
            gamma=algorithm.gamma,
            step_weight=algorithm.step_weight,
            **estimator_options(algorithm),
        )
    )
    batch = build_train_batch(groups, merge=algorithm.merge_turns)
    if algorithm.loss_norm == "sampled":
        # Plain GRPO semantics: the skipped zero-variance rows (advantage 0) still count in the loss mean,
        # so the filter only saves compute. "kept" divides by the rows trained on (DAPO).
        batch.loss_norm_tokens = batch.num_response_tokens + metrics["filter/zero_variance_response_tokens"]
        batch.loss_norm_sequences = len(batch.sequences) + metrics["filter/zero_variance_sequences"]
    metrics.update(batch.metrics)
    return PreparedBatch(groups, batch, metrics, algorithm.merge_turns)


def credit_signal(credit: Credit, gamma: float) -> Callable[[TrajectoryGroup], np.ndarray] | None:
    """The values whose spread tells the filter a group has signal, for ``credit``: the per-step returns
    with per-step credit, both levels' deviations with per-state credit, else the rewards (None)."""
    if credit == "per_step":
        return lambda group: step_returns(group, gamma)
    if credit == "per_state":
        return lambda group: state_signal(group, gamma)
    return None


def estimator_options(algorithm: AlgorithmSettings) -> dict[str, object]:
    """The options of ``algorithm`` that the estimator(s) it names take (their signatures say): ``norm_std``
    (grpo), ``std`` for the estimators that divide by a standard deviation (``compute_advantages`` refuses
    any other)."""
    names = (
        set(algorithm.advantage.values()) if isinstance(algorithm.advantage, dict) else {algorithm.advantage}
    )
    options: dict[str, object] = {}
    if any(takes_norm_std(name) for name in names):
        options["norm_std"] = algorithm.norm_std
    if any(takes_std(name) for name in names):
        options["std"] = algorithm.std
    return options


def reward_shapers(shaping: ShapingSettings, *, max_tokens: int) -> list[Shaper]:
    """The shapers ``algorithm.shaping`` turns on (``max_tokens``: the rollout's response budget, where
    the overlong penalty is full)."""
    out: list[Shaper] = []
    if shaping.format_regex is not None:
        out.append(
            format_bonus(shaping.format_regex, bonus=shaping.format_bonus, penalty=shaping.format_penalty)
        )
    if shaping.overlong_buffer:
        out.append(
            overlong_penalty(
                max_tokens=max_tokens, buffer=shaping.overlong_buffer, coef=shaping.overlong_coef
            )
        )
    return out
