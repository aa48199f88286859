"""One rank of the distributed backend: a LocalBackend whose model is sharded by FSDP2 across the ranks.

A rank runs in its own process (a Ray actor, see ``distributed.py``) and joins one ``torch.distributed``
group with the others. It reuses :class:`LocalBackend`'s math unchanged (padding, the shared-prefix
forward, the loss, the LR schedule); what differs is where parameters live:

- every decoder layer is its own ``fully_shard`` unit (at world size 1 nothing is sharded: the one rank
  keeps the plain model; checkpoints stay DCP, so they load at any world size) and a thin root module (``_ShardedRoot``) holds the
  rest (embeddings, final norm, LM head: tied weights stay in one unit). The loss code calls the decoder
  and the LM head separately, so it runs *inside* the root's forward, where FSDP2 has gathered the
  root's parameters;
- gradients are summed across ranks, not averaged (``set_gradient_divide_factor(1.0)``): each rank's loss
  is already normalised by the whole batch's counts, so the sum is the single-process gradient;
- the gradient norm for clipping is the global one (DTensor norms reduced across ranks);
- full weights (export, weight sync, the adapter) are gathered collectively and returned from rank 0;
  checkpoints are ``torch.distributed.checkpoint`` directories, which any world size can load.

Every rank must issue the same collectives in the same order: the driver gives each rank the same
number of micro-batches, padding short shards with a zero-weight copy of one sequence.

With ``roles`` (one LoRA adapter per role, ``_adapters.RoleAdapters``) the adapters are added (and each
loaded from its ``roles.<role>.init_adapter``, on every rank) before the model is sharded, and a step runs adapter by adapter in the same order on every rank: each rank switches
to the adapter, runs its rows of that adapter and pads to the same micro-batch count as the rank with the
most (a rank with none of its rows runs only zero-weight micro-batches), so every rank reduces the same
gradients in the same order. One AdamW per adapter, all of them in the DCP checkpoint.

The local backend's shared-prefix forward (``backend.share_prefix``) is off here: it runs every decoder
layer twice in one graph, and FSDP2 reshards a layer after the backward of its last forward, freeing
weights the backward of the first pass still needs (and a rank whose micro-batch shares nothing would
gather each layer once while the others gather it twice).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from rllm.algorithms.losses import LossConfig
from rllm.trainer.backends._lora import Factors, merge_lora
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.trainer.profiler import CollectiveMeter
from rllm.types import DEFAULT_ADAPTER, TrainBatch, TrainSequence

Filler = tuple[TrainSequence, list[float] | None, list[float] | None]

TRAINER_STATE = "trainer_state.pt"
DCP_DIR = "dcp"


class _ShardedRoot(torch.nn.Module):
    """The FSDP2 root unit around a model. ``root(fn, *args)`` runs ``fn(*args)`` with the root unit's
    parameters gathered, so code that calls the model's submodules directly (the decoder, then the LM
    head only at trained positions) sees full weights, and FSDP2's backward hooks still fire."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


