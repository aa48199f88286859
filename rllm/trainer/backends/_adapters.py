"""Separate weights per role on the local backend: several named PEFT adapters on one base model.

A run with ``roles`` trains one LoRA adapter per adapter name the roles give (``default`` for the roles not
listed), all on the same frozen base. A training row belongs to the adapter of its trajectory's role
(``TrainSequence.trajectory_name``); the rows of each adapter run forward and backward with that adapter
active (peft's ``set_adapter``), so a row's gradient reaches only its own adapter. Each adapter has its own
AdamW (its learning rate ``roles.<role>.lr`` or ``optim.lr``, the same warm-up and schedule), its own
gradient clip (``optim.grad_clip`` over its own parameters) and its own metrics
(``adapter/<name>/loss``, ``tokens``, ``grad_norm``, ``lr``).

Loss normalisation is global: every adapter's rows are divided by the whole batch's counts
(``TrainBatch.loss_norms``), exactly as without roles. So the summed loss over the adapters is the loss of
one shared adapter, ``algorithm.loss_norm=sampled`` still counts the skipped groups' rows, and a run whose
roles all name one adapter updates exactly as a run without roles. The price: an adapter's gradient is
scaled by its share of the batch's tokens (a judge with one row per episode beside N solvers gets a
smaller one); AdamW divides that constant scale out, and each adapter's clip sees its own norm.

On the distributed backend's ranks (``_fsdp_rank.py``) the adapters are added before FSDP2 shards the model,
so their weights are sharded DTensors: what reads them whole (the engine's tensors, adapter files, exports)
gathers them collectively on every rank, and only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch.distributed.tensor import DTensor

from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import (
    LoraConfig,
    RoleConfig,
    TrainConfig,
    adapter_inits,
    adapter_lrs,
    adapter_names,
    role_adapters,
)
from rllm.types import DEFAULT_ADAPTER, TrainBatch

logger = logging.getLogger(__name__)

ADAPTERS_DIR = "adapters"  # a checkpoint's adapters/<name>/ (PEFT adapter dirs)
SAFETENSORS = "adapter_model.safetensors"


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: gathered from every rank when it is an FSDP2 shard (a collective), else itself."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def _writes() -> bool:
    """Whether this process writes files: always, unless it is a rank of a process group other than 0."""
    return not dist.is_initialized() or dist.get_rank() == 0


def _safetensors_files(model_dir: Path) -> dict[str, Path]:
    """Weight name -> the safetensors file of the model that holds it (one file, or the shards an index
    names); empty for a model stored otherwise."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return {w: model_dir / f for w, f in json.loads(index.read_text())["weight_map"].items()}
    single = model_dir / "model.safetensors"
    if not single.is_file():
        return {}
    with safe_open(str(single), framework="pt") as f:
        return dict.fromkeys(f.keys(), single)


def _read(file: Path, weight: str) -> torch.Tensor:
    """One tensor of a safetensors file."""
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return f.get_tensor(weight)


def add_adapters(model: Any, names: list[str]) -> None:
    """Add adapters ``names`` (beyond ``default``) to a PeftModel, with ``default``'s LoRA config: fp32 weights
    on the base layer's device. ``LocalBackend`` (and so each distributed rank) calls this before sharding."""
    peft_cfg = model.peft_config[DEFAULT_ADAPTER]
    for name in names:
        if name != DEFAULT_ADAPTER and name not in model.peft_config:
            model.add_adapter(name, copy.deepcopy(peft_cfg))


