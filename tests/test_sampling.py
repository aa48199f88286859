"""Token selection on hand-made logits: filters, greedy rows, reported logprobs, seeded generators."""

from __future__ import annotations

import math

import pytest
import torch

from rllm.inference.sampling import filter_top_k_top_p, inverse_cdf, sample_tokens

NEG_INF = float("-inf")


def _gens(n: int, seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


def _probs_logits(*probs: float) -> torch.Tensor:
    return torch.tensor([probs]).log()


def test_top_k_1_keeps_only_the_argmax() -> None:
    logits = torch.tensor([[0.1, 3.0, -1.0, 2.9], [5.0, 0.0, 0.0, 4.0]])
    out = filter_top_k_top_p(logits, torch.tensor([1, 1]), torch.tensor([1.0, 1.0]))
    assert out[0].tolist() == [NEG_INF, 3.0, NEG_INF, NEG_INF]
    assert out[1].tolist() == [5.0, NEG_INF, NEG_INF, NEG_INF]


def test_top_k_keeps_k_largest_and_zero_disables() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0], [0.0, 3.0, 1.0, 2.0]])
    out = filter_top_k_top_p(logits, torch.tensor([2, 0]), torch.tensor([1.0, 1.0]))
    assert out[0].tolist() == [NEG_INF, 3.0, NEG_INF, 2.0]
    assert torch.equal(out[1], logits[1])


def test_top_p_keeps_the_nucleus() -> None:
    # sorted probs 0.5, 0.3, 0.15, 0.05: p=0.7 needs 0.5 + 0.3 (the token that crosses is kept)
    logits = _probs_logits(0.15, 0.5, 0.05, 0.3)
    out = filter_top_k_top_p(logits, torch.tensor([0]), torch.tensor([0.7]))
    assert torch.isfinite(out[0]).tolist() == [False, True, False, True]
    # p just above 0.8 also needs the third token; p <= 0.5 keeps only the top one
    out = filter_top_k_top_p(logits, torch.tensor([0]), torch.tensor([0.81]))
    assert torch.isfinite(out[0]).tolist() == [True, True, False, True]
    out = filter_top_k_top_p(logits, torch.tensor([0]), torch.tensor([0.3]))
    assert torch.isfinite(out[0]).tolist() == [False, True, False, False]
    assert torch.equal(out[0, 1], logits[0, 1])  # kept logits are unchanged


def test_top_p_one_keeps_every_token_even_with_a_long_tail() -> None:
    # A very peaked row: float cumsum reaches 1.0 before the tail; top_p=1 must still keep the tail.
    logits = torch.cat([torch.tensor([[40.0]]), torch.zeros(1, 999)], dim=1)
    other = torch.zeros(1, 1000)
    out = filter_top_k_top_p(torch.cat([logits, other]), torch.tensor([0, 5]), torch.tensor([1.0, 1.0]))
    assert torch.isfinite(out[0]).all()
    assert int(torch.isfinite(out[1]).sum()) == 5


def test_top_k_and_top_p_combine_on_the_renormalised_top_k() -> None:
    # top-2 of (0.4, 0.3, 0.2, 0.1) renormalised is (4/7, 3/7); p=0.5 then keeps only the first.
    logits = _probs_logits(0.4, 0.3, 0.2, 0.1)
    out = filter_top_k_top_p(logits, torch.tensor([2]), torch.tensor([0.5]))
    assert torch.isfinite(out[0]).tolist() == [True, False, False, False]


def test_greedy_rows_report_log_softmax_of_argmax() -> None:
    logits = torch.tensor([[1.0, 4.0, 2.0], [0.0, -1.0, 3.0]])
    tokens, logprobs = sample_tokens(
        logits, torch.tensor([0.0, 0.0]), torch.tensor([0, 0]), torch.tensor([1.0, 1.0]), _gens(2)
    )
    assert tokens.tolist() == [1, 2]
    expected = torch.log_softmax(logits, dim=-1)[[0, 1], [1, 2]]
    assert torch.allclose(logprobs, expected)


def test_logprob_is_of_the_unfiltered_temperature_scaled_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    temperature = 0.7
    tokens, logprobs = sample_tokens(
        logits, torch.tensor([temperature]), torch.tensor([1]), torch.tensor([1.0]), _gens(1)
    )
    assert tokens.tolist() == [0]  # top-k 1 leaves only the argmax
    expected = torch.log_softmax(logits / temperature, dim=-1)[0, 0]
    assert math.isclose(float(logprobs[0]), float(expected), rel_tol=1e-6)
    assert float(logprobs[0]) < 0  # not log(1) of the filtered distribution


