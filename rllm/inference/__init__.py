"""Inference: the engine protocol every sampler implements (``InferenceEngine``: token ids in, token ids
and logprobs out) and the local PyTorch engine (the pool of vLLM servers, which drives the gateway, is
``rllm.trainer.vllm_pool``).

Names resolve on first use: ``LocalEngine`` imports torch and transformers, the protocol nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Completion": "rllm.inference.base",
    "InferenceEngine": "rllm.inference.base",
    "SamplingParams": "rllm.inference.base",
    "WeightSyncError": "rllm.inference.base",
    "LocalEngine": "rllm.inference.local",
}

__all__ = [
    "Completion",
    "InferenceEngine",
    "LocalEngine",
    "SamplingParams",
    "WeightSyncError",
]

if TYPE_CHECKING:
    from rllm.inference.base import Completion, InferenceEngine, SamplingParams, WeightSyncError
    from rllm.inference.local import LocalEngine

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
