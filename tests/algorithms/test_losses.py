"""Policy losses, KL, aggregation and logit helpers against hand-computed numbers."""

import math

import pytest
import torch
from pydantic import ValidationError

from rllm.algorithms.losses import (
    POLICY_LOSSES,
    LossConfig,
    aggregate_loss,
    compute_policy_loss,
    entropy_from_log_probs,
    kl_penalty,
    token_logprobs_from_logits,
)


def _t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_registry_matches_config_names():
    assert set(POLICY_LOSSES) == {"ppo", "is", "gspo", "cispo", "cross_entropy"}


def test_ppo_clip_higher_for_positive_and_negative_advantages():
    # ratios r and advantages A per token; clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]
    ratio = [1.5, 1.5, 0.5, 0.5, 1.25, 0.75]
    adv = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0]
    # loss = -min(r*A, clip(r)*A):
    #   1.5,+1 -> -min(1.5, 1.28) = -1.28   (clipped)
    #   1.5,-1 -> -min(-1.5,-1.28) = 1.5    (not clipped: the pessimistic unclipped term wins)
    #   0.5,+1 -> -min(0.5, 0.8)  = -0.5    (not clipped)
    #   0.5,-1 -> -min(-0.5,-0.8) = 0.8     (clipped)
    #   1.25,+1 -> -1.25, not clipped (a symmetric 0.2 clip would have clipped at 1.2)
    #   0.75,-1 -> -min(-0.75,-0.8) = 0.8   (clipped)
    logprobs = torch.log(_t(ratio)).requires_grad_(True)
    old = torch.zeros(1, 6, dtype=torch.float64)
    loss, metrics = compute_policy_loss(logprobs, old, _t(adv), torch.ones(1, 6), LossConfig())
    torch.testing.assert_close(loss, _t([-1.28, 1.5, -0.5, 0.8, -1.25, 0.8]))
    assert metrics["clip_fraction"].item() == pytest.approx(3 / 6)
    assert metrics["ratio_mean"].item() == pytest.approx(sum(ratio) / 6)
    loss.sum().backward()
    # d(-r*A)/dlogp = -r*A where unclipped; 0 where clipped
    torch.testing.assert_close(logprobs.grad, _t([0.0, 1.5, -0.5, 0.0, -1.25, 0.0]))


def test_masked_tokens_contribute_nothing():
    logprobs = torch.log(_t([2.0, 3.0]))
    loss, metrics = compute_policy_loss(
        logprobs, torch.zeros(1, 2, dtype=torch.float64), _t([1.0, 1.0]), torch.tensor([[1, 0]]), LossConfig()
    )
    # token 0: -min(2, 1.28) = -1.28; token 1 masked -> 0, and it is not counted in clip_fraction
    torch.testing.assert_close(loss, _t([-1.28, 0.0]))
    assert metrics["clip_fraction"].item() == pytest.approx(1.0)


def test_is_loss_is_unclipped():
    # -r*A: -(1.5 * 1) = -1.5, -(0.5 * -2) = 1.0
    loss, metrics = compute_policy_loss(
        torch.log(_t([1.5, 0.5])),
        torch.zeros(1, 2, dtype=torch.float64),
        _t([1.0, -2.0]),
        torch.ones(1, 2),
        LossConfig(name="is"),
    )
    torch.testing.assert_close(loss, _t([-1.5, 1.0]))
    assert metrics["clip_fraction"].item() == 0.0


def test_cross_entropy_is_weighted_nll_and_ignores_behaviour_logprobs():
    # -w * logp: the weight rides in the advantages; the behaviour logprobs change nothing
    logprobs = torch.log(_t([0.5, 0.25, 0.8])).requires_grad_(True)
    weights = _t([1.0, 2.0, 0.0])
    for old in (torch.zeros(1, 3, dtype=torch.float64), _t([-3.0, 1.0, 0.5])):
        loss, metrics = compute_policy_loss(
            logprobs, old, weights, torch.ones(1, 3), LossConfig(name="cross_entropy")
        )
        torch.testing.assert_close(loss, _t([-math.log(0.5), -2 * math.log(0.25), 0.0]))
        assert metrics["clip_fraction"].item() == 0.0
    loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, -weights)


