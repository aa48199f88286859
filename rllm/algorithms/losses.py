"""Policy-gradient losses over padded token tensors.

Shapes: ``B`` sequences, ``T`` token positions, ``V`` vocabulary entries. Every per-token tensor is
``[B, T]`` and lines up with ``TrainSequence``: position ``t`` describes token ``input_ids[t]``, and
``mask_BT`` is 1 where that token is trained on (model-generated response tokens) and 0 elsewhere.

``compute_policy_loss`` returns the per-token loss (already masked); ``aggregate_loss`` reduces it to the
scalar the optimizer sees, with normalisers for the whole optimizer batch so that summing the aggregated
losses of its micro-batches gives the loss of the full batch. ``sg(x)`` below means ``x.detach()``.

Policy losses are named in config (``algorithm.loss.name``), so they live in ``POLICY_LOSSES``, a
:class:`rllm.utils.registry.Registry` (docs/plugins.md). A loss declares the ``LossConfig`` knobs it reads
(``knobs=("clip_low", "clip_high")``): a knob set away from its default that the chosen loss does not read
is refused. One defined elsewhere registers with ``POLICY_LOSSES.register(name, fn, knobs=(...))``, or
through the ``rllm.policy_losses`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import Tensor

from rllm.utils.config import unknown_name
from rllm.utils.registry import Registry

# exp() of a log-ratio beyond this overflows float32 or carries no useful signal; clamp first (as verl does)
_MAX_LOG_RATIO = 20.0

AggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


class LossConfig(BaseModel):
    """How the policy loss is computed and reduced; validated once when the trainer config is loaded."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        "ppo",
        description="Policy loss: 'ppo' (clipped token ratio), 'is' (unclipped importance sampling), "
        "'gspo' (clipped sequence ratio), 'cispo' (clipped, detached IS weight times logprob), "
        "'cross_entropy' (-logprob times the per-token weight carried in the advantages: SFT, or "
        "Tinker's cross_entropy with its weights), or one registered in rllm.algorithms.POLICY_LOSSES.",
    )
    clip_low: float = Field(0.2, ge=0.0, description="PPO: the ratio is clipped below at 1 - clip_low.")
    clip_high: float = Field(
        0.28, ge=0.0, description="PPO: the ratio is clipped above at 1 + clip_high (DAPO's clip-higher)."
    )
    gspo_clip_low: float = Field(
        3e-4, ge=0.0, description="GSPO: the sequence ratio is clipped below at 1 - gspo_clip_low."
    )
    gspo_clip_high: float = Field(
        4e-4, ge=0.0, description="GSPO: the sequence ratio is clipped above at 1 + gspo_clip_high."
    )
    cispo_clip_high: float = Field(
        5.0, gt=0.0, description="CISPO: upper bound on the IS weight itself (not 1 + eps): min(r, this)."
    )
    cispo_clip_low: float | None = Field(
        None, ge=0.0, description="CISPO: optional lower bound on the IS weight itself; None = no bound."
    )
    agg: AggMode = Field(
        "token-mean",
        description="How per-token losses become one number; see aggregate_loss for the formulas.",
    )
    agg_norm_tokens: int | None = Field(
        None,
        gt=0,
        description="The constant token count for agg='seq-mean-token-sum-norm' (Dr. GRPO; typically the "
        "max response length). Required by that mode, unused by the others.",
    )
    kl_coef: float = Field(
        0.0, ge=0.0, description="Weight of the per-token KL penalty to the reference policy; 0 disables it."
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Per-token estimator of KL(policy || reference); see kl_penalty."
    )
    tis_cap: float | None = Field(
        None,
        gt=0.0,
        description="Truncated importance sampling: weight each token's policy loss by "
        "min(exp(old_logprobs - rollout_logprobs), tis_cap) to correct for the rollout engine's "
        "numerics differing from the trainer's. None disables it.",
    )

    @field_validator("name")
    @classmethod
    def _known_loss(cls, name: str) -> str:
        """Refused when the config loads, with a did-you-mean, rather than at the first update."""
        if name not in POLICY_LOSSES:
            raise ValueError(unknown_name(POLICY_LOSSES.kind, name, POLICY_LOSSES))
        return name

    @model_validator(mode="after")
    def _check_agg(self) -> LossConfig:
        if self.agg == "seq-mean-token-sum-norm" and self.agg_norm_tokens is None:
            raise ValueError(
                "LossConfig.agg='seq-mean-token-sum-norm' divides by a constant token count: set "
                "agg_norm_tokens (e.g. the max response length)."
            )
        if self.cispo_clip_low is not None and self.cispo_clip_low > self.cispo_clip_high:
            raise ValueError(
                f"LossConfig.cispo_clip_low ({self.cispo_clip_low}) must not exceed cispo_clip_high "
                f"({self.cispo_clip_high})."
            )
        self._check_knobs_apply()
        return self

    def _check_knobs_apply(self) -> None:
        """Each loss owns its knobs: one the chosen loss (or aggregation) never reads, set away from its
        default, is refused rather than silently ignored. A default value passes, so a dumped config (which
        lists every knob) loads back."""
        fields = type(self).model_fields
        for knob, owners in _knob_readers().items():
            if self.name not in owners and getattr(self, knob) != fields[knob].default:
                raise ValueError(
                    f"LossConfig.{knob} is read by the {' or '.join(map(repr, owners))} loss only, not "
                    f"{self.name!r}: drop it (or set name={owners[0]})"
                )
        if self.agg_norm_tokens is not None and self.agg != "seq-mean-token-sum-norm":
            raise ValueError(
                f"LossConfig.agg_norm_tokens is read by agg='seq-mean-token-sum-norm' only, not {self.agg!r}: "
                "drop it"
            )


