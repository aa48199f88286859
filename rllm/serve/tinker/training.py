"""One trained model of the Tinker service: a LoRA adapter on the served base model, with its optimizer.

Each model gets its own ``LocalBackend`` (its own copy of the base weights, frozen, plus the adapter): the
simplest isolation between tenants, and the right trade for the small models this serves on one machine;
N models cost N copies of the base. Every method here runs on the model's worker thread
(:mod:`rllm.serve.tinker.worker`), in the client's order.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rllm.serve.tinker.losses import loss_config, summed_loss, to_sequence, untrained_logprobs
from rllm.serve.tinker.wire import ForwardBackwardCall, encode_forward_backward_output
from rllm.serve.tinker.worker import RequestError
from rllm.trainer.backends import build_backend
from rllm.trainer.backends.base import TrainingBackend, UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.types import TrainBatch, TrainSequence

logger = logging.getLogger(__name__)

# Tinker-cookbook's hyperparameter helpers assume LoRA alpha 32 whatever the rank (the hosted service does
# not publish its value); the update is scaled by alpha / rank.
LORA_ALPHA = 32
STATE_META = "tinker_model.json"


@dataclass(frozen=True)
class AdapterSpec:
    """What a LoRA adapter is: its rank, the modules it adapts and the seed of its initialisation."""

    rank: int
    target_modules: tuple[str, ...]
    seed: int

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "target_modules": list(self.target_modules), "seed": self.seed}


@dataclass(frozen=True)
class TrainSettings:
    """The server-wide settings every model's backend is built with (from ``rllm serve tinker``)."""

    model_path: str
    device: str
    autocast: str  # backend.autocast: "none" trains in float32
    micro_batch_size: int
    pad_id: int
    vocab_size: int
    backend: str = "local"  # the rllm training backend each model trains on: local, or distributed
    world_size: int = 2  # ranks of each model's distributed backend


def target_modules(
    linear_names: dict[str, str], *, train_attn: bool, train_mlp: bool, train_unembed: bool
) -> tuple[str, ...]:
    """Module names (last component) to adapt, from the base model's linear layers by kind
    (``attn`` / ``mlp`` / ``unembed``, see :func:`linear_kinds`)."""
    wanted = {"attn": train_attn, "mlp": train_mlp, "unembed": train_unembed}
    names = tuple(sorted(name for name, kind in linear_names.items() if wanted.get(kind)))
    if not names:
        raise RequestError("LoRA config adapts no layer: set train_attn, train_mlp or train_unembed")
    return names


def linear_kinds(model: torch.nn.Module) -> dict[str, str]:
    """Each linear layer name of ``model`` (its last component, as PEFT matches them) by kind: ``attn``
    for attention projections, ``mlp`` for the feed-forward ones, ``unembed`` for the output embedding,
    which is left out when it is tied to the input embedding (a LoRA on a tied head would change the
    embedding the sampler reads too)."""
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    kinds: dict[str, str] = {}
    for path, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        name = path.rsplit(".", 1)[-1]
        if module is head:
            if not tied:
                kinds[name] = "unembed"
        elif "attn" in path or "attention" in path:
            kinds[name] = "attn"
        elif any(k in path for k in ("mlp", "feed_forward", "ffn", "experts")):
            kinds[name] = "mlp"
    return kinds


