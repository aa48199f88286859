"""The small primitive API every training backend implements; the training loop is written once above it.

A backend owns the trainable policy and its optimizer, wherever they live: in this process (``local``), in
rank processes (``distributed``) or in a remote service (``tinker``). Per optimizer step the loop calls
``forward_backward`` once per batch (the backend micro-batches internally and accumulates gradients),
then ``optim_step``, then ``sync_weights_to`` so the inference engine samples from the new weights.
A backend states what it can do in :class:`BackendCapabilities`; the trainer compares that with the
config at start-up and refuses what the backend cannot honour, and asks the backend's own
:meth:`TrainingBackend.check_config` for the rest.

Weight transfer to the sampler is a capability of both sides (``weight_transfer``), and the engine's mode
picks the shape: ``tensors`` (an in-process engine takes :meth:`TrainingBackend.named_merged_weights`),
``files`` (servers in other processes read what :meth:`save_adapter` or :meth:`export_model` write, asked
by the engine's ``sync_from``), ``service`` (the backend's service samples itself: the engine's
``sync_from`` asks :meth:`TrainingBackend.sampler_for` for a sampler of the current weights). A backend
implements the methods of the modes it declares; the others refuse.

A new backend is one file and one register call (``BACKENDS.register`` in ``rllm.trainer.backends``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rllm.algorithms.losses import LossConfig
from rllm.inference.base import WeightSyncError, WeightTransfer
from rllm.types import TrainBatch


class BackendCapabilities(BaseModel):
    """What a backend supports. Anything not listed here is refused at start-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    full_finetune: bool
    lora: bool
    # The policy losses it can run; None: every loss registered in POLICY_LOSSES (it computes them with
    # compute_policy_loss, so a registered plug-in loss runs too).
    losses: frozenset[str] | None
    kl_to_reference: bool
    recompute_old_logprobs: bool
    bf16_autocast: bool
    devices: frozenset[str]  # e.g. {"cpu", "cuda"}
    share_prefix: bool = True  # backend.share_prefix (one forward pass per distinct prompt)
    # How the current weights reach an inference engine (see the module docstring).
    weight_transfer: frozenset[WeightTransfer] = frozenset({"tensors", "files"})
    # It loads model.path itself (a local or hub model); false: model.path is a name its service resolves.
    loads_model: bool = True
    # Trains several named LoRA adapters on one base model, one per role (the roles section), each with its
    # own optimizer: rows train the adapter of their trajectory's role.
    adapters: bool = False
    # Which backend.* keys it reads beyond backend.name and its own section (the others are refused when set).
    backend_keys: frozenset[str] = frozenset(
        {
            "device",
            "autocast",
            "micro_batch_size",
            "micro_batch_tokens",
            "gradient_checkpointing",
            "attn_implementation",
            "share_prefix",
            "old_logprobs",
            "logprob_chunk_tokens",
        }
    )


def lr_factor(cfg: Any, step: int) -> float:
    """The learning-rate multiplier of optimizer step ``step`` (0-based) under ``cfg.optim``'s warm-up and
    schedule over ``cfg.trainer.steps``: every backend follows the same schedule."""
    o, total = cfg.optim, cfg.trainer.steps
    if o.warmup_steps and step < o.warmup_steps:
        return (step + 1) / o.warmup_steps
    if o.schedule == "constant":
        return 1.0
    progress = min(1.0, (step - o.warmup_steps) / max(1, total - o.warmup_steps))
    if o.schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class UnsupportedConfigError(ValueError):
    """The config asks a backend for something it cannot do; the message says what to change."""


__all__ = [
    "BackendCapabilities",
    "TrainingBackend",
    "UnsupportedConfigError",
    "WeightSyncError",
    "lr_factor",
]


