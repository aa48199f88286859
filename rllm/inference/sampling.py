"""Token selection for a batch of rows that may each have their own sampling settings.

Pure tensor code, kept apart from the engine loop so it can be tested on hand-made logits.
"""

from __future__ import annotations

import torch


def filter_top_k_top_p(logits_BV: torch.Tensor, top_k_B: torch.Tensor, top_p_B: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) the tokens outside each row's top-k set and outside its top-p nucleus.

    ``top_k_B == 0`` and ``top_p_B >= 1`` disable the filter for that row. The nucleus keeps the smallest
    prefix of tokens, sorted by probability, whose cumulative probability reaches ``top_p`` (the token
    that crosses the threshold is kept, so at least one token always survives).
    """
    sorted_logits, sorted_idx = torch.sort(logits_BV, dim=-1, descending=True)
    vocab = logits_BV.shape[-1]
    ranks = torch.arange(vocab, device=logits_BV.device).unsqueeze(0)
    k = torch.where(top_k_B > 0, top_k_B, torch.full_like(top_k_B, vocab)).unsqueeze(1)
    remove = ranks >= k
    probs = torch.softmax(sorted_logits.masked_fill(remove, float("-inf")), dim=-1)
    # Mass strictly before each token; a token is dropped once the mass before it already reaches p.
    # Rows with top_p >= 1 skip this: float rounding can bring a cumsum to 1.0 before a long tail ends.
    mass_before = torch.cumsum(probs, dim=-1) - probs
    remove |= (mass_before >= top_p_B.unsqueeze(1)) & (top_p_B < 1.0).unsqueeze(1)
    remove[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.empty_like(logits_BV).scatter_(-1, sorted_idx, sorted_logits)


def sample_tokens(
    logits_BV: torch.Tensor,
    temperature_B: torch.Tensor,
    top_k_B: torch.Tensor,
    top_p_B: torch.Tensor,
    generators: list[torch.Generator],
    allowed_BV: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return ``(token_ids_B, logprobs_B)``.

    ``allowed_BV`` (bool, optional) restricts each row to its ``True`` tokens (constrained decoding; a row
    of all ``True`` is free): the pick, greedy or sampled, is among them, and the logprob reported is
    still the one under the unrestricted distribution, as for top-k / top-p.

    Rows with ``temperature == 0`` are greedy and report ``log_softmax(logits)`` of the argmax.
    Other rows sample from ``softmax(filter(logits / T))`` and report the logprob of the sampled token
    under ``log_softmax(logits / T)`` *before* filtering: that is the distribution a trainer recomputes
    from the same logits, so rollout and trainer logprobs are comparable.
    """
    logits_BV = logits_BV.float()
    greedy_B = temperature_B <= 0
    # Shortcuts that skip work whose result is not used (the same tokens and logprobs either way): a batch
    # of greedy rows draws nothing, one without greedy rows takes no argmax, and T = 1 divides by nothing.
    all_greedy, any_greedy = bool(greedy_B.all()), bool(greedy_B.any())
    if bool(((temperature_B == 1.0) | greedy_B).all()):
        scaled = logits_BV
    else:
        safe_t = torch.where(greedy_B, torch.ones_like(temperature_B), temperature_B).unsqueeze(1)
        scaled = logits_BV / safe_t
    logprobs_BV = torch.log_softmax(scaled, dim=-1)
    greedy_pick = None
    if any_greedy:
        greedy_pick = (
            logits_BV.argmax(dim=-1)
            if allowed_BV is None
            else logits_BV.masked_fill(~allowed_BV, float("-inf")).argmax(dim=-1)
        )
        if all_greedy:
            return greedy_pick, logprobs_BV.gather(1, greedy_pick.unsqueeze(1)).squeeze(1)
    # The mask goes first (as in vLLM), so top-k / top-p pick among the allowed tokens and never leave none.
    filtered = scaled if allowed_BV is None else scaled.masked_fill(~allowed_BV, float("-inf"))
    if bool(((top_k_B > 0) | (top_p_B < 1.0)).any()):
        filtered = filter_top_k_top_p(filtered, top_k_B, top_p_B)
    # Unfiltered rows sample from the distribution whose logprobs are reported: exp of those, no second softmax.
    probs_BV = logprobs_BV.exp() if filtered is scaled else torch.softmax(filtered, dim=-1)
    # Each row draws one uniform number from its own generator, so a seeded row is reproducible whatever
    # shares its batch.
    uniform_B = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators])
    sampled_B = inverse_cdf(probs_BV, uniform_B.to(probs_BV.device))
    tokens = sampled_B if greedy_pick is None else torch.where(greedy_B, greedy_pick, sampled_B)
    chosen = logprobs_BV.gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, chosen


CDF_BLOCK = 256  # tokens per block of inverse_cdf's first search


def inverse_cdf(probs_BV: torch.Tensor, uniform_B: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling, vectorised over rows: row b's token is the first whose cumulative probability
    exceeds ``uniform_B[b]`` times the row's total (probabilities need not sum to 1).

    In two searches rather than one cumulative sum over the vocabulary (the largest single cost of sampling
    a 50k-token vocabulary at batch 32): block masses (sums of ``CDF_BLOCK`` tokens, accumulated in float64
    across blocks) pick the block, then a float64 cumulative sum over that block alone picks the token. A
    block's mass carries float32's rounding (a relative 1e-7, as the probabilities themselves do); the
    target is kept inside the chosen block's mass, so a zero-probability token (a filtered one, or the
    padding) is never returned."""
    rows, vocab = probs_BV.shape
    pad = -vocab % CDF_BLOCK
    padded = torch.nn.functional.pad(probs_BV, (0, pad)) if pad else probs_BV
    blocks_BNK = padded.view(rows, -1, CDF_BLOCK)
    mass_BN = blocks_BNK.sum(-1).double()  # summed in float32: a float64 sum would copy the whole row first
    cdf_BN = mass_BN.cumsum(-1)
    zeros_B1 = torch.zeros_like(cdf_BN[:, :1])
    total_B1 = cdf_BN[:, -1:]
    # Under the total, so the block found has positive mass even where u * total rounds up to it.
    target_B1 = torch.minimum(uniform_B.double().unsqueeze(1) * total_B1, torch.nextafter(total_B1, zeros_B1))
    block_B1 = torch.searchsorted(cdf_BN, target_B1, right=True).clamp(max=cdf_BN.shape[1] - 1)
    before_B1 = (cdf_BN.gather(1, block_B1) - mass_BN.gather(1, block_B1)).clamp(min=0.0)
    row_ids = torch.arange(rows, device=probs_BV.device)
    inner_BK = blocks_BNK[row_ids, block_B1.squeeze(1)].double().cumsum(-1)
    # Just under the block's own total, so the search ends on a token of positive probability.
    top_B1 = torch.nextafter(inner_BK[:, -1:], zeros_B1)
    within_B1 = torch.minimum((target_B1 - before_B1).clamp(min=0.0), top_B1)
    token_B = torch.searchsorted(inner_BK, within_B1, right=True).squeeze(1)
    return block_B1.squeeze(1) * CDF_BLOCK + token_B