def check_init_adapter(path: str | Path, lora: LoraConfig, key: str) -> dict[str, Any]:
    """The saved PEFT adapter at ``path`` (``roles.<role>.init_adapter``, named ``key`` in errors) as a
    start for one of this run's adapters: its ``adapter_config.json``, refused unless it is a LoRA adapter
    of rank ``lora.rank`` and alpha ``lora.alpha`` (and of ``lora.target_modules`` when those are listed by
    name; ``all-linear`` is compared with the model's resolved modules when it loads: ``init_adapters``)."""
    path = Path(path)
    missing = [f for f in ("adapter_config.json", SAFETENSORS) if not (path / f).is_file()]
    if missing:
        raise UnsupportedConfigError(
            f"{key}={path} is not a saved PEFT adapter (no {' or '.join(missing)}): name a directory such as "
            "an `rllm sft` run's final_model/adapter or an `rllm train` run's final_model/<adapter>/adapter"
        )
    saved = json.loads((path / "adapter_config.json").read_text())
    if saved.get("peft_type") != "LORA":
        raise UnsupportedConfigError(f"{key}={path} is a {saved.get('peft_type')} adapter, not LoRA")
    got = {"rank": saved.get("r"), "alpha": saved.get("lora_alpha")}
    want = {"rank": lora.rank, "alpha": lora.alpha}
    if isinstance(lora.target_modules, list):
        got["target_modules"] = sorted(_modules(saved.get("target_modules")))
        want["target_modules"] = sorted(lora.target_modules)
    wrong = {k: v for k, v in got.items() if v != want[k]}
    if wrong:
        fix = " ".join(f"lora.{k}={_as_value(v)}" for k, v in wrong.items())
        have = ", ".join(f"lora.{k}={_as_value(want[k])}" for k in wrong)
        raise UnsupportedConfigError(
            f"{key}={path} was trained with {fix.replace(' ', ', ')} but this run has {have}: set {fix} "
            "(every adapter of a run has the same shape), or train the adapter with this run's lora.*"
        )
    return saved


def _modules(target: Any) -> set[str]:
    return {target} if isinstance(target, str) else set(target or [])


def _as_value(v: Any) -> str:
    return "[" + ",".join(v) + "]" if isinstance(v, list) else str(v)


def init_adapters(model: Any, roles: dict[str, RoleConfig], lora: LoraConfig) -> list[str]:
    """Load each adapter's ``roles.<role>.init_adapter`` into it (the adapters exist already: ``default``
    and ``add_adapters``'); the others keep PEFT's fresh start (B = 0: the base model). Called once, before
    the distributed backend shards the model (the files hold whole tensors); a resumed run then overwrites
    every adapter with its checkpoint's. Returns the adapters it loaded."""
    from peft import set_peft_model_state_dict  # peft is loaded already: this is a LoRA run

    loaded = []
    resolved = _modules(model.peft_config[DEFAULT_ADAPTER].target_modules)
    for name, path in adapter_inits(roles).items():
        key = next(f"roles.{role}.init_adapter" for role, r in roles.items() if r.adapter == name)
        saved = check_init_adapter(path, lora, key)
        if _modules(saved.get("target_modules")) != resolved:
            raise UnsupportedConfigError(
                f"{key}={path} adapts {sorted(_modules(saved.get('target_modules')))} but this run's "
                f"lora.target_modules adapt {sorted(resolved)}: set lora.target_modules="
                f"{_as_value(sorted(_modules(saved.get('target_modules'))))}, or train the adapter with this "
                "run's lora.*"
            )
        weights = load_file(str(Path(path) / SAFETENSORS))
        try:
            result = set_peft_model_state_dict(model, weights, adapter_name=name)
        except RuntimeError as exc:  # a shape mismatch: another base model
            raise UnsupportedConfigError(
                f"{key}={path} does not fit this run's model {model.peft_config[name].base_model_name_or_path}"
                f" (was it trained on {saved.get('base_model_name_or_path')}?): {str(exc)[:300]}"
            ) from exc
        unloaded = [k for k in result.missing_keys if _owned_by(k, name)]
        if result.unexpected_keys or unloaded:
            raise UnsupportedConfigError(
                f"{key}={path} does not match this run's model: "
                f"{(result.unexpected_keys or unloaded)[:3]} (was it trained on "
                f"{saved.get('base_model_name_or_path')}?)"
            )
        loaded.append(name)
        logger.info("adapter %r starts from %s", name, path)
    return loaded


def _owned_by(param_name: str, adapter: str) -> bool:
    """Whether a PEFT parameter name (``...q_proj.lora_A.<adapter>.weight``) is one of ``adapter``'s."""
    return f".lora_A.{adapter}." in param_name or f".lora_B.{adapter}." in param_name


