"""The local backend's RMSNorm with a written-out backward (rllm.trainer.backends._rms_norm) gives
transformers' own outputs and gradients, and is installed only where it reproduces the module (the local backend's use of it:
tests/trainer/test_lora_fused.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from rllm.trainer.backends._rms_norm import fuse_rms_norms, rms_norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("train_weight", [False, True])
def test_outputs_and_gradients_equal_transformers(dtype: torch.dtype, train_weight: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    norm = LlamaRMSNorm(48, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(48, generator=gen))
    norm.weight.requires_grad_(train_weight)
    x = (torch.randn(3, 5, 48, generator=gen) * 3).to(dtype)
    g = torch.randn(3, 5, 48, generator=gen).to(dtype)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    theirs = norm(x1)
    theirs.backward(g)
    grad_w_theirs = norm.weight.grad.clone() if train_weight else None
    norm.weight.grad = None
    ours = rms_norm(x2, norm.weight, norm.variance_epsilon)
    ours.backward(g)
    assert ours.dtype == theirs.dtype
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(x2.grad, x1.grad, rtol=tol, atol=tol)
    if train_weight:
        torch.testing.assert_close(norm.weight.grad, grad_w_theirs, rtol=1e-4, atol=1e-4)
    else:
        assert norm.weight.grad is None


class GemmaLikeRMSNorm(torch.nn.Module):
    """A norm of the same name pattern but another formula (Gemma scales by 1 + w)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(dim))
        self.variance_epsilon = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (1 + self.weight) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def test_installed_only_where_it_reproduces_the_module(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    layers = model.config.num_hidden_layers
    other = GemmaLikeRMSNorm(8)
    model.add_module("other_norm", other)
    assert fuse_rms_norms(model) == 2 * layers + 1  # two per layer and the final one; not the Gemma-like
    assert "forward" not in other.__dict__
    assert fuse_rms_norms(model) == 0  # already installed