class TrainedModel:
    """A LoRA model being trained through the Tinker API."""

    def __init__(self, model_id: str, base_model: str, settings: TrainSettings, spec: AdapterSpec) -> None:
        self.model_id = model_id
        self.base_model = base_model
        self.settings = settings
        self.spec = spec
        self.backend: TrainingBackend | None = None

    # ------------------------------------------------------------------ lifecycle
    def build(self) -> None:
        """Load the base weights and a fresh adapter (the first operation of a model)."""
        s = self.settings
        cfg = TrainConfig.model_validate(
            {
                "model": {"path": s.model_path},
                "lora": {
                    "enabled": True,
                    "rank": self.spec.rank,
                    "alpha": LORA_ALPHA,
                    "target_modules": list(self.spec.target_modules),
                },
                # The request's Adam settings are set per optim_step; no schedule, no clipping by default.
                "optim": {"schedule": "constant", "grad_clip": None},
                "backend": {
                    "name": s.backend,
                    "device": s.device,
                    "autocast": s.autocast,
                    "micro_batch_size": s.micro_batch_size,
                    **({"distributed": {"world_size": s.world_size}} if s.backend == "distributed" else {}),
                },
                # Tinker's logprobs are those of the raw logits (temperature 1).
                "rollout": {"temperature": 1.0},
                "trainer": {"seed": self.spec.seed},
            }
        )
        self.backend = build_backend(cfg, s.model_path, pad_id=s.pad_id)

    def close(self) -> None:
        """Release what the model's backend holds outside this process (a distributed backend's ranks)."""
        if self.backend is not None:
            self.backend.close()
            self.backend = None

    def _require(self) -> TrainingBackend:
        if self.backend is None:
            raise RequestError(f"model {self.model_id} has no weights loaded")
        return self.backend

    # ------------------------------------------------------------------ training
    def forward_backward(self, call: ForwardBackwardCall) -> bytes:
        """Tinker's ``forward_backward`` / ``forward``: per-datum target logprobs and ``loss:sum``."""
        backend = self._require()
        loss = loss_config(call.loss_fn, call.loss_fn_config)
        if not call.data:
            raise RequestError("forward_backward got no data")
        vocab, train = self.settings.vocab_size, not call.forward_only
        seqs = [to_sequence(d, call.loss_fn, i, vocab, trained_only=train) for i, d in enumerate(call.data)]
        batch = TrainBatch(sequences=seqs, loss_norm_tokens=1.0, loss_norm_sequences=1.0)
        if call.forward_only:
            logprobs = backend.compute_logprobs(batch)
            total = summed_loss(seqs, logprobs, loss)
        else:
            logprobs = []
            metrics = backend.forward_backward(batch, loss, logprobs_out=logprobs)
            total = metrics["train/loss"]
            _fill_untrained(backend, seqs, logprobs)
        outputs = [{"logprobs": np.asarray(lp[1:], dtype=np.float32)} for lp in logprobs]
        return encode_forward_backward_output(outputs, {"loss:sum": float(total)})

    def optim_step(self, params: dict[str, Any]) -> dict[str, Any]:
        """One AdamW step with the request's settings (Tinker's ``AdamParams``), set on every param group
        for this step: learning rate, betas, eps, weight decay, and global-norm clipping (0 = none)."""
        backend = self._require()
        lr = float(params.get("learning_rate", 1e-4))
        betas = (float(params.get("beta1", 0.9)), float(params.get("beta2", 0.95)))
        eps, wd = float(params.get("eps", 1e-12)), float(params.get("weight_decay", 0.0))
        clip = float(params.get("grad_clip_norm", 0.0))
        if lr < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or eps < 0 or wd < 0:
            raise RequestError(f"invalid AdamParams: lr={lr}, betas={betas}, eps={eps}, weight_decay={wd}")
        backend.set_optimizer(
            lr=lr, betas=betas, eps=eps, weight_decay=wd, grad_clip=clip if clip > 0 else None
        )
        out = backend.optim_step()
        return {"metrics": {"grad_norm:mean": out["train/grad_norm"], "learning_rate:mean": lr}}

    # ------------------------------------------------------------------ weights
    def merged_adapted_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The adapted layers' weights with the adapter merged in (what a sampler needs beyond the base)."""
        return [(n, t.detach().clone()) for n, t in self._require().named_merged_weights(changed_only=True)]

    def save_state(self, directory: Path) -> None:
        """Adapter, optimizer and RNG state (``LocalBackend.save_state``) plus what re-creates the model."""
        self._require().save_state(directory)
        meta = {"base_model": self.base_model, "model_id": self.model_id, "adapter": self.spec.to_json()}
        (directory / STATE_META).write_text(json.dumps(meta, indent=2))

    def load_state(self, directory: Path, *, optimizer: bool) -> None:
        """Adapter weights from a :meth:`save_state` directory, and the optimizer state when asked."""
        backend = self._require()
        if optimizer:
            backend.load_state(directory)
            return
        try:
            backend.load_adapter_weights(directory)
        except UnsupportedConfigError as exc:
            raise RequestError(str(exc)) from None


def _fill_untrained(backend: TrainingBackend, seqs: list[TrainSequence], logprobs: list[list[float]]) -> None:
    """Complete ``logprobs`` (from a ``trained_only`` pass: 0.0 at untrained targets) with the untrained
    targets' logprobs, from one forward-only pass over each distinct prompt (and each sequence with a hole):
    the weights have not changed since the pass, so these are the values a full pass would have given."""
    rows, owners = untrained_logprobs(seqs)
    if not rows:
        return
    extra = backend.compute_logprobs(TrainBatch(sequences=rows))
    for seq, lp, mine in zip(seqs, logprobs, owners):
        for r in mine:
            row_lp, row_mask = extra[r], rows[r].loss_mask
            for i in range(1, len(row_mask)):
                if row_mask[i] and not seq.loss_mask[i]:
                    lp[i] = row_lp[i]


def read_state_meta(directory: Path) -> dict[str, Any]:
    """The model a :meth:`TrainedModel.save_state` directory was written from."""
    path = directory / STATE_META
    if not path.is_file():
        raise RequestError(f"{directory} holds no state saved by rllm serve tinker")
    return json.loads(path.read_text())


def adapter_spec(rank: int, modules: tuple[str, ...], seed: int | None) -> AdapterSpec:
    """A spec whose seed is the client's, or a fresh random one (Tinker's ``seed=None``)."""
    return AdapterSpec(
        rank=rank, target_modules=modules, seed=seed if seed is not None else secrets.randbelow(2**31)
    )
