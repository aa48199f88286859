"""The local engine's CPU kernel choices compute what transformers' own path does: decode attention over
grouped key/value heads without copying the cache and bf16 linears through fp32 GEMMs on CPUs without
native bf16 (rllm.inference.cpu_kernels), and a KV cache written in place into spare room
(rllm.inference.decode_batch.RoomyLayer). Tiny model; the speed they buy is in docs/results.md."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rllm.inference.base import Completion, SamplingParams
from rllm.inference.cpu_kernels import (
    FP32_GEMM_MIN_ROWS,
    GQA_DECODE_ATTENTION,
    Fp32Gemm,
    cpu_lacks_native_half,
    gqa_decode_sdpa,
)
from rllm.inference.decode_batch import ROOM, RoomyLayer
from rllm.inference.local import LocalEngine

PROMPTS = ["The capital of France is", "1 2 3 4 5", "Once upon a time, in a land far away,"]


class _Attn(nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gqa_decode_attention_equals_repeated_heads(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, width, dim = 5, 6, 2, 11, 16
    q = torch.randn(batch, heads, 1, dim, generator=gen).to(dtype)
    k = torch.randn(batch, kv_heads, width, dim, generator=gen).to(dtype)
    v = torch.randn(batch, kv_heads, width, dim, generator=gen).to(dtype)
    mask = torch.ones(batch, 1, 1, width, dtype=torch.bool)
    for row in range(batch):
        mask[row, ..., :row] = False  # left padding, a different amount per row
    module = _Attn(heads // kv_heads)
    ours, _ = gqa_decode_sdpa(module, q, k, v, mask, scaling=dim**-0.5)
    stock, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=dim**-0.5)
    assert ours.shape == stock.shape == (batch, 1, heads, dim)
    atol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(ours.float(), stock.float(), atol=atol, rtol=0)
    # A prefill (several query tokens) goes to transformers' own path unchanged.
    q3 = torch.randn(batch, heads, 3, dim, generator=gen).to(dtype)
    mask3 = mask.expand(batch, 1, 3, width)
    ours3, _ = gqa_decode_sdpa(module, q3, k, v, mask3)
    torch.testing.assert_close(ours3, sdpa_attention_forward(module, q3, k, v, mask3)[0], atol=0, rtol=0)


def _teacher_forced(model: nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1)


def test_engine_decodes_with_gqa_attention_and_matches_the_stock_model(tiny_model_dir: Path) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    assert engine.model.config._attn_implementation == GQA_DECODE_ATTENTION
    stock = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    assert stock.config._attn_implementation == "sdpa" and stock.config.num_key_value_heads < 4
    params = SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True, seed=3)
    for prompt in PROMPTS:
        (c,) = engine.generate_sync(engine.tokenizer.encode(prompt), params)
        lp = _teacher_forced(stock, c.prompt_ids, c.completion_ids)
        torch.testing.assert_close(torch.tensor(c.logprobs), lp, atol=1e-4, rtol=0)


def test_fp32_gemm_is_a_bf16_gemm_with_fp32_accumulation() -> None:
    gen = torch.Generator().manual_seed(0)
    linear = nn.Linear(96, 40, bias=True).to(torch.bfloat16)
    x = torch.randn(7, 96, generator=gen).to(torch.bfloat16)
    exact = (x.double() @ linear.weight.double().T + linear.bias.double()).to(torch.bfloat16)
    native = linear(x)
    Fp32Gemm(linear)
    ours = linear(x)
    assert ours.dtype == torch.bfloat16
    # Both round an fp32-accumulated sum to bf16: at most one bf16 step apart from the exact result.
    step = exact.float().abs().clamp(min=1e-3) * 2**-7
    assert bool(((ours.float() - exact.float()).abs() <= step).all())
    assert bool(((native.float() - exact.float()).abs() <= step).all())


def test_fp32_gemm_leaves_a_few_rows_to_the_bf16_weights() -> None:
    # Below FP32_GEMM_MIN_ROWS rows a GEMM is bound by reading its weights: the half-size bf16 ones are used.
    gen = torch.Generator().manual_seed(0)
    linear = nn.Linear(96, 40, bias=True).to(torch.bfloat16)
    few = torch.randn(2, FP32_GEMM_MIN_ROWS - 1, 96, generator=gen).to(torch.bfloat16)
    native = linear(few[:1])
    Fp32Gemm(linear)
    assert torch.equal(linear(few[:1]), native)  # 3 rows: torch's own bf16 kernel, bit for bit
    with torch.no_grad():
        linear.weight.mul_(2)  # a weight sync: the bf16 rows read it at once, no refresh needed
    assert torch.equal(linear(few[:1]), nn.functional.linear(few[:1], linear.weight, linear.bias))


def test_bf16_engine_uses_fp32_gemms_exactly_where_the_cpu_lacks_bf16(tiny_model_dir: Path) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    assert (engine._fp32_gemm is not None) == cpu_lacks_native_half(torch.bfloat16)
    fp32_engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    assert fp32_engine._fp32_gemm is None


def test_fp32_gemm_engine_matches_native_bf16_and_follows_weight_syncs(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    engine = LocalEngine(model, LocalEngine.from_pretrained(str(tiny_model_dir)).tokenizer)
    if engine._fp32_gemm is None:  # a CPU with native bf16: install it anyway, the numerics are the point
        engine._fp32_gemm = Fp32Gemm(engine.model)
    native = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).eval()
    greedy = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)

    def check() -> list[list[int]]:
        outs = []
        for prompt in PROMPTS:
            (c,) = engine.generate_sync(engine.tokenizer.encode(prompt), greedy)
            # bf16 logits, rounded at every layer: native and fp32-GEMM agree to bf16 noise
            lp = _teacher_forced(native, c.prompt_ids, c.completion_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), lp, atol=5e-2, rtol=0)
            outs.append(c.completion_ids)
        return outs

    before = check()
    # A weight sync (every matrix scaled) must reach the fp32 copies: the engine then matches the new weights.
    new = {n: (p.float() * 1.5 if p.dim() == 2 else p.float()) for n, p in native.named_parameters()}
    engine.load_weights(new.items())
    with torch.no_grad():
        for n, p in native.named_parameters():
            p.copy_(new[n])
    assert check() != before


def test_roomy_layer_writes_in_place_until_its_room_runs_out() -> None:
    layer = RoomyLayer()
    k = torch.randn(2, 3, 5, 4)
    layer.update(k, k + 1)
    storage = layer.keys.untyped_storage().data_ptr()
    cols = [torch.randn(2, 3, 1, 4) for _ in range(ROOM + 1)]
    for i, col in enumerate(cols[:ROOM]):
        keys, values = layer.update(col, col + 1)
        assert keys.untyped_storage().data_ptr() == storage  # no copy: written into the room
    keys, values = layer.update(cols[ROOM], cols[ROOM] + 1)
    assert keys.untyped_storage().data_ptr() != storage  # out of room: one copy into a bigger buffer
    expected = torch.cat([k, *cols], dim=-2)
    assert torch.equal(keys, expected) and torch.equal(values, expected + 1)
    layer.keys, layer.values = layer.keys[:1], layer.values[:1]  # a select: the next update copies those rows
    keys, _ = layer.update(cols[0][:1], cols[0][:1])
    assert torch.equal(keys, torch.cat([expected[:1], cols[0][:1]], dim=-2))


def test_a_long_completion_past_the_cache_room_matches_the_stock_model(tiny_model_dir: Path) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    stock = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    params = SamplingParams(temperature=1.0, max_tokens=2 * ROOM + 10, ignore_eos=True, seed=5)
    results = asyncio.run(_generate_all(engine, [engine.tokenizer.encode(p) for p in PROMPTS], params))
    for c in results:
        assert len(c.completion_ids) == 2 * ROOM + 10
        lp = _teacher_forced(stock, c.prompt_ids, c.completion_ids)
        torch.testing.assert_close(torch.tensor(c.logprobs), lp, atol=1e-4, rtol=0)


async def _generate_all(
    engine: LocalEngine, prompts: list[list[int]], params: SamplingParams
) -> list[Completion]:
    """The prompts as one batch (rows of different lengths, left-padded)."""
    outs = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
    return [c for (c,) in outs]
