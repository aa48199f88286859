"""LoRA's two hot paths on fused GEMMs: the training forward and the merge a weight sync makes.

peft computes an adapted layer as ``base(x) + B(A(dropout(x))) * scaling``: three passes over the
``[tokens x out_features]`` output (the product's scaling, the sum, and the scaling again in the backward)
on top of the three products. :func:`fuse_lora_linears` makes each plain ``LoraLinear`` add its update inside
the second product's GEMM instead (``addmm_`` with ``alpha = scaling`` into the base output), so those
elementwise passes are gone; the products are the same. On SmolLM2-135M in float32 on 2 CPU cores that
made a GRPO step's forward and backward 3-4.5 % faster (``docs/results.md``). Everything else falls back to
peft's own forward: a merged or disabled adapter, a LoRA variant (DoRA), ``fan_in_fan_out`` (GPT-2's Conv1D),
a biased ``lora_B``, peft's mixed-batch ``adapter_names`` or any other extra argument.

:func:`merge_lora` is the merge: ``weight + Σ scaling · B @ A`` as one ``addmm`` per adapter in float32, where
peft's ``get_delta_weight`` writes the product, then its scaled copy, and leaves the sum to the caller (four
passes over every adapted weight per sync, against one; a 2 x 4 x 32 step's sync 0.51 -> 0.28 s).

Both compute the same sums as peft up to float rounding (the GEMM adds the scaled product into its output in one
rounding where peft rounds the product, the scaled product and the sum): ``tests/trainer/test_lora_fused.py``
checks outputs and gradients against peft.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

# (lora_A weight [r, in], lora_B weight [out, r], scaling) for one adapter of one layer
Factors = tuple[torch.Tensor, torch.Tensor, float]


def merge_lora(
    weight: torch.Tensor,
    factors: Iterable[Factors],
    *,
    fan_in_fan_out: bool = False,
    inplace: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``weight + Σ scaling · B @ A`` over ``factors`` (transposed for a ``fan_in_fan_out`` layer, whose
    weight is stored ``[in, out]``). Computed in float32 and returned in ``weight``'s dtype; ``inplace`` adds
    into ``weight`` itself, ``out`` writes into another tensor of its shape (both float32 only)."""
    for name, dest in (("inplace=True", weight if inplace else None), ("out", out)):
        if dest is not None and dest.dtype != torch.float32:
            raise ValueError(f"merge_lora({name}) needs a float32 tensor, not {dest.dtype}")
    merged = weight if inplace else None
    for A, B, scaling in factors:
        m1, m2 = (A.t(), B.t()) if fan_in_fan_out else (B, A)
        m1, m2 = m1.to(torch.float32), m2.to(torch.float32)
        if merged is None:
            merged = torch.addmm(weight.to(torch.float32), m1, m2, alpha=scaling, out=out)
        else:
            merged.addmm_(m1, m2, alpha=scaling)
    if merged is None:  # no adapter: the weight as it is
        return weight if out is None else out.copy_(weight)
    return merged if inplace or out is not None else merged.to(weight.dtype)


class MergeWriter:
    """One adapted weight for :meth:`InferenceEngine.load_weights`, merged straight into the engine's tensor
    (a :class:`rllm.inference.base.WeightWriter`): one pass over the weight, not a merged copy and then a
    copy of it. A target of another dtype or device gets the merged weight converted."""

    def __init__(self, weight: torch.Tensor, factors: list[Factors], *, fan_in_fan_out: bool) -> None:
        self.weight, self.factors, self.fan_in_fan_out = weight, factors, fan_in_fan_out

    def write_into(self, target: torch.Tensor) -> None:
        if target.dtype == torch.float32 and target.device == self.weight.device:
            merge_lora(self.weight, self.factors, fan_in_fan_out=self.fan_in_fan_out, out=target)
        else:
            target.copy_(self.merged().to(dtype=target.dtype, device=target.device))

    def merged(self) -> torch.Tensor:
        return merge_lora(self.weight, self.factors, fan_in_fan_out=self.fan_in_fan_out)


def layer_factors(module: Any) -> list[Factors]:
    """The factors of a peft LoRA layer's active adapters."""
    return [
        (module.lora_A[a].weight.detach(), module.lora_B[a].weight.detach(), module.scaling[a])
        for a in module.active_adapters
        if a in module.lora_A
    ]


def _plain(module: Any) -> bool:
    """Whether ``module``'s forward is the vanilla ``base(x) + B(A(dropout(x))) * scaling`` this module fuses."""
    return (
        isinstance(module.base_layer, torch.nn.Linear)
        and not module.fan_in_fan_out
        and not module.merged
        and not module.disable_adapters
        and not getattr(module, "lora_variant", None)
        and all(module.lora_B[a].bias is None for a in module.lora_B)
    )


def _fused_forward(
    module: Any, peft_forward: Any, x: torch.Tensor, *args: Any, **kwargs: Any
) -> torch.Tensor:
    if args or kwargs or not _plain(module):
        return peft_forward(x, *args, **kwargs)
    base = module.base_layer
    lead = x.shape[:-1]
    out = F.linear(x.reshape(-1, x.shape[-1]), base.weight, base.bias)  # 2-D: addmm_ adds into it in place
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        A, B = module.lora_A[name].weight, module.lora_B[name].weight
        x_a = module.lora_dropout[name](module._cast_input_dtype(x, A.dtype))
        h = F.linear(x_a.reshape(-1, x_a.shape[-1]), A)  # [tokens, r]
        # The base output is not saved for the backward (the product saves its inputs), so adding into it in
        # place is safe for autograd; under autocast the product ran in the autocast dtype, so B follows it.
        out.addmm_(h.to(out.dtype), B.t().to(out.dtype), alpha=module.scaling[name])
    return out.view(*lead, out.shape[-1])


def fuse_lora_linears(model: torch.nn.Module) -> int:
    """Give every peft ``LoraLinear`` in ``model`` the fused forward (an instance attribute, so peft's
    class is untouched and :func:`_plain`'s cases still take its own); returns how many layers got it."""
    from peft.tuners.lora import Linear as LoraLinear

    count = 0
    for module in model.modules():
        if isinstance(module, LoraLinear) and "forward" not in module.__dict__:
            module.forward = functools.partial(_fused_forward, module, module.forward)
            count += 1
    return count