def test_gspo_uses_the_length_normalised_sequence_ratio():
    # seq 0: masked log-ratios 0.1, 0.3 (the 5.0 is masked out) -> mean 0.2 -> s = exp(0.2) = 1.2214
    # seq 1: log-ratios 0, 0 (third masked) -> s = 1
    log_ratio = _t([0.1, 0.3, 5.0], [0.0, 0.0, 0.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    adv = torch.ones(2, 3, dtype=torch.float64)
    old = torch.full((2, 3), -1.0, dtype=torch.float64)

    # wide clip: loss = -s * A on every token, grad wrt each logp_t = -A * s (own token only)
    wide = LossConfig(name="gspo", gspo_clip_low=0.9, gspo_clip_high=9.0)
    logprobs = (old + log_ratio).requires_grad_(True)
    loss, metrics = compute_policy_loss(logprobs, old, adv, mask, wide)
    s = math.exp(0.2)
    torch.testing.assert_close(loss, _t([-s, -s, 0.0], [-1.0, -1.0, 0.0]))
    loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([-s, -s, 0.0], [-1.0, -1.0, 0.0]))
    assert metrics["clip_fraction"].item() == 0.0

    # default clip [1 - 3e-4, 1 + 4e-4]: seq 0 is clipped to 1.0004 with zero grad, seq 1 untouched
    logprobs = (old + log_ratio).requires_grad_(True)
    loss, metrics = compute_policy_loss(logprobs, old, adv, mask, LossConfig(name="gspo"))
    torch.testing.assert_close(loss, _t([-1.0004, -1.0004, 0.0], [-1.0, -1.0, 0.0]))
    assert metrics["clip_fraction"].item() == pytest.approx(0.5)
    loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([0.0, 0.0, 0.0], [-1.0, -1.0, 0.0]))


def test_cispo_gradient_flows_only_through_logprobs():
    # logp = [-1, -2]; old = [-1 - ln 10, -2] -> r = [10, 1]; weight = min(r, 5) = [5, 1]; A = [1, -1]
    # loss = -w * A * logp = [-5 * 1 * -1, -1 * -1 * -2] = [5, -2]; dloss/dlogp = -w * A = [-5, 1]
    logprobs = _t([-1.0, -2.0]).requires_grad_(True)
    old = _t([-1.0 - math.log(10.0), -2.0]).requires_grad_(True)
    loss, metrics = compute_policy_loss(
        logprobs, old, _t([1.0, -1.0]), torch.ones(1, 2), LossConfig(name="cispo")
    )
    torch.testing.assert_close(loss, _t([5.0, -2.0]))
    assert metrics["clip_fraction"].item() == pytest.approx(0.5)
    loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([-5.0, 1.0]))
    assert old.grad is None


def test_cispo_lower_bound_is_optional():
    # r = [10, 1]; weight = clip(r, 2, 5) = [5, 2]; A = 1, logp = [-1, -2] -> loss = [5, 4]
    cfg = LossConfig(name="cispo", cispo_clip_low=2.0)
    loss, _ = compute_policy_loss(
        _t([-1.0, -2.0]), _t([-1.0 - math.log(10.0), -2.0]), _t([1.0, 1.0]), torch.ones(1, 2), cfg
    )
    torch.testing.assert_close(loss, _t([5.0, 4.0]))


def test_truncated_importance_sampling_caps_the_weight():
    # w = min(exp(old - rollout), 2): rollout = [-ln 4, 0, ln 2] -> raw [4, 1, 0.5] -> [2, 1, 0.5]
    # IS loss with logp == old and A = 1 is -1 per token -> [-2, -1, -0.5]
    old = torch.zeros(1, 3, dtype=torch.float64)
    rollout = _t([-math.log(4.0), 0.0, math.log(2.0)])
    cfg = LossConfig(name="is", tis_cap=2.0)
    loss, metrics = compute_policy_loss(
        old.clone(), old, torch.ones(1, 3), torch.ones(1, 3), cfg, rollout_logprobs=rollout
    )
    torch.testing.assert_close(loss, _t([-2.0, -1.0, -0.5]))
    assert metrics["tis_weight_mean"].item() == pytest.approx(3.5 / 3)
    assert metrics["tis_truncated_fraction"].item() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="rollout_logprobs"):
        compute_policy_loss(old, old, torch.ones(1, 3), torch.ones(1, 3), cfg)


def test_kl_estimators():
    # logp - ref = -ln 2 = -0.693147
    # k1 = -0.693147;  k2 = 0.5 * 0.480453 = 0.240227;  k3 = exp(ln 2) - ln 2 - 1 = 0.306853
    logp, ref = _t([0.0]), _t([math.log(2.0)])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(-math.log(2.0))
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2.0) ** 2)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(1.0 - math.log(2.0))
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(logp, ref, "k4")


def test_kl_term_is_added_per_token_and_needs_ref():
    # A = 0 -> policy loss 0; loss = kl_coef * k3 = 0.1 * 0.306853
    cfg = LossConfig(name="is", kl_coef=0.1)
    logp = _t([0.0, 0.0])
    ref = _t([math.log(2.0), math.log(2.0)])
    loss, metrics = compute_policy_loss(
        logp, logp, torch.zeros(1, 2), torch.tensor([[1, 0]]), cfg, ref_logprobs=ref
    )
    torch.testing.assert_close(loss, _t([0.1 * (1.0 - math.log(2.0)), 0.0]))
    assert metrics["kl_ref"].item() == pytest.approx(1.0 - math.log(2.0))
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_policy_loss(logp, logp, torch.zeros(1, 2), torch.ones(1, 2), cfg)


def test_approx_kl_metric_is_k3_between_old_and_current():
    # log r = ln 2 -> r - 1 - log r = 2 - 1 - 0.693147 = 0.306853
    _, metrics = compute_policy_loss(
        _t([math.log(2.0)]), _t([0.0]), _t([1.0]), torch.ones(1, 1), LossConfig(name="is")
    )
    assert metrics["approx_kl"].item() == pytest.approx(1.0 - math.log(2.0))