class TrainingBackend(ABC):
    """Built as ``cls(cfg, model_path, pad_id=...)`` by :func:`rllm.trainer.backends.build_backend`."""

    capabilities: ClassVar[BackendCapabilities]
    step: int  # optimizer steps taken (skipped ones included): the weight version the engine samples under
    lora: bool
    _synced_once: bool = False  # a LoRA run hands over only the changed tensors after the first sync

    @abstractmethod
    def forward_backward(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
        logprobs_out: list[list[float]] | None = None,
    ) -> dict[str, float]:
        """Compute the loss over the whole batch and accumulate its gradients; return metrics.

        ``logprobs_out``, when given (an empty list), is filled with each sequence's per-token logprobs from
        this same forward pass, aligned as :meth:`compute_logprobs` returns them (what a service that reports
        the logprobs it trained on needs, without a second forward).

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

    def set_optimizer(
        self,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        grad_clip: float | None,
    ) -> None:
        """Use these AdamW settings from the next :meth:`optim_step` on, instead of ``cfg.optim``'s schedule
        (a client that sends them with every step: the Tinker service)."""
        raise UnsupportedConfigError(
            f"backend '{self.capabilities.name}' takes no per-step optimizer settings"
        )

    def load_adapter_weights(self, path: Path) -> None:
        """The adapter weights of a :meth:`save_state` directory, leaving the optimizer as it is."""
        raise UnsupportedConfigError(
            f"backend '{self.capabilities.name}' restores a checkpoint with its optimizer only (load_state)"
        )

    @abstractmethod
    def skip_step(self) -> None:
        """Advance the step counter and LR schedule without an update (a step with nothing to learn)."""

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Refuse, at start-up and in one line (:class:`UnsupportedConfigError`), what this backend cannot do
        beyond what :class:`BackendCapabilities` says (settings of its own section, what this machine lacks).
        Called before anything loads; the default refuses nothing."""

    # The weight-transfer modes (see the module docstring): a backend implements those it declares.
    def named_merged_weights(self, *, changed_only: bool = False) -> Iterable[tuple[str, Any]]:
        """``tensors``: the policy's full weights under plain Hugging Face names (LoRA merged in); with
        ``changed_only`` and LoRA, only the adapted ones. Iterated once (the local backend yields each weight
        as it merges it)."""
        raise WeightSyncError(f"backend '{self.capabilities.name}' does not hand weights over as tensors")

    def weights_for_engine(self, *, changed_only: bool = False) -> Iterable[tuple[str, Any]]:
        """What :meth:`sync_weights_to` hands an in-process engine's ``load_weights``: by default
        :meth:`named_merged_weights`. A backend may also yield :class:`rllm.inference.base.WeightWriter`
        values, which the engine calls with its own tensor (the local backend's LoRA merges: one pass over
        each weight instead of a merged copy and a copy of it)."""
        return self.named_merged_weights(changed_only=changed_only)

    def save_adapter(self, path: Path, adapter: str | None = None) -> None:
        """``files``, LoRA: write the current adapter (with roles: the one named, None = ``default``) as a PEFT
        adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``), the format vLLM
        hot-loads."""
        raise WeightSyncError(f"backend '{self.capabilities.name}' does not write adapter files")

    # Separate weights per role (capability ``adapters``, the ``roles`` section).
    @property
    def adapter_names(self) -> list[str]:
        """The adapters this run trains, one per role's adapter (``default`` first); [] without roles."""
        return []

    def named_adapter_tensors(self, *, changed_only: bool = False) -> dict[str, dict[str, tuple[Any, Any]]]:
        """``tensors`` with roles: adapter name -> base-model module name of each adapted Linear (plain Hugging
        Face names, ``...layers.0.self_attn.q_proj``) -> ``(A, B)``, A = lora_A weight ``[r, in]``, B =
        lora_B weight ``[out, r]``: that Linear's delta is ``adapter_scaling * B @ A``. With ``changed_only``,
        the adapters an optimizer step changed since the last call."""
        raise WeightSyncError(f"backend '{self.capabilities.name}' does not hand over one adapter per role")

    adapter_scaling: float = 1.0  # lora.alpha / lora.rank: each adapter's delta is adapter_scaling * B @ A

    def sampler_for(self, version: int) -> Any:
        """``service``: a handle the service samples the current weights with, as weight version ``version``
        (its engine's ``sync_from`` takes it)."""
        raise WeightSyncError(f"backend '{self.capabilities.name}' has no sampling service")

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
        """Make ``engine`` sample from the current weights, as weight version ``self.step``, in the engine's
        transfer mode (see the module docstring): tensors are handed over (only the changed ones after the
        first sync of a LoRA run; with roles, one LoRA adapter per role: ``engine.load_adapters``); files and
        services are pulled by the engine's ``sync_from``. Raises :class:`WeightSyncError` when the engine
        could not take them."""
        mode = engine.capabilities.weight_transfer
        if mode not in self.capabilities.weight_transfer:
            raise WeightSyncError(
                f"backend '{self.capabilities.name}' cannot hand weights over as {mode} "
                f"(it offers {', '.join(sorted(self.capabilities.weight_transfer))})"
            )
        if mode == "tensors" and self.adapter_names:  # roles: the engine keeps the base and every adapter
            adapters = self.named_adapter_tensors(changed_only=self._synced_once)
            engine.load_adapters(adapters, scaling=self.adapter_scaling, version=self.step)
        elif mode == "tensors":
            changed_only = self.lora and self._synced_once
            engine.load_weights(self.weights_for_engine(changed_only=changed_only), version=self.step)
        else:
            engine.sync_from(self, version=self.step)
        self._synced_once = True

    def step_metrics(self) -> dict[str, float]:
        """What the backend measured since the previous call, logged with the step's metrics (the trainer
        calls it once per step, after the sync); the distributed backend's time in collectives
        (``profile/collective_*``, docs/profiling.md). The default measures nothing."""
        return {}

    def close(self) -> None:
        """Release what the backend holds outside this process (worker processes, a cluster connection)."""