def _knob_readers() -> dict[str, list[str]]:
    """Each loss-specific knob, with the registered losses that declare they read it."""
    readers: dict[str, list[str]] = {}
    for plugin in POLICY_LOSSES.plugins():
        knobs: Sequence[str] = plugin.extra.get("knobs", ())
        for knob in knobs:
            if knob not in LossConfig.model_fields:
                raise ValueError(
                    f"policy loss {plugin.name!r} declares knob {knob!r}, which LossConfig has not"
                )
            readers.setdefault(knob, []).append(plugin.name)
    return readers


def masked_mean(values_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """sum(values * mask) / max(sum(mask), 1): the mean over masked-in positions (0 if there are none)."""
    return (values_BT * mask_BT).sum() / mask_BT.sum().clamp(min=1.0)


def _clamped_exp(log_ratio: Tensor) -> Tensor:
    return torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))


# Each policy loss returns (unmasked per-token loss, ratio shown in metrics, bool "clipping was active").
PolicyLossFn = Callable[[Tensor, Tensor, Tensor, Tensor, LossConfig], tuple[Tensor, Tensor, Tensor]]


def ppo_loss(
    logprobs_BT: Tensor, old_logprobs_BT: Tensor, advantages_BT: Tensor, mask_BT: Tensor, cfg: LossConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """PPO clipped surrogate with asymmetric (clip-higher) bounds.

        r_t = exp(logp_t - logp_old_t)
        L_t = -min(r_t * A_t, clip(r_t, 1 - clip_low, 1 + clip_high) * A_t)

    Clipping is *active* where the clipped term is the smaller one, i.e. where it zeroes the gradient.
    """
    ratio_BT = _clamped_exp(logprobs_BT - old_logprobs_BT)
    return _clipped_surrogate(ratio_BT, advantages_BT, cfg.clip_low, cfg.clip_high)


def _clipped_surrogate(
    ratio_BT: Tensor, advantages_BT: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """-min(r A, clip(r, 1 - low, 1 + high) A), the ratio, and where the clipped term is active."""
    unclipped_BT = -advantages_BT * ratio_BT
    clipped_BT = -advantages_BT * ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped_BT, clipped_BT), ratio_BT, clipped_BT > unclipped_BT


def is_loss(
    logprobs_BT: Tensor, old_logprobs_BT: Tensor, advantages_BT: Tensor, mask_BT: Tensor, cfg: LossConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """Plain (unclipped) importance-sampled policy gradient.

    L_t = -r_t * A_t,    r_t = exp(logp_t - logp_old_t)
    """
    ratio_BT = _clamped_exp(logprobs_BT - old_logprobs_BT)
    return -advantages_BT * ratio_BT, ratio_BT, torch.zeros_like(ratio_BT, dtype=torch.bool)


def gspo_loss(
    logprobs_BT: Tensor, old_logprobs_BT: Tensor, advantages_BT: Tensor, mask_BT: Tensor, cfg: LossConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """GSPO (Zheng et al. 2025): PPO clipping on the length-normalised sequence ratio.

    s_i = exp( sum_t m_it (logp_it - logp_old_it) / sum_t m_it )
    r_it = sg(s_i) * exp(logp_it - sg(logp_it))        (value s_i; gradient s_i * grad logp_it)
    L_it = -min(r_it * A_it, clip(r_it, 1 - gspo_clip_low, 1 + gspo_clip_high) * A_it)
    """
    lengths_B = mask_BT.sum(dim=-1).clamp(min=1.0)
    seq_log_ratio_B = ((logprobs_BT - old_logprobs_BT) * mask_BT).sum(dim=-1) / lengths_B
    log_ratio_BT = seq_log_ratio_B.detach().unsqueeze(-1) + logprobs_BT - logprobs_BT.detach()
    ratio_BT = _clamped_exp(log_ratio_BT)
    return _clipped_surrogate(ratio_BT, advantages_BT, cfg.gspo_clip_low, cfg.gspo_clip_high)


def cispo_loss(
    logprobs_BT: Tensor, old_logprobs_BT: Tensor, advantages_BT: Tensor, mask_BT: Tensor, cfg: LossConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """CISPO (MiniMax-M1, 2025): REINFORCE weighted by a clipped, detached IS weight.

        w_t = sg(clip(r_t, cispo_clip_low, cispo_clip_high)),   r_t = exp(logp_t - logp_old_t)
        L_t = -w_t * A_t * logp_t

    The bounds are on the weight itself (no lower bound when ``cispo_clip_low`` is None). Unlike PPO, no
    token's gradient is ever zeroed: clipping only caps how much a token counts, and the gradient flows
    only through ``logp_t``. Clipping is *active* where the weight was changed by the bounds.
    """
    ratio_BT = _clamped_exp(logprobs_BT - old_logprobs_BT).detach()
    weight_BT = ratio_BT.clamp(min=cfg.cispo_clip_low, max=cfg.cispo_clip_high)
    return -weight_BT * advantages_BT * logprobs_BT, ratio_BT, weight_BT != ratio_BT


def cross_entropy_loss(
    logprobs_BT: Tensor, old_logprobs_BT: Tensor, advantages_BT: Tensor, mask_BT: Tensor, cfg: LossConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """Weighted negative log-likelihood (supervised learning; Tinker's ``cross_entropy``).

        L_t = -w_t * logp_t,    w_t = A_t

    The per-token weight rides in the advantages tensor (1 on the tokens to imitate for plain SFT; any
    weight for Tinker's ``weights``), so the loss needs no field of its own; the behaviour logprobs are
    not read. The ratio reported in metrics is that of ``old_logprobs`` anyway, so a caller that passes
    them still sees how far the policy moved.
    """
    ratio_BT = _clamped_exp(logprobs_BT - old_logprobs_BT).detach()
    return -advantages_BT * logprobs_BT, ratio_BT, torch.zeros_like(ratio_BT, dtype=torch.bool)


def _check_loss(name: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"policy loss {name!r} must be a function like ppo_loss (a PolicyLossFn)")


POLICY_LOSSES: Registry[PolicyLossFn] = Registry(
    "policy loss", group="rllm.policy_losses", key="algorithm.loss.name", check=_check_loss
)
"""Every loss ``algorithm.loss.name`` can name; ``Plugin.extra["knobs"]``: the ``LossConfig`` knobs it reads."""

POLICY_LOSSES.register("ppo", ppo_loss, knobs=("clip_low", "clip_high"))
POLICY_LOSSES.register("is", is_loss)
POLICY_LOSSES.register("gspo", gspo_loss, knobs=("gspo_clip_low", "gspo_clip_high"))
POLICY_LOSSES.register("cispo", cispo_loss, knobs=("cispo_clip_high", "cispo_clip_low"))
POLICY_LOSSES.register("cross_entropy", cross_entropy_loss)


def kl_penalty(logprobs_BT: Tensor, ref_logprobs_BT: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy (Schulman's k1/k2/k3).

    k1 = logp - logp_ref
    k2 = 0.5 * (logp - logp_ref)^2
    k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1      (unbiased and always >= 0)
    """
    log_ratio_BT = logprobs_BT - ref_logprobs_BT
    if estimator == "k1":
        return log_ratio_BT
    if estimator == "k2":
        return 0.5 * log_ratio_BT.square()
    if estimator == "k3":
        neg_BT = (-log_ratio_BT).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        return torch.exp(neg_BT) - neg_BT - 1.0
    raise ValueError(f"Unknown KL estimator {estimator!r}: choose one of k1, k2, k3.")


def compute_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    *,
    rollout_logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The per-token training loss ``[B, T]`` (zero where ``mask`` is 0) and detached scalar metrics.

        loss_t = m_t * (w_t * L_t + kl_coef * KL_t)

    ``L_t`` is the policy loss named by ``cfg.name`` (see ``POLICY_LOSSES``), computed from the ratio
    ``exp(logprobs - old_logprobs)``; ``old_logprobs`` are the behaviour policy's logprobs: the trainer's
    recomputed pre-update logprobs, or the rollout engine's. ``w_t`` is the truncated-IS correction,
    ``min(exp(old_logprobs - rollout_logprobs), tis_cap)`` (detached), or 1 when ``cfg.tis_cap`` is None.
    ``KL_t`` is ``kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator)``, added when ``kl_coef > 0``.

    Metrics (means over masked-in tokens): ``clip_fraction``, ``approx_kl`` (k3 estimate of
    KL(old || current): ``r - 1 - log r``), ``ratio_mean``, and when used ``kl_ref``, ``tis_weight_mean``,
    ``tis_truncated_fraction``.
    """
    if cfg.kl_coef > 0 and ref_logprobs is None:
        raise ValueError(
            f"LossConfig.kl_coef={cfg.kl_coef} needs ref_logprobs: pass the reference model's logprobs "
            "or set kl_coef=0."
        )
    if cfg.tis_cap is not None and rollout_logprobs is None:
        raise ValueError(
            "LossConfig.tis_cap is set but rollout_logprobs is None: pass the rollout engine's logprobs "
            "or set tis_cap=None."
        )
    mask_BT = mask.to(logprobs.dtype)
    policy_loss_BT, ratio_BT, clip_active_BT = POLICY_LOSSES.get(cfg.name)(
        logprobs, old_logprobs, advantages, mask_BT, cfg
    )

    metrics: dict[str, Tensor] = {}
    with torch.no_grad():
        log_ratio_BT = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        metrics["clip_fraction"] = masked_mean(clip_active_BT.to(mask_BT.dtype), mask_BT)
        metrics["approx_kl"] = masked_mean(torch.exp(log_ratio_BT) - 1.0 - log_ratio_BT, mask_BT)
        metrics["ratio_mean"] = masked_mean(ratio_BT.detach(), mask_BT)

    if cfg.tis_cap is not None:
        assert rollout_logprobs is not None
        with torch.no_grad():
            raw_weight_BT = _clamped_exp(old_logprobs - rollout_logprobs)
            tis_weight_BT = raw_weight_BT.clamp(max=cfg.tis_cap)
            metrics["tis_weight_mean"] = masked_mean(tis_weight_BT, mask_BT)
            metrics["tis_truncated_fraction"] = masked_mean(
                (raw_weight_BT > cfg.tis_cap).to(mask_BT.dtype), mask_BT
            )
        policy_loss_BT = policy_loss_BT * tis_weight_BT

    loss_BT = policy_loss_BT
    if ref_logprobs is not None:
        kl_BT = kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator)
        metrics["kl_ref"] = masked_mean(kl_BT.detach(), mask_BT)
        if cfg.kl_coef > 0:
            loss_BT = loss_BT + cfg.kl_coef * kl_BT
    return loss_BT * mask_BT, metrics


def aggregate_loss(
    loss_BT: Tensor,
    mask_BT: Tensor,
    agg: str,
    *,
    num_tokens: float,
    num_sequences: float,
    norm_tokens: int | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar, normalised by counts over the WHOLE optimizer batch.

    With ``N_tok = num_tokens`` (masked-in tokens in the optimizer batch), ``N_seq = num_sequences``,
    ``len_i = sum_t m_it`` and ``L_it`` the (masked) per-token loss:

        token-mean:               sum_i sum_t L_it / N_tok
        seq-mean-token-sum:       sum_i sum_t L_it / N_seq
        seq-mean-token-mean:      sum_i (sum_t L_it / len_i) / N_seq
        seq-mean-token-sum-norm:  sum_i sum_t L_it / (norm_tokens * N_seq)      (Dr. GRPO)

    Every mode is a sum over this micro-batch's rows divided by batch-wide constants, so the aggregated
    losses of the micro-batches add up to the aggregated loss of the full batch (accumulate, don't average).
    """
    if num_tokens <= 0 or num_sequences <= 0:
        raise ValueError(
            f"aggregate_loss needs positive batch-wide counts, got num_tokens={num_tokens}, "
            f"num_sequences={num_sequences}: skip optimizer batches with no trainable tokens."
        )
    mask_BT = mask_BT.to(loss_BT.dtype)
    masked_BT = loss_BT * mask_BT
    if agg == "token-mean":
        return masked_BT.sum() / num_tokens
    if agg == "seq-mean-token-sum":
        return masked_BT.sum() / num_sequences
    if agg == "seq-mean-token-mean":
        lengths_B = mask_BT.sum(dim=-1).clamp(min=1.0)
        return (masked_BT.sum(dim=-1) / lengths_B).sum() / num_sequences
    if agg == "seq-mean-token-sum-norm":
        if norm_tokens is None or norm_tokens <= 0:
            raise ValueError(
                "agg='seq-mean-token-sum-norm' needs a positive norm_tokens (LossConfig.agg_norm_tokens)."
            )
        return masked_BT.sum() / (norm_tokens * num_sequences)
    raise ValueError(
        f"Unknown loss aggregation {agg!r}: choose one of token-mean, seq-mean-token-sum, "
        "seq-mean-token-mean, seq-mean-token-sum-norm."
    )


def _rows_in_float32(logits_BTV: Tensor) -> bool:
    # Half-precision logsumexp over a large vocabulary loses precision; upcast one row at a time so the
    # float32 copy is [T, V] rather than [B, T, V].
    return logits_BTV.dtype in (torch.float16, torch.bfloat16)


def entropy_from_log_probs(log_probs_NV: Tensor) -> Tensor:
    """Per-row entropy of a distribution given as finite float32 log-probabilities (a log-softmax of
    logits), ``[N]``: H = -sum_v p_v log p_v."""
    return -(log_probs_NV.exp() * log_probs_NV).sum(dim=-1)


def token_logprobs_from_logits(logits_BTV: Tensor, target_ids_BT: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature) at each target id, ``[B, T]``.

        logp_t = z_t[y_t] / tau - logsumexp(z_t / tau)

    Computed as gather minus logsumexp, which never materialises a full log-softmax copy of the logits.
    Use the sampler's temperature so the logprobs match the distribution the tokens were drawn from.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}.")
    if _rows_in_float32(logits_BTV):
        return torch.stack(
            [
                token_logprobs_from_logits(row_TV.float().unsqueeze(0), ids_T.unsqueeze(0), temperature)[0]
                for row_TV, ids_T in zip(logits_BTV, target_ids_BT)
            ]
        )
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    target_BT = logits_BTV.gather(-1, target_ids_BT.long().unsqueeze(-1)).squeeze(-1)
    return target_BT - torch.logsumexp(logits_BTV, dim=-1)
