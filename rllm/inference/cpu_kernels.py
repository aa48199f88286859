"""Two kernel choices that make the local engine's CPU decode step cheaper without changing what it computes.

Both were found by profiling one batch-32 decode step of SmolLM2-135M (docs/results.md, "Where a batch-32
decode step's time goes"):

- **bf16 matmuls on a CPU without native bf16** (no AVX512-BF16 / AMX, e.g. an AVX2-only AMD EPYC): torch's
  bf16 GEMM falls back to a generic kernel 4-7x slower than its fp32 GEMM, and took 80 % of a bf16 decode
  step. :class:`Fp32Gemm` keeps an fp32 copy of every ``nn.Linear`` weight (exactly the bf16 values, widened)
  and computes ``y = bf16(x_fp32 @ W_fp32^T)``: the products of bf16 numbers are exact in fp32 and the
  sums accumulate in fp32, which is what a bf16 GEMM with fp32 accumulation computes too, so the output
  differs from torch's bf16 kernel by summation order only (as oneDNN's own bf16-on-AVX2 path would).
  Activations, the KV cache, norms and attention stay bf16. Cost: the fp32 copies (twice the bf16 linear
  weights' bytes, the LM head included). On a CPU with native bf16 it is not installed. Below
  :data:`FP32_GEMM_MIN_ROWS` rows (a decode step of a few rows) a GEMM is bound by reading its weights from
  memory, not by arithmetic, and reading the fp32 copy takes twice as long as reading the bf16 weights: there
  torch's own bf16 kernel is faster (batch 1: 80 against 117 ms per SmolLM2-135M decode step on an AVX2
  EPYC, one thread), so the layer keeps it.
- **Grouped-query attention without copying the KV cache**: transformers' SDPA path repeats every layer's
  key and value heads to the query-head count (``repeat_kv``, a copy of the whole cache per layer per step)
  whenever an attention mask is passed, which the left-padded batch always does. For a decode step (one
  query token), the ``n_rep`` query heads that share a key/value head are folded into the query-length dim
  instead (``[B, kv_heads, n_rep, D]`` against ``[B, kv_heads, T, D]``): the same dot products, the mask
  broadcast over them, no copy. Prefill (several query tokens) keeps transformers' own path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

GQA_DECODE_ATTENTION = "rllm_gqa_decode_sdpa"
# Fewest rows (tokens) a bf16 linear computes through its fp32 copy. Whole SmolLM2-135M decode steps on an AVX2
# EPYC, one thread, against torch's bf16 kernels (benchmarks/profile_decode_step.py --batch B): with the fp32
# copies at every row count, B = 1 ran 0.69x and B = 2 0.81x (weight reads dominate); B = 4 ran 1.13x with
# them and 1.07x without; from B = 8 (1.75x) the arithmetic dominates and the fp32 GEMM wins clearly.
FP32_GEMM_MIN_ROWS = 4


def cpu_lacks_native_half(dtype: torch.dtype) -> bool:
    """Whether this CPU has no native GEMM for ``dtype`` (bf16: AVX512-BF16 / AMX, the test
    ``pick_dtype('auto')`` uses; fp16: AVX512-FP16 / AMX-FP16)."""
    if dtype == torch.bfloat16:
        return not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if dtype == torch.float16:
        return not torch.ops.mkldnn._is_mkldnn_fp16_supported()
    raise ValueError(f"cpu_lacks_native_half takes bfloat16 or float16, not {dtype}")


class Fp32Gemm:
    """The ``nn.Linear`` layers of a bf16 / fp16 model on CPU, computed by fp32 GEMMs over fp32 copies of their
    weights (see the module docstring). Created by the engine when it loads a half-precision model on a CPU
    without native bf16; :meth:`refresh` re-copies the weights after they change in place (a weight sync)."""

    def __init__(self, model: nn.Module) -> None:
        self.linears: list[tuple[nn.Linear, torch.Tensor, torch.Tensor | None]] = []
        for module in model.modules():
            if type(module) is nn.Linear and module.weight.dtype in (torch.bfloat16, torch.float16):
                self.linears.append(self._install(module))

    @staticmethod
    def _install(linear: nn.Linear) -> tuple[nn.Linear, torch.Tensor, torch.Tensor | None]:
        weight32 = linear.weight.detach().float()
        bias32 = linear.bias.detach().float() if linear.bias is not None else None

        def forward(x: torch.Tensor) -> torch.Tensor:
            if x.numel() < FP32_GEMM_MIN_ROWS * x.shape[-1]:
                return nn.functional.linear(x, linear.weight, linear.bias)
            return nn.functional.linear(x.float(), weight32, bias32).to(x.dtype)

        linear.forward = forward  # type: ignore[method-assign]  # this instance only
        return linear, weight32, bias32

    def refresh(self) -> None:
        """Copy every layer's current (half-precision) weights into its fp32 copy."""
        with torch.no_grad():
            for linear, weight32, bias32 in self.linears:
                weight32.copy_(linear.weight)
                if bias32 is not None:
                    bias32.copy_(linear.bias)


def gqa_decode_sdpa(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that a one-token query over grouped key/value heads folds the
    query heads of a group into the query-length dim instead of repeating the cache (module docstring).
    ``query`` is ``[B, heads, Q, D]``, ``key``/``value`` ``[B, kv_heads, T, D]``; returns ``[B, Q, heads, D]``."""
    batch, heads, q_len, head_dim = query.shape
    kv_heads = key.shape[1]
    if (
        q_len != 1
        or kv_heads == heads
        or dropout
        or kwargs.get("output_attentions")
        or getattr(module, "sinks", None) is not None
        or (attention_mask is not None and (attention_mask.dim() != 4 or attention_mask.shape[2] != 1))
    ):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    # Query head h reads key/value head h // n_rep (repeat_kv's order), so [B, heads, 1, D] viewed as
    # [B, kv_heads, n_rep, D] puts each group's query heads against its own key/value head; the mask
    # ([B, 1, 1, T]) is the same for every query head and broadcasts over the folded dim.
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    out = nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=attention_mask, scale=scaling
    )
    return out.reshape(batch, 1, heads, head_dim), None


def use_gqa_decode_attention(model: PreTrainedModel) -> bool:
    """Switch ``model`` from transformers' SDPA attention to :func:`gqa_decode_sdpa` (same masks); returns
    whether it did (only models on SDPA switch: an explicit eager or flash choice is kept)."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GQA_DECODE_ATTENTION, gqa_decode_sdpa)
    AttentionMaskInterface.register(GQA_DECODE_ATTENTION, sdpa_mask)
    model.set_attn_implementation(GQA_DECODE_ATTENTION)
    return True
