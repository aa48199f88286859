"""Logprobs computed a chunk of tokens at a time (backend.logprob_chunk_tokens) equal the unchunked ones:
the logprobs, the entropy, the loss and every gradient, in float32 on the tiny model; and the chunked
backward never holds the whole [tokens x vocab] logits."""

from __future__ import annotations

import pytest
import torch

from rllm.algorithms.logprobs import chunked_token_logprobs
from rllm.algorithms.losses import LossConfig
from tests.test_backend_local import _backend, _batch, _flat, _grads


@pytest.mark.parametrize("lora", [False, True])
def test_chunked_loss_and_gradients_equal_unchunked(tiny_model_dir, lora: bool) -> None:
    batch = _batch(seed=2, n=8)
    results = {}
    for chunk in (0, 3):  # 3 trained tokens per chunk: every micro-batch is cut into several chunks
        backend = _backend(
            tiny_model_dir,
            f"lora.enabled={str(lora).lower()}",
            f"backend.logprob_chunk_tokens={chunk}",
            "rollout.temperature=0.7",  # the temperature is applied inside each chunk
        )
        logprobs = _flat(backend.compute_logprobs(batch))
        metrics = backend.forward_backward(batch, LossConfig())
        results[chunk] = (logprobs, metrics, _grads(backend))
    (lp0, m0, g0), (lp3, m3, g3) = results[0], results[3]
    assert torch.allclose(lp0, lp3, atol=1e-5)
    for key in ("train/loss", "train/entropy", "train/ratio_mean"):
        assert m3[key] == pytest.approx(m0[key], rel=1e-5, abs=1e-7), key
    assert g0.keys() == g3.keys() and g0
    for name in g0:
        assert torch.allclose(g0[name], g3[name], rtol=1e-5, atol=1e-5 * float(g0[name].abs().max())), name


def test_chunked_backward_keeps_one_chunk_of_logits() -> None:
    """What autograd saves for the backward: the whole [N x V] float32 logits unchunked, only the hidden
    states (and the head's weight) chunked; the gradients agree."""
    torch.manual_seed(0)
    N, H, V = 64, 8, 4096
    head = torch.nn.Linear(H, V, bias=False)
    hidden = torch.randn(N, H, requires_grad=True)
    targets = torch.randint(0, V, (N,))

    def largest_saved(chunk: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        sizes: list[int] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, ent = chunked_token_logprobs(head, hidden, targets, chunk_tokens=chunk, with_entropy=True)
        head.zero_grad()
        hidden.grad = None
        lp.sum().backward()
        assert ent is not None and ent.shape == (N,)
        return max(sizes), hidden.grad.clone(), head.weight.grad.clone()

    full, gh_full, gw_full = largest_saved(0)
    chunked, gh_chunk, gw_chunk = largest_saved(16)
    assert full >= N * V
    assert chunked <= max(16 * V, V * H)  # the head's weight, or one chunk while it is recomputed
    assert torch.allclose(gh_full, gh_chunk, atol=1e-6) and torch.allclose(gw_full, gw_chunk, atol=1e-6)


def test_auto_attention_runs_long_rows_with_sdpa_and_the_same_logprobs(tiny_model_dir) -> None:
    """backend.attn_implementation=auto on CPU: eager for short rows, SDPA for rows over LONG_ROW_TOKENS (eager
    would keep a [heads x T x T] matrix per layer); both give the same logprobs."""
    from rllm.trainer.backends.local import LONG_ROW_TOKENS
    from rllm.types import TrainBatch, TrainSequence

    gen = torch.Generator().manual_seed(5)
    rows = []
    for n in (LONG_ROW_TOKENS + 40, LONG_ROW_TOKENS + 10):
        ids = torch.randint(3, 49152, (n,), generator=gen).tolist()
        mask = [0] * 20 + [1] * (n - 20)
        rows.append(
            TrainSequence(input_ids=ids, loss_mask=mask, rollout_logprobs=[0.0] * n, advantages=[0.0] * n)
        )
    long_batch = TrainBatch(sequences=rows)
    auto = _backend(tiny_model_dir, "lora.enabled=false")
    base = auto.model
    assert base.config._attn_implementation == "eager"
    auto.compute_logprobs(_batch(seed=3))
    assert base.config._attn_implementation == "eager"  # short rows
    lp_auto = _flat(auto.compute_logprobs(long_batch))
    assert base.config._attn_implementation == "sdpa"
    eager = _backend(tiny_model_dir, "lora.enabled=false", "backend.attn_implementation=eager")
    lp_eager = _flat(eager.compute_logprobs(long_batch))
    assert eager.model.config._attn_implementation == "eager"
    assert torch.allclose(lp_auto, lp_eager, atol=1e-5)
