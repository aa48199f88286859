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
    probs_BV = torch.softmax(filtered, dim=-1)
    # Inverse-CDF sampling, vectorised over rows: each row draws one uniform number from its own
    # generator (so a seeded row is reproducible whatever shares its batch). float64 keeps the CDF
    # exact enough over a 50k+ vocabulary; right=True never lands on a zero-probability token.
    uniform_B = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators])
    cdf_BV = torch.cumsum(probs_BV.double(), dim=-1)
    target_B1 = (uniform_B.to(cdf_BV.device).double() * cdf_BV[:, -1]).unsqueeze(1)
    sampled_B = (
        torch.searchsorted(cdf_BV, target_B1, right=True).squeeze(1).clamp(max=logits_BV.shape[-1] - 1)
    )
    tokens = sampled_B if greedy_pick is None else torch.where(greedy_B, greedy_pick, sampled_B)
    chosen = logprobs_BV.gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, chosen