class _ShardedBackend(LocalBackend):
    """LocalBackend on this rank's share of a batch, with its model sharded over ``mesh``."""

    def __init__(self, cfg: TrainConfig, model_path: str, pad_id: int, mesh: DeviceMesh) -> None:
        self._mesh = mesh
        self._roots: dict[int, _ShardedRoot] = {}
        super().__init__(cfg, model_path, pad_id=pad_id)

    # --------------------------------------------------------------------------------- sharding
    def _wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        # Tensor parallel would go here: a 2-D DeviceMesh ("dp", "tp"), parallelize_module(model,
        # mesh["tp"], plan) on each layer first, then fully_shard over mesh["dp"] as below.
        # With roles, LocalBackend.__init__ has added every adapter (and loaded its init_adapter) by now: they
        # are sharded with the rest, and RoleAdapters finds them.
        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.device.type == "cuda" and self.autocast_dtype is not None
            else MixedPrecisionPolicy()
        )
        if self._mesh.size() == 1:
            # Nothing to shard: FSDP2 on one rank would only add a second full copy of every weight and
            # copy each in and out per pass (measured +40 % forward/backward time on the 135M shape).
            return model
        reshard = self.cfg.backend.distributed.reshard_after_forward
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        for layer in base.get_decoder().layers:
            fully_shard(layer, mesh=self._mesh, reshard_after_forward=reshard, mp_policy=mp)
        root = _ShardedRoot(model)
        # The root's parameters are needed again at once by backward: keeping them gathered saves an
        # all-gather per micro-batch (FSDP2's own default for the root).
        fully_shard(root, mesh=self._mesh, reshard_after_forward=False, mp_policy=mp)
        for module in root.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)  # sum: the losses carry the global normalisers
                module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
        self._roots[id(model)] = root
        return model

    def _response_logprobs(
        self, model: torch.nn.Module, t: dict[str, torch.Tensor], *, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        inner = super()._response_logprobs
        root = self._roots.get(id(model))
        if root is None:  # world size 1: the plain model
            return inner(model, t, with_entropy=with_entropy)
        return root(inner, model, t, with_entropy=with_entropy)

    def _clip_gradients(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        if isinstance(norm, DTensor):  # each rank holds part of the sum of squares
            norm = norm.full_tensor()
        if self.cfg.optim.grad_clip is not None:
            torch.nn.utils.clip_grads_with_norm_(params, self.cfg.optim.grad_clip, norm, foreach=True)
        return norm

    # --------------------------------------------------------------------------------- work
    def shard_forward_backward(
        self,
        shard: TrainBatch,
        loss: LossConfig,
        old_logprobs: list[list[float]] | None,
        ref_logprobs: list[list[float]] | None,
        num_micro_batches: int,
        filler: Filler,
        want_logprobs: bool = False,
        adapter_micro_batches: dict[str, int] | None = None,
    ) -> tuple[dict[str, float], float, float, list[list[float]] | None, dict[str, float]]:
        """This rank's share of the step: metric sums, trained tokens, loss, (with ``want_logprobs``) the
        shard's per-token logprobs from the same forward pass, and with roles each adapter's
        ``adapter/<name>/loss`` and ``tokens``; empty micro-batches keep the collectives in step with the
        rank that has the most. With roles, ``adapter_micro_batches`` gives the adapters to run, in order,
        and the micro-batch count every rank runs for each."""
        sink: dict[int, list[float]] | None = {} if want_logprobs else None
        per_adapter: dict[str, float] = {}
        if adapter_micro_batches is None:
            sums, weight, total_loss = self._accumulate_gradients(
                shard, loss, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, logprobs_sink=sink
            )
            self._pad_backward(num_micro_batches - len(self._micro_batches(shard)), loss, filler)
        else:
            sums, weight, total_loss = {}, 0.0, 0.0
            for name, count in adapter_micro_batches.items():
                idx = self._rows_of(shard, name)
                with self._active(name):
                    part_sums, part_weight, part_loss = {}, 0.0, 0.0
                    if idx:
                        part_sums, part_weight, part_loss = self._accumulate_gradients(
                            self._part(shard, idx),
                            loss,
                            old_logprobs=_pick(old_logprobs, idx),
                            ref_logprobs=_pick(ref_logprobs, idx),
                            logprobs_sink=sink,
                        )
                    self._pad_backward(count - self._micro_count(shard, idx), loss, filler)
                for k, v in part_sums.items():
                    sums[k] = sums.get(k, 0.0) + v
                weight += part_weight
                total_loss += part_loss
                per_adapter[f"adapter/{name}/loss"] = part_loss
                per_adapter[f"adapter/{name}/tokens"] = part_weight
        rows = [sink[id(s)] for s in shard.sequences] if sink is not None else None
        return sums, weight, total_loss, rows, per_adapter

    def _pad_backward(self, count: int, loss: LossConfig, filler: Filler) -> None:
        """``count`` zero-weight micro-batches: the collectives of a pass, no change to any gradient."""
        seq, old, ref = filler
        for _ in range(count):
            self._micro_batch_backward(
                [seq],
                loss,
                1.0,
                1.0,
                None if old is None else [old],
                None if ref is None else [ref],
                weight=0.0,
            )

    # roles: the rows of one adapter, run with it active on every rank
    def _rows_of(self, shard: TrainBatch, name: str) -> list[int]:
        assert self.roles is not None
        return [i for i, s in enumerate(shard.sequences) if self.roles.adapter_of(s.trajectory_name) == name]

    def _part(self, shard: TrainBatch, idx: list[int]) -> TrainBatch:
        tokens, sequences = shard.loss_norms()  # the whole batch's, as the driver set them
        return TrainBatch(
            sequences=[shard.sequences[i] for i in idx],
            loss_norm_tokens=tokens,
            loss_norm_sequences=sequences,
        )

    def _micro_count(self, shard: TrainBatch, idx: list[int]) -> int:
        return len(self._micro_batches(self._part(shard, idx))) if idx else 0

    def _active(self, name: str) -> contextlib.AbstractContextManager:
        assert self.roles is not None
        return self.roles.active(name)

    def shard_logprobs(
        self,
        shard: TrainBatch,
        reference: bool,
        num_micro_batches: int,
        filler: TrainSequence,
        adapter_micro_batches: dict[str, int] | None = None,
    ) -> list[list[float]]:
        pad = TrainBatch(sequences=[filler])
        if adapter_micro_batches is None or reference:  # the reference is the base, whichever adapter
            out = self.compute_logprobs(shard, reference=reference) if shard.sequences else []
            for _ in range(num_micro_batches - len(self._micro_batches(shard))):
                self.compute_logprobs(pad, reference=reference)
            return out
        rows: list[list[float]] = [[] for _ in shard.sequences]
        for name, count in adapter_micro_batches.items():
            idx = self._rows_of(shard, name)
            with self._active(name):
                if idx:
                    for i, row in zip(idx, self._logprobs(self._part(shard, idx), reference=False)):
                        rows[i] = row
                for _ in range(count - self._micro_count(shard, idx)):
                    self._logprobs(pad, reference=False)
        return rows

    # --------------------------------------------------------------------------------- weights
    def _gather(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Full CPU copies of the named parameters on rank 0 (empty elsewhere); a collective."""
        params = dict(self.model.named_parameters())
        out: dict[str, torch.Tensor] = {}
        for name in names:
            p = params[name].detach()
            full = p.full_tensor() if isinstance(p, DTensor) else p
            if dist.get_rank() == 0:
                out[name] = full.cpu()
        return out

    def _lora_layers(self) -> dict[str, Any]:
        """Adapted linear layers by their plain Hugging Face module name."""
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer

        layers = {}
        for name, module in self.model.base_model.model.named_modules():
            if isinstance(module, LoraLayer):
                if (
                    not isinstance(module, LoraLinear)
                    or module.fan_in_fan_out
                    or any(module.use_dora.values())
                ):
                    raise NotImplementedError(
                        f"distributed LoRA merge supports plain Linear adapters, not {name}"
                    )
                layers[name] = module
        return layers

    def _gathered_lora_factors(self) -> dict[str, list[Factors]]:
        """Each adapted layer's ``(A, B, scaling)`` per active adapter, gathered whole, keyed by plain HF weight
        name (rank 0 only; a collective)."""
        prefix = "base_model.model."
        layers = self._lora_layers()
        names = [n for n, _ in self.model.named_parameters() if "lora_" in n]
        full = self._gather(names)
        if dist.get_rank() != 0:
            return {}
        return {
            f"{name}.weight": [
                (
                    full[f"{prefix}{name}.lora_A.{a}.weight"],
                    full[f"{prefix}{name}.lora_B.{a}.weight"],
                    module.scaling[a],
                )
                for a in module.active_adapters
                if a in module.lora_A
            ]
            for name, module in layers.items()
        }

    @torch.no_grad()
    def named_merged_weights(self, *, changed_only: bool = False) -> list[tuple[str, torch.Tensor]]:
        if not self.lora:
            names = [n for n, _ in self.model.named_parameters()]
            full = self._gather(names)
            return [(n, full[n]) for n in names] if full else []
        factors = self._gathered_lora_factors()
        base_names = [n for n, _ in self.model.base_model.model.named_parameters() if "lora_" not in n]
        plain = {n: n.replace(".base_layer.", ".") for n in base_names}
        adapted = set(self._lora_weights())
        wanted = [n for n in base_names if not changed_only or plain[n] in adapted]
        full = self._gather(["base_model.model." + n for n in wanted])
        if dist.get_rank() != 0:
            return []
        out = []
        for n in wanted:
            p = full["base_model.model." + n]
            out.append((plain[n], merge_lora(p, factors[plain[n]]) if plain[n] in factors else p))
        return out

    def save_adapter(self, path: Path, adapter: str | None = None) -> None:
        if self.roles is not None:  # every rank gathers, rank 0 writes
            self.roles.save_adapter(Path(path), adapter or DEFAULT_ADAPTER)
            return
        names = [n for n, _ in self.model.named_parameters() if "lora_" in n]
        full = self._gather(names)
        if dist.get_rank() == 0:
            self.model.save_pretrained(Path(path), state_dict=full)

    def named_adapter_tensors(
        self, *, changed_only: bool = False
    ) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
        """Every rank gathers the adapters' shards; rank 0 returns them (CPU copies), the others {}."""
        out = super().named_adapter_tensors(changed_only=changed_only)
        if dist.get_rank() != 0:
            return {}
        return {n: {m: (a.cpu(), b.cpu()) for m, (a, b) in layers.items()} for n, layers in out.items()}

    def export_model(self, path: Path) -> None:
        from transformers import AutoModelForCausalLM

        if self.roles is not None:  # path/<adapter>/, merged, and its adapter alone
            self.roles.export(Path(path), self.model_path)
            return
        if self.lora:
            factors = self._gathered_lora_factors()
            if dist.get_rank() != 0:
                return
            merged = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
            params = dict(merged.named_parameters())
            with torch.no_grad():
                for name, layer_factors in factors.items():
                    merge_lora(params[name], layer_factors, inplace=True)
            merged.save_pretrained(Path(path))
            return
        full = dict(self.named_merged_weights())
        if dist.get_rank() != 0:
            return
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(full, strict=False)
        real_missing = [
            m for m in missing if not (m == "lm_head.weight" and model.config.tie_word_embeddings)
        ]
        if real_missing or unexpected:
            raise RuntimeError(
                f"export does not match the model: missing={real_missing} unexpected={unexpected}"
            )
        model.save_pretrained(Path(path))

    # --------------------------------------------------------------------------------- state
    def _state_options(self) -> StateDictOptions:
        # LoRA: only the adapters (and their optimizer state) are checkpointed; the frozen base is the
        # model on disk, as in the local backend's checkpoints.
        return StateDictOptions(ignore_frozen_params=self.lora)

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizer, or with roles every adapter's (in adapter order): all of them go in the checkpoint."""
        return list(self.roles.optimizers.values()) if self.roles is not None else [self.optimizer]

    def _schedulers_state(self) -> dict[str, Any]:
        if self.roles is None:
            return {"scheduler": self.scheduler.state_dict()}
        return {
            "adapters": list(self.roles.names),
            "schedulers": {n: s.state_dict() for n, s in self.roles.schedulers.items()},
            # get_state_dict gives an optimizer that never stepped a zero state at step 1 (a zero-lr step);
            # these are emptied again, here and on load, so its first real step is AdamW's first, as locally
            "unstepped": [n for n, o in self.roles.optimizers.items() if not o.state],
        }

    def _forget_unstepped(self, names: list[str]) -> None:
        if self.roles is not None:
            for name in names:
                self.roles.optimizers[name].state.clear()

    def save_state(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        path = Path(path)
        schedules = self._schedulers_state()
        optimizers = self._optimizers()
        model_sd, optim_sd = get_state_dict(
            self.model, optimizers if len(optimizers) > 1 else optimizers[0], options=self._state_options()
        )
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path / DCP_DIR))
        self._forget_unstepped(schedules.get("unstepped", []))
        rank = dist.get_rank()
        torch.save(_rng_state(), path / f"rng_rank{rank}.pt")
        if rank == 0:
            torch.save(
                {**schedules, "step": self.step, "world_size": dist.get_world_size()}, path / TRAINER_STATE
            )
        dist.barrier()

    def load_state(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        path = Path(path)
        trainer = torch.load(path / TRAINER_STATE, weights_only=False)
        names = list(self.roles.names) if self.roles is not None else None
        if trainer.get("adapters") != names:
            raise UnsupportedConfigError(
                f"checkpoint {path} holds adapters {trainer.get('adapters') or '[one, without roles]'} but this "
                f"run trains {names or '[one, without roles]'}: resume with the roles it was saved with"
            )
        options = self._state_options()
        optimizers = self._optimizers()
        optim_arg = optimizers if len(optimizers) > 1 else optimizers[0]
        model_sd, optim_sd = get_state_dict(self.model, optim_arg, options=options)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(path / DCP_DIR))
        # dcp.load fails on a key the checkpoint lacks; non-strict here only lets the frozen base (not in
        # a LoRA checkpoint, as it is not in `state`) keep the weights it was loaded with.
        set_state_dict(
            self.model,
            optim_arg,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            options=StateDictOptions(ignore_frozen_params=self.lora, strict=False),
        )
        if self.roles is None:
            self.scheduler.load_state_dict(trainer["scheduler"])
        else:
            for name, scheduler in self.roles.schedulers.items():
                scheduler.load_state_dict(trainer["schedulers"][name])
            self._forget_unstepped(trainer["unstepped"])
            self.roles.changed = set(self.roles.names)
        self.step = trainer["step"]
        # A rank that did not exist when the checkpoint was written continues rank 0's streams.
        rng = path / f"rng_rank{dist.get_rank()}.pt"
        _set_rng_state(torch.load(rng if rng.exists() else path / "rng_rank0.pt", weights_only=False))


def _pick(rows: list[list[float]] | None, idx: list[int]) -> list[list[float]] | None:
    return None if rows is None else [rows[i] for i in idx]


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


class FSDPRank:
    """A trainer rank: the body of a Ray actor (``ray.remote(FSDPRank)``), also usable in a plain
    process. Methods are called on every rank together; those returning data return it from rank 0."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.backend: _ShardedBackend | None = None
        self.collectives: CollectiveMeter | None = None

    def master_address(self) -> tuple[str, int]:
        """This node's address and a free port for the process group's rendezvous (rank 0)."""
        import ray

        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(
        self, cfg: TrainConfig, model_path: str, pad_id: int, master: tuple[str, int], comm: str, threads: int
    ) -> None:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
        device = cfg.backend.device
        if device == "cpu":
            torch.set_num_threads(threads)
        else:
            torch.cuda.set_device(0)  # Ray exposes this rank's GPU as the only visible one
        dist.init_process_group(
            comm, rank=self.rank, world_size=self.world_size, timeout=timedelta(minutes=30)
        )
        mesh = init_device_mesh(
            "cpu" if device == "cpu" else "cuda", (self.world_size,), mesh_dim_names=("dp",)
        )
        self.backend = _ShardedBackend(cfg, model_path, pad_id, mesh)
        if cfg.backend.distributed.profile_collectives:
            self.collectives = CollectiveMeter()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a backend method on this rank (the driver calls every rank with the same method); with
        ``backend.distributed.profile_collectives`` its time in collectives is measured."""
        if self.collectives is None:
            return getattr(self.backend, method)(*args, **kwargs)
        with self.collectives.measure():
            return getattr(self.backend, method)(*args, **kwargs)

    def take_collective_stats(self) -> dict[str, float] | None:
        """This rank's time in collectives since the last take (``CollectiveMeter.take``); None when off."""
        return self.collectives.take() if self.collectives is not None else None

    def close(self) -> None:
        self.backend = None
        if dist.is_initialized():
            dist.destroy_process_group()