class RoleAdapters:
    """The adapters, their optimizers and schedules of a run with ``roles`` (made by the local backend
    after it wrapped the base model with its ``default`` adapter; lives as long as the backend)."""

    def __init__(
        self,
        model: Any,
        cfg: TrainConfig,
        lr_factor: Callable[[int], float],
        fused: bool,
        clip: Callable[[list[torch.nn.Parameter]], torch.Tensor],
    ) -> None:
        self.model = model  # the PeftModel
        self.roles = role_adapters(cfg.roles)
        self.names = adapter_names(cfg.roles)
        # The backend added the adapters (add_adapters, init_adapters) before a distributed rank sharded them.
        self.clip = clip  # the backend's gradient clip (optim.grad_clip; global over the ranks' shards)
        self.params: dict[str, list[torch.nn.Parameter]] = {
            name: [p for n, p in model.named_parameters() if _owned_by(n, name)] for name in self.names
        }
        self._trainable()
        o = cfg.optim
        self.optimizers = {
            name: torch.optim.AdamW(
                self.params[name],
                lr=lr,
                betas=(o.beta1, o.beta2),
                eps=o.eps,
                weight_decay=o.weight_decay,
                fused=fused or None,
            )
            for name, lr in adapter_lrs(cfg.roles, o.lr).items()
        }
        self.schedulers = {
            name: torch.optim.lr_scheduler.LambdaLR(opt, lr_factor) for name, opt in self.optimizers.items()
        }
        self.changed: set[str] = set(self.names)  # adapters stepped since named_adapter_tensors last ran
        model.set_adapter(DEFAULT_ADAPTER)
        self._trainable()

    def _trainable(self) -> None:
        # peft's set_adapter freezes the inactive adapters; every adapter stays trainable here (an inactive
        # one gets no gradient anyway, and a frozen one would drop out of gradient checkpointing's graph).
        for params in self.params.values():
            for p in params:
                p.requires_grad_(True)

    def adapter_of(self, trajectory_name: str) -> str:
        return self.roles.get(trajectory_name, DEFAULT_ADAPTER)

    def split(self, batch: TrainBatch) -> list[tuple[str, list[int]]]:
        """``(adapter, indices of its rows in batch.sequences)`` for each adapter that has rows, in
        ``names`` order."""
        rows: dict[str, list[int]] = {name: [] for name in self.names}
        for i, s in enumerate(batch.sequences):
            rows[self.adapter_of(s.trajectory_name)].append(i)
        return [(name, idx) for name, idx in rows.items() if idx]

    @contextlib.contextmanager
    def active(self, name: str) -> Iterator[None]:
        """Run forward passes with adapter ``name`` only; ``default`` is active again afterwards."""
        self.model.set_adapter(name)
        self._trainable()
        try:
            yield
        finally:
            self.model.set_adapter(DEFAULT_ADAPTER)
            self._trainable()

    # ------------------------------------------------------------------ forward and backward
    def _part(self, batch: TrainBatch, idx: list[int]) -> TrainBatch:
        """The rows ``idx`` of ``batch``, their loss divided by the whole batch's counts (global)."""
        tokens, sequences = batch.loss_norms()
        rows = [batch.sequences[i] for i in idx]
        return TrainBatch(sequences=rows, loss_norm_tokens=tokens, loss_norm_sequences=sequences)

    def accumulate_gradients(
        self,
        batch: TrainBatch,
        accumulate: Callable[..., tuple[dict[str, float], float, float]],
        loss: Any,
        old_logprobs: list[list[float]] | None,
        ref_logprobs: list[list[float]] | None,
        sink: dict[int, list[float]] | None,
    ) -> tuple[dict[str, float], float, float, dict[str, float]]:
        """The backend's ``accumulate`` (``LocalBackend._accumulate_gradients``) over each adapter's rows with
        that adapter active; returns its metric sums, trained tokens and loss over all of them, and each
        adapter's ``adapter/<name>/loss`` and ``tokens``."""
        sums: dict[str, float] = {}
        weight_total = total_loss = 0.0
        per_adapter: dict[str, float] = {}
        for name, idx in self.split(batch):
            old = [old_logprobs[i] for i in idx] if old_logprobs is not None else None
            ref = [ref_logprobs[i] for i in idx] if ref_logprobs is not None else None
            with self.active(name):
                part_sums, weight, part_loss = accumulate(
                    self._part(batch, idx), loss, old_logprobs=old, ref_logprobs=ref, logprobs_sink=sink
                )
            for k, v in part_sums.items():
                sums[k] = sums.get(k, 0.0) + v
            weight_total += weight
            total_loss += part_loss
            per_adapter[f"adapter/{name}/loss"] = part_loss
            per_adapter[f"adapter/{name}/tokens"] = weight
        return sums, weight_total, total_loss, per_adapter

    def logprobs(
        self, batch: TrainBatch, compute: Callable[[TrainBatch], list[list[float]]]
    ) -> list[list[float]]:
        """``compute`` (the backend's per-token logprobs) of each row under its own adapter, in batch order."""
        out: list[list[float]] = [[] for _ in batch.sequences]
        for name, idx in self.split(batch):
            with self.active(name):
                rows = compute(self._part(batch, idx))
            for i, row in zip(idx, rows):
                out[i] = row
        return out

    # ------------------------------------------------------------------ optimizer
    def optim_step(self) -> dict[str, float]:
        """One AdamW step per adapter over its own clipped gradients (an adapter without rows in this step
        has none: AdamW leaves it as it is); its schedule moves either way."""
        metrics: dict[str, float] = {}
        total_sq = 0.0
        for name in self.names:
            params, opt = self.params[name], self.optimizers[name]
            if any(p.grad is not None for p in params):
                self.changed.add(name)
            norm = float(self.clip(params))
            metrics[f"adapter/{name}/grad_norm"] = norm
            metrics[f"adapter/{name}/lr"] = opt.param_groups[0]["lr"]
            total_sq += norm**2
            opt.step()
            self.schedulers[name].step()
            opt.zero_grad(set_to_none=True)
        metrics["train/grad_norm"] = total_sq**0.5
        return metrics

    def skip_step(self) -> None:
        for scheduler in self.schedulers.values():
            scheduler.step()

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def tensors(self, *, changed_only: bool) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
        """See ``TrainingBackend.named_adapter_tensors``; copies, so later steps do not change what an engine
        holds. Every call starts a new "changed since" window."""
        from peft.tuners.lora import LoraLayer  # peft is loaded already: this is a LoRA run

        names = [n for n in self.names if not changed_only or n in self.changed]
        out: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {n: {} for n in names}
        for module_name, module in self.model.base_model.model.named_modules():
            if not isinstance(module, LoraLayer):
                continue
            for name in names:
                if name in module.lora_A:
                    a, b = _full(module.lora_A[name].weight), _full(module.lora_B[name].weight)
                    out[name][module_name] = (a.detach().clone(), b.detach().clone())
        self.changed.clear()
        return out

    def _lora_layers(self, name: str) -> Iterator[tuple[str, Any]]:
        """``(plain HF weight name, LoRA layer)`` of every linear layer adapter ``name`` adapts, in model order."""
        from peft.tuners.lora import LoraLayer  # peft is loaded already: this is a LoRA run

        for module_name, module in self.model.base_model.model.named_modules():
            if isinstance(module, LoraLayer) and name in module.lora_A:
                yield f"{module_name}.weight", module

    @torch.no_grad()
    def iter_deltas(self, name: str) -> Iterator[tuple[str, torch.Tensor]]:
        """float32 ``scaling * B @ A`` of adapter ``name``, one adapted linear layer at a time (by plain HF
        weight name), so a caller that uses each and drops it never holds them all."""
        for weight, module in self._lora_layers(name):
            a, b = module.lora_A[name].weight, module.lora_B[name].weight
            if isinstance(a, DTensor) or isinstance(b, DTensor):  # a rank's shards: gathered (plain Linear)
                yield weight, (_full(b).float() @ _full(a).float()) * module.scaling[name]
            else:
                yield weight, module.get_delta_weight(name).float()

    def save_adapter(self, path: Path, name: str) -> None:
        """Adapter ``name`` as a PEFT adapter directory of its own (keys without the adapter name: it loads
        as any adapter name, in peft or vLLM)."""
        from peft.utils import get_peft_model_state_dict  # peft is loaded already: this is a LoRA run

        if name not in self.names:
            raise ValueError(f"no adapter {name!r}: this run trains {', '.join(self.names)}")
        path = Path(path)
        state = get_peft_model_state_dict(self.model, adapter_name=name)
        state = {k: _full(v).detach().cpu().contiguous() for k, v in state.items()}  # every rank gathers
        if not _writes():
            return
        path.mkdir(parents=True, exist_ok=True)
        save_file(state, str(path / SAFETENSORS), {"format": "pt"})
        config = copy.deepcopy(self.model.peft_config[name])
        config.inference_mode = True
        config.save_pretrained(str(path))

    def load_adapter(self, path: Path, name: str) -> None:
        from peft import set_peft_model_state_dict  # peft is loaded already: this is a LoRA run

        result = set_peft_model_state_dict(
            self.model, load_file(str(Path(path) / SAFETENSORS)), adapter_name=name
        )
        if result.unexpected_keys:
            raise RuntimeError(
                f"adapter {name!r} at {path} does not match the model: {result.unexpected_keys[:3]}"
            )

    # ------------------------------------------------------------------ state
    def save_state(self, path: Path) -> dict[str, Any]:
        """Write every adapter under ``path/adapters/<name>/``; return the optimizer state to pickle."""
        for name in self.names:
            self.save_adapter(Path(path) / ADAPTERS_DIR / name, name)
        return {
            "adapters": list(self.names),
            "optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
            "schedulers": {n: s.state_dict() for n, s in self.schedulers.items()},
        }

    def load_state(self, path: Path, state: dict[str, Any]) -> None:
        saved = state.get("adapters")
        if saved != self.names:
            raise UnsupportedConfigError(
                f"checkpoint {path} holds adapters {saved or '[one, without roles]'} but this run trains "
                f"{self.names}: resume with the roles it was saved with"
            )
        for name in self.names:
            self.load_adapter(Path(path) / ADAPTERS_DIR / name, name)
            self.optimizers[name].load_state_dict(state["optimizers"][name])
            self.schedulers[name].load_state_dict(state["schedulers"][name])
        self.changed = set(self.names)

    def export(self, path: Path, model_path: str) -> None:
        """One standalone model per adapter: ``path/<name>/`` is the base with that adapter merged (float32)
        and ``path/<name>/adapter/`` the adapter alone.

        One float32 copy of the model is written to again for each adapter, one layer's delta at a time, its
        base weights read back from the model's safetensors files between adapters (a copy of them is kept
        only for weights the files do not name), so the export holds about one model beside the run's own
        memory, not also every delta and a second copy of every adapted weight."""
        from transformers import AutoModelForCausalLM

        merged = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32) if _writes() else None
        params = dict(merged.named_parameters()) if merged is not None else {}
        if merged is not None:
            missing = sorted({w for n in self.names for w, _ in self._lora_layers(n)} - set(params))
            if missing:
                raise RuntimeError(f"merged LoRA export does not match the model: no weights {missing}")
        stored = _safetensors_files(Path(model_path)) if merged is not None else {}
        originals: dict[str, torch.Tensor] = {}
        for i, name in enumerate(self.names):
            for weight, delta in self.iter_deltas(name):  # every rank: gathering shards is a collective
                if merged is None:
                    continue
                with torch.no_grad():
                    param = params[weight]
                    if i > 0:  # the previous adapter's merge is undone: the base weight again
                        param.copy_(
                            originals[weight] if weight in originals else _read(stored[weight], weight)
                        )
                    elif weight not in stored and len(self.names) > 1:
                        originals[weight] = param.detach().clone()
                    param.add_(delta.to(param.device))
                del delta
            if merged is not None:
                merged.save_pretrained(Path(path) / name)
            self.save_adapter(Path(path) / name / "adapter", name)
        logger.info(
            "exported one model per adapter under %s: %s (each merged, its LoRA adapter in <name>/adapter)",
            path,
            ", ".join(self.names),
        )
