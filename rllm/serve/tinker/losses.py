"""Tinker's built-in losses as rllm losses, and a Tinker ``Datum`` as an rllm ``TrainSequence``.

Tinker name           rllm loss        inputs (per target token)              loss_fn_config
``cross_entropy``     cross_entropy    target_tokens, weights (default 1)     -
``importance_sampling`` is             target_tokens, logprobs, advantages    -
``ppo``               ppo              target_tokens, logprobs, advantages    clip_low_threshold (0.8),
                                                                              clip_high_threshold (1.2)
``cispo``             cispo            target_tokens, logprobs, advantages    the same two (0.8, 1.2)

Anything else (``dro``, ``gspo``, ``stable_reinforce``, ``custom``, per-token clip thresholds) is refused
with a message saying so. Tinker's thresholds bound the ratio itself (``clip(r, low, high)``); rllm's PPO
clips at ``1 - clip_low`` and ``1 + clip_high``, so ``clip_low = 1 - low`` and ``clip_high = high - 1``;
CISPO's bounds are the weight's own in both.

Tinker's losses are **sums** over every target token of every datum, never means. rllm's ``token-mean``
aggregation divides the summed per-token loss by ``TrainBatch.loss_norm_tokens``; setting it to 1 gives
the sum (``LocalBackend`` uses it as the batch-wide normaliser of every micro-batch, so micro-batching
does not change that). A target whose advantage (or weight) is 0 adds nothing to any of these losses, nor
to their gradient, so ``forward_backward`` trains only the others (``trained_only``): a datum's prompt is
then a prefix the backend runs once for all the datums that share it (``backend.share_prefix``, a group of
answers to one prompt), and every target still gets its logprob back (:func:`untrained_logprobs`).
``forward`` puts every target in the mask.

Datum layout: ``model_input`` holds tokens ``x_0 .. x_{n-1}`` and ``target_tokens`` ``y_0 .. y_{n-1}``,
``y_t`` being the token predicted after ``x_0 .. x_t``. rllm trains on one sequence whose token ``i`` is
predicted from the tokens before it, so the datum becomes ``input_ids = x_0 .. x_{n-1}, y_{n-1}``: that is
the same thing exactly when ``y_t = x_{t+1}`` for t < n - 1 (the cookbook always builds data so: input =
tokens[:-1], target = tokens[1:]); a datum whose targets are not its input shifted by one is refused.
Position ``t + 1`` of the sequence's ``loss_mask`` / ``advantages`` / ``rollout_logprobs`` carries
target ``t``'s values, position 0 none.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rllm.algorithms.losses import LossConfig, compute_policy_loss
from rllm.serve.tinker.wire import WireDatum
from rllm.serve.tinker.worker import RequestError
from rllm.types import TrainSequence

TINKER_LOSSES: dict[str, str] = {
    "cross_entropy": "cross_entropy",
    "importance_sampling": "is",
    "ppo": "ppo",
    "cispo": "cispo",
}
_RL_INPUTS = frozenset({"target_tokens", "logprobs", "advantages"})
_INPUTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {  # (required, optional)
    "cross_entropy": (frozenset({"target_tokens"}), frozenset({"weights"})),
    "importance_sampling": (_RL_INPUTS, frozenset()),
    "ppo": (_RL_INPUTS, frozenset()),
    "cispo": (_RL_INPUTS, frozenset()),
}
_CLIP_KEYS = ("clip_low_threshold", "clip_high_threshold")
DEFAULT_CLIP = (0.8, 1.2)  # Tinker's documented thresholds (epsilon 0.2 both ways)


def loss_config(loss_fn: str, config: dict[str, float | str] | None) -> LossConfig:
    """The rllm ``LossConfig`` computing Tinker's ``loss_fn`` with ``loss_fn_config``, summed over tokens."""
    if loss_fn not in TINKER_LOSSES:
        raise RequestError(
            f"loss_fn {loss_fn!r} is not supported by rllm serve tinker: use one of {', '.join(TINKER_LOSSES)}"
        )
    config = dict(config or {})
    allowed = _CLIP_KEYS if loss_fn in ("ppo", "cispo") else ()
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise RequestError(
            f"loss_fn_config keys {unknown} are not read by {loss_fn!r}"
            + (f" (it reads {', '.join(allowed)})" if allowed else " (it takes none)")
        )
    low, high = (config.get(k, d) for k, d in zip(_CLIP_KEYS, DEFAULT_CLIP))
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (low, high)):
        raise RequestError(f"{loss_fn} clip thresholds must be finite numbers, got {low!r}, {high!r}")
    low, high = float(low), float(high)
    name = TINKER_LOSSES[loss_fn]
    if name == "ppo":
        if not 0.0 <= low <= 1.0 <= high:
            raise RequestError(
                f"ppo needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got {low}, {high}"
            )
        return LossConfig(name="ppo", clip_low=1.0 - low, clip_high=high - 1.0, agg="token-mean")
    if name == "cispo":
        if not 0.0 <= low <= high or high <= 0.0:
            raise RequestError(
                f"cispo needs 0 <= clip_low_threshold <= clip_high_threshold, got {low}, {high}"
            )
        return LossConfig(name="cispo", cispo_clip_low=low, cispo_clip_high=high, agg="token-mean")
    return LossConfig(name=name, agg="token-mean")


