"""The small primitive API every training backend implements; the training loop is written once above it.

A backend owns the trainable policy and its optimizer. Per optimizer step the loop calls
``forward_backward`` once per batch (the backend micro-batches internally and accumulates gradients),
then ``optim_step``, then ``sync_weights_to`` so the inference engine samples from the new weights.
A backend states what it can do in :class:`BackendCapabilities`; the trainer compares that with the
config at start-up and refuses what the backend cannot honour.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rllm.algorithms.losses import LossConfig
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


class UnsupportedConfigError(ValueError):
    """The config asks a backend for something it cannot do; the message says what to change."""


class TrainingBackend(ABC):
    capabilities: BackendCapabilities

    @abstractmethod
    def forward_backward(self, batch: TrainBatch, loss: LossConfig) -> dict[str, float]:
        """Compute the loss over the whole batch and accumulate its gradients; return metrics."""

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
    def sync_weights_to(self, engine: Any) -> None:
        """Make ``engine`` sample from the current weights (and bump its weight version)."""

    @abstractmethod
    def save_state(self, path: Path) -> None:
        """Write model (Hugging Face format), optimizer, scheduler and RNG state under ``path``."""

    @abstractmethod
    def load_state(self, path: Path) -> None:
        """Restore what :meth:`save_state` wrote."""

    @abstractmethod
    def export_model(self, path: Path) -> None:
        """Write a standalone Hugging Face model directory (LoRA merged) for serving or evaluation."""
