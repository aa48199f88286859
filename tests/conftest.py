"""Shared fixtures: one tiny random Llama for every test that needs a model, and a one-thread torch.

The tests run on a shared 2-core machine, so torch uses one thread: it is also what makes bf16/fp32
kernels pick the same reduction order in every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ci_support import require_vllm
from transformers import AutoModelForCausalLM

from rllm.models import make_tiny_llama

torch.set_num_threads(1)

# make_tiny_llama's default init (std 0.02, hidden 64) gives near-uniform next-token distributions whose
# argmax is almost always "repeat the last token", so a bug in padding or position ids would go unseen.
# Scaling the projection matrices makes the output depend on the whole context.
_SHARPEN = 8.0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``vllm`` needs a vLLM venv: without one it skips, and fails under ``CI=true``
    (ci_support.require_vllm). Checked here, before its fixtures, so none of them starts a server first."""
    if item.get_closest_marker("vllm"):
        require_vllm()


@pytest.fixture(autouse=True)
def _private_run_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a test's `rllm train` / `rllm eval` records goes to a store of its own ($RLLM_STORE), never to
    the workspace's runs/rllm.db."""
    monkeypatch.setenv("RLLM_STORE", str(tmp_path_factory.mktemp("store") / "rllm.db"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (built-in 49152-token ChatML tokenizer) whose greedy output varies with context."""
    out = make_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), seed=0)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.dim() == 2 and "embed_tokens" not in name:
                weight.mul_(_SHARPEN)
    model.save_pretrained(out)
    return out
