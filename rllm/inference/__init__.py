"""Inference: the engine protocol every sampler implements (``InferenceEngine``: token ids in, token ids
and logprobs out), the local PyTorch engine and the grammars it can hold a row to (``Grammar``). The pool
of vLLM servers, which drives the gateway, is ``rllm.trainer.vllm_pool``.

Names resolve on first use: ``LocalEngine`` imports torch and transformers, the protocol nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Completion": "rllm.inference.base",
    "Grammar": "rllm.inference.grammar",
    "InferenceEngine": "rllm.inference.base",
    "SamplingParams": "rllm.inference.base",
    "WeightSyncError": "rllm.inference.base",
    "LocalEngine": "rllm.inference.local",
}

__all__ = [
    "Completion",
    "Grammar",
    "InferenceEngine",
    "LocalEngine",
    "SamplingParams",
    "WeightSyncError",
]

if TYPE_CHECKING:
    from rllm.inference.base import Completion, InferenceEngine, SamplingParams, WeightSyncError
    from rllm.inference.grammar import Grammar
    from rllm.inference.local import LocalEngine

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