# rows: sums 6, 4, 4 (the masked-out 100 is ignored) -> total 14; lengths 3, 1, 2; N_tok = 6; N_seq = 3
LOSS = _t([1.0, 2.0, 3.0], [4.0, 100.0, 0.0], [2.0, 2.0, 0.0])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
EXPECTED = {
    "token-mean": 14 / 6,
    "seq-mean-token-sum": 14 / 3,
    "seq-mean-token-mean": (6 / 3 + 4 / 1 + 4 / 2) / 3,  # = 8/3
    "seq-mean-token-sum-norm": 14 / (4 * 3),  # norm_tokens = 4
}


@pytest.mark.parametrize("agg", list(EXPECTED))
def test_aggregation_modes_and_micro_batch_additivity(agg):
    kw = {"num_tokens": 6, "num_sequences": 3, "norm_tokens": 4}
    full = aggregate_loss(LOSS, MASK, agg, **kw)
    assert full.item() == pytest.approx(EXPECTED[agg])
    micro = aggregate_loss(LOSS[:1], MASK[:1], agg, **kw) + aggregate_loss(LOSS[1:], MASK[1:], agg, **kw)
    assert micro.item() == pytest.approx(full.item())


def test_aggregation_errors():
    with pytest.raises(ValueError, match="norm_tokens"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", num_tokens=6, num_sequences=3)
    with pytest.raises(ValueError, match="positive"):
        aggregate_loss(LOSS, MASK, "token-mean", num_tokens=0, num_sequences=3)
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(LOSS, MASK, "tokenmean", num_tokens=6, num_sequences=3)


def test_loss_config_validation():
    with pytest.raises(ValidationError, match="agg_norm_tokens"):
        LossConfig(agg="seq-mean-token-sum-norm")
    assert LossConfig(agg="seq-mean-token-sum-norm", agg_norm_tokens=512).agg_norm_tokens == 512
    with pytest.raises(ValidationError):
        LossConfig(clip_ratio=0.2)  # unknown key
    with pytest.raises(ValidationError):
        LossConfig(name="dpo")
    with pytest.raises(ValidationError, match="cispo_clip_low"):
        LossConfig(cispo_clip_low=6.0, cispo_clip_high=5.0)


def test_a_knob_another_loss_reads_is_refused_not_ignored():
    with pytest.raises(ValidationError, match=r"gspo_clip_low is read by the 'gspo' loss only, not 'ppo'"):
        LossConfig(gspo_clip_low=0.1)
    with pytest.raises(ValidationError, match=r"clip_high is read by the 'ppo' loss only, not 'cispo'"):
        LossConfig(name="cispo", clip_high=0.5)
    with pytest.raises(
        ValidationError, match=r"agg_norm_tokens is read by agg='seq-mean-token-sum-norm' only"
    ):
        LossConfig(agg_norm_tokens=512)
    LossConfig(name="is", clip_low=0.2)  # at its default: nothing to ignore
    # a dumped config lists every knob (the others at their defaults) and loads back
    cfg = LossConfig(name="gspo", gspo_clip_high=1e-3, agg="seq-mean-token-sum-norm", agg_norm_tokens=64)
    assert LossConfig.model_validate(cfg.model_dump()) == cfg


def test_entropy_from_log_probs():
    # uniform over 4 -> ln 4; one dominant logit -> ~0 and no overflow at 1000
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1000.0, 0.0, 0.0, 0.0]])
    ent = entropy_from_log_probs(torch.log_softmax(logits, -1))
    assert ent.shape == (2,)
    assert ent[0].item() == pytest.approx(math.log(4.0))
    assert ent[1].item() == pytest.approx(0.0, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(6, 7, generator=g)
    ref = torch.logsumexp(rand, -1) - (torch.softmax(rand, -1) * rand).sum(-1)  # H = lse(z) - E_p[z]
    torch.testing.assert_close(entropy_from_log_probs(torch.log_softmax(rand, -1)), ref)


def test_token_logprobs_from_logits_matches_log_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=g)
    ids = torch.randint(0, 7, (2, 3), generator=g)
    for tau in (1.0, 0.7):
        ref = torch.log_softmax(logits / tau, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(token_logprobs_from_logits(logits, ids, temperature=tau), ref)
    out_bf16 = token_logprobs_from_logits(logits.bfloat16(), ids)
    assert out_bf16.dtype == torch.float32
    torch.testing.assert_close(
        out_bf16,
        torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1),
        atol=3e-2,
        rtol=3e-2,
    )
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs_from_logits(logits, ids, temperature=0.0)


def test_the_config_refuses_a_foreign_loss_knob_in_one_line():
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, None, ["algorithm.loss.name=cispo", "algorithm.loss.gspo_clip_low=0.1"])
    message = str(info.value)
    assert "\n" not in message
    assert (
        "algorithm.loss" in message
        and "gspo_clip_low is read by the 'gspo' loss only, not 'cispo'" in message
    )