def test_filtered_tokens_are_never_sampled() -> None:
    logits = torch.zeros(1, 50)
    logits[0, 7] = logits[0, 9] = 1.0
    for seed in range(50):
        tokens, _ = sample_tokens(
            logits, torch.tensor([2.0]), torch.tensor([2]), torch.tensor([1.0]), _gens(1, seed)
        )
        assert int(tokens[0]) in (7, 9)


def test_mixed_rows_use_their_own_settings() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0], [0.0, 2.0, 1.0]])
    for seed in range(20):
        tokens, logprobs = sample_tokens(
            logits, torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), torch.tensor([1.0, 1.0]), _gens(2, seed)
        )
        assert tokens.tolist() == [1, 1]
        assert torch.allclose(logprobs, torch.log_softmax(logits, dim=-1)[:, 1])


def test_seeded_generators_are_reproducible() -> None:
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
    args = (torch.full((4,), 1.0), torch.zeros(4, dtype=torch.long), torch.full((4,), 0.95))
    a = sample_tokens(logits, *args, _gens(4, seed=1))
    b = sample_tokens(logits, *args, _gens(4, seed=1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    draws = {tuple(sample_tokens(logits, *args, _gens(4, seed=s))[0].tolist()) for s in range(5)}
    assert len(draws) > 1


def test_sampling_follows_the_distribution() -> None:
    logits = _probs_logits(0.7, 0.2, 0.1)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(3)
    for _ in range(2000):
        tokens, _ = sample_tokens(logits, torch.tensor([1.0]), torch.tensor([0]), torch.tensor([1.0]), [gen])
        counts[tokens[0]] += 1
    assert torch.allclose(counts / counts.sum(), torch.tensor([0.7, 0.2, 0.1]), atol=0.04)


def test_shortcuts_give_what_the_full_path_gives() -> None:
    """An all-greedy batch (no draw), a batch without greedy rows (no argmax) and an all-T=1 batch (no
    division) pick the same tokens with the same logprobs as the same rows in a batch that takes every path."""
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    no_filter = torch.zeros(3, dtype=torch.long), torch.ones(3)

    def run(rows: list[int], temps: list[float]) -> tuple[list[int], list[float]]:
        gens = [torch.Generator().manual_seed(10 + r) for r in rows]
        tok, lp = sample_tokens(
            logits[rows], torch.tensor(temps), no_filter[0][rows], no_filter[1][rows], gens
        )
        return tok.tolist(), lp.tolist()

    mixed_tok, mixed_lp = run([0, 1, 2], [0.0, 1.0, 0.5])  # greedy, T = 1, T = 0.5: nothing skipped
    for rows, temps, picks in (([0], [0.0], [0]), ([1], [1.0], [1]), ([1, 2], [1.0, 0.5], [1, 2])):
        tok, lp = run(rows, temps)
        assert tok == [mixed_tok[i] for i in picks]
        assert lp == pytest.approx([mixed_lp[i] for i in picks], abs=1e-6)


def test_inverse_cdf_in_two_searches_matches_one_cumulative_sum() -> None:
    """The block-then-token search picks what one float64 cumulative sum over the vocabulary picks, on a
    vocabulary that is not a multiple of the block, with zero-probability tokens and whole zero blocks."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(6, 1000, generator=gen) ** 8  # a peaked, uneven distribution
    probs[probs < 0.05] = 0.0
    probs[:, 256:512] = 0.0  # a whole block with no mass
    probs[3] = 0.0
    probs[3, 700] = 1.0  # one token left
    for _ in range(200):
        uniform = torch.rand(6, generator=gen)
        cdf = probs.double().cumsum(-1)
        expected = torch.searchsorted(cdf, (uniform.double() * cdf[:, -1]).unsqueeze(1), right=True)
        assert torch.equal(inverse_cdf(probs, uniform), expected.squeeze(1))


def test_inverse_cdf_never_returns_a_zero_probability_token() -> None:
    """At the ends of the uniform's range (0, and just under 1, where u * total can round up to the total),
    the token found has positive probability; here the last block's tokens are all zero."""
    probs = torch.zeros(2, 600)
    probs[0, 5] = probs[0, 300] = 0.5
    probs[1, 511] = 1e-30  # a tiny last non-zero token before an all-zero final block
    probs[1, 0] = 1.0
    for u in (0.0, 1e-12, 0.5, 1.0 - 1e-7, 1.0):
        tokens = inverse_cdf(probs, torch.tensor([u, u]))
        assert all(float(probs[r, t]) > 0 for r, t in enumerate(tokens.tolist())), (u, tokens)
