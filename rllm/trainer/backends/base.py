"""The small primitive API every training backend implements; the training loop is written once above it.

A backend owns the trainable policy and its optimizer. Per optimizer step the loop calls
``forward_backward`` once per batch (the backend micro-batches internally and accumulates gradients),
then ``optim_step``, then ``sync_weights_to`` so the inference engine samples from the new weights.
A backend states what it can do in :class:`BackendCapabilities`; the trainer compares that with the
config at start-up and refuses what the backend cannot honour.

Weight sync has two shapes, chosen by the engine: an in-process engine (``LocalEngine``) takes tensors
(``load_weights(named_tensors, version)``); an engine behind HTTP (a pool of vLLM servers) has a
``sync_from(backend, version)`` method and asks the backend for files (``save_adapter`` for LoRA,
``export_model`` for a full fine-tune), since its weights live in other processes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rllm.algorithms.losses import LossConfig
from rllm.inference.base import WeightSyncError
from rllm.types import TrainBatch


class BackendCapabilities(BaseModel):
    """What a backend supports. Anything not listed here is refused at start-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    full_finetune: bool
    lora: bool
    losses: frozenset[str]
    kl_to_reference: bool
    recompute_old_logprobs: bool
    bf16_autocast: bool
    devices: frozenset[str]  # e.g. {"cpu", "cuda"}
    share_prefix: bool = True  # backend.share_prefix (one forward pass per distinct prompt)


class UnsupportedConfigError(ValueError):
    """The config asks a backend for something it cannot do; the message says what to change."""


__all__ = ["BackendCapabilities", "TrainingBackend", "UnsupportedConfigError", "WeightSyncError"]


class TrainingBackend(ABC):
    capabilities: ClassVar[BackendCapabilities]
    step: int  # optimizer steps taken (skipped ones included): the weight version the engine samples under
    lora: bool

    @abstractmethod
    def forward_backward(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
    ) -> dict[str, float]:
        """Compute the loss over the whole batch and accumulate its gradients; return metrics.

        ``old_logprobs`` (behaviour logprobs for the ratio; default: the rollout's) and ``ref_logprobs``
        (for the KL term) are aligned with each sequence's ``input_ids``, as :meth:`compute_logprobs`
        returns them. The loss is normalised by the batch's global counts (``batch.loss_norm_tokens`` /
        ``loss_norm_sequences``, else its own totals), however the backend splits the work."""

    @abstractmethod
    def compute_logprobs(self, batch: TrainBatch, *, reference: bool = False) -> list[list[float]]:
        """Per-token logprobs of each sequence under the current (or reference) policy, aligned with
        ``input_ids``: the logprob of token i given tokens < i at loss-masked positions, 0.0 elsewhere."""

    @abstractmethod
    def optim_step(self) -> dict[str, float]:
        """Clip gradients, take one optimizer step, zero gradients; return grad_norm and lr."""

    @abstractmethod
    def skip_step(self) -> None:
        """Advance the step counter and LR schedule without an update (a step with nothing to learn)."""

    @abstractmethod
    def named_merged_weights(self, *, changed_only: bool = False) -> list[tuple[str, Any]]:
        """The policy's full weights under plain Hugging Face names (LoRA merged in); with ``changed_only``
        and LoRA, only the adapted ones."""

    @abstractmethod
    def save_adapter(self, path: Path) -> None:
        """LoRA only: write the current adapter as a PEFT adapter directory (``adapter_config.json`` +
        ``adapter_model.safetensors``), the format vLLM hot-loads."""

    @abstractmethod
    def save_state(self, path: Path) -> None:
        """Write model (Hugging Face format), optimizer, scheduler and RNG state under ``path``."""

    @abstractmethod
    def load_state(self, path: Path) -> None:
        """Restore what :meth:`save_state` wrote."""

    @abstractmethod
    def export_model(self, path: Path) -> None:
        """Write a standalone Hugging Face model directory (LoRA merged) for serving or evaluation."""

    def sync_weights_to(self, engine: Any) -> None:
        """Make ``engine`` sample from the current weights, as weight version ``self.step``.

        An engine with ``sync_from`` pulls files from this backend (see the module docstring); any other
        engine gets tensors, only the changed ones after the first sync of a LoRA run. Raises
        :class:`WeightSyncError` when the engine could not take them."""
        if hasattr(engine, "sync_from"):
            engine.sync_from(self, version=self.step)
        else:
            changed_only = self.lora and getattr(self, "_synced_once", False)
            engine.load_weights(self.named_merged_weights(changed_only=changed_only), version=self.step)
        self._synced_once = True

    def close(self) -> None:
        """Release what the backend holds outside this process (worker processes, a cluster connection)."""