def _vector(datum: WireDatum, key: str, n: int, index: int) -> np.ndarray:
    value = datum.inputs[key]
    if value.ndim != 1 or value.shape[0] != n:
        raise RequestError(
            f"data[{index}].loss_fn_inputs[{key!r}] must be 1-D with one entry per target token "
            f"({n}), got shape {list(value.shape)}"
        )
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        raise RequestError(f"data[{index}].loss_fn_inputs[{key!r}] has a NaN or infinite value")
    return value


def to_sequence(
    datum: WireDatum, loss_fn: str, index: int, vocab_size: int, *, trained_only: bool = False
) -> TrainSequence:
    """One Tinker datum as the rllm training row described in the module docstring; with ``trained_only``,
    targets of advantage (or weight) 0 are out of the loss mask."""
    required, optional = _INPUTS[loss_fn]
    given = set(datum.inputs)
    if missing := sorted(required - given):
        raise RequestError(f"data[{index}].loss_fn_inputs lacks {missing}, which {loss_fn!r} needs")
    if extra := sorted(given - required - optional):
        raise RequestError(
            f"data[{index}].loss_fn_inputs has {extra}, which {loss_fn!r} does not read here "
            f"(it reads {sorted(required | optional)})"
        )
    x = datum.tokens
    n = len(x)
    if n == 0:
        raise RequestError(f"data[{index}].model_input is empty")
    y = _vector(datum, "target_tokens", n, index).astype(np.int64).tolist()
    if y[:-1] != x[1:]:
        t = next(t for t in range(n - 1) if y[t] != x[t + 1])
        raise RequestError(
            f"data[{index}]: target_tokens[{t}] = {y[t]} but model_input[{t + 1}] = {x[t + 1]}: this service "
            "trains one sequence per datum, so target_tokens must be model_input shifted by one "
            "(input = tokens[:-1], target = tokens[1:])"
        )
    ids = [*x, y[-1]]
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise RequestError(f"data[{index}] has a token id outside the vocabulary (0 .. {vocab_size - 1})")
    if loss_fn == "cross_entropy":
        w = _vector(datum, "weights", n, index) if "weights" in given else np.ones(n)
        weight, behaviour = w.astype(float).tolist(), [0.0] * n
    else:
        weight = _vector(datum, "advantages", n, index).astype(float).tolist()
        behaviour = _vector(datum, "logprobs", n, index).astype(float).tolist()
    mask = [int(w != 0.0) for w in weight] if trained_only else [1] * n
    return TrainSequence(
        input_ids=ids, loss_mask=[0, *mask], rollout_logprobs=[0.0, *behaviour], advantages=[0.0, *weight]
    )


def untrained_logprobs(sequences: list[TrainSequence]) -> tuple[list[TrainSequence], list[list[int]]]:
    """What still needs a logprob after a ``trained_only`` pass: rows to run forward only, and for each of
    ``sequences`` the rows holding its untrained targets (``[prefix]`` or ``[whole]``).

    Untrained targets before the first trained one are a prefix (the prompt): one row per distinct prefix,
    shared by every datum that has it. A sequence with an untrained target after its first trained one (a
    hole: an environment's turn) gets a row of its own with exactly those targets in the mask."""
    rows: list[TrainSequence] = []
    by_prefix: dict[tuple[int, ...], int] = {}
    owners: list[list[int]] = []
    for seq in sequences:
        mask = seq.loss_mask
        first = mask.index(1) if 1 in mask else len(mask)
        holes = [i for i in range(first, len(mask)) if not mask[i]]
        mine: list[int] = []
        if holes:
            complement = [0] + [1 - m for m in mask[1:]]
            rows.append(_forward_row(seq.input_ids, complement))
            mine.append(len(rows) - 1)
        elif first > 1:
            key = tuple(seq.input_ids[:first])
            if key not in by_prefix:
                rows.append(_forward_row(list(key), [0] + [1] * (first - 1)))
                by_prefix[key] = len(rows) - 1
            mine.append(by_prefix[key])
        owners.append(mine)
    return rows, owners


def _forward_row(ids: list[int], mask: list[int]) -> TrainSequence:
    zeros = [0.0] * len(ids)
    return TrainSequence(input_ids=ids, loss_mask=mask, rollout_logprobs=zeros, advantages=zeros)


def summed_loss(sequences: list[TrainSequence], logprobs: list[list[float]], loss: LossConfig) -> float:
    """Tinker's ``loss:sum`` for a forward pass without backward: rllm's per-token loss summed over every
    datum's target tokens, from logprobs aligned with ``input_ids``."""
    total = 0.0
    for seq, lp in zip(sequences, logprobs):
        row = lambda v: torch.tensor([v[1:]], dtype=torch.float64)
        per_token, _ = compute_policy_loss(
            row(lp), row(seq.rollout_logprobs), row(seq.advantages), row(seq.loss_mask), loss
        )
        total += float(per_token.sum())
    return total
