"""The distributed training backend: FSDP2 ranks placed by Ray, one update equal to the local one.

Placement is Ray's: ``ray.init()`` starts a local cluster (``backend.distributed.ray_address`` joins an
existing one), a placement group reserves ``world_size`` bundles of ``{CPU: cpus_per_rank, GPU:
gpus_per_rank}`` with the ``placement`` strategy, and one rank actor runs in each bundle. The ranks form
one ``torch.distributed`` group (gloo on CPU, NCCL on GPU; rank 0 names the rendezvous address) and
shard the model with PyTorch's ``fully_shard`` (FSDP2): each decoder layer is a unit, so parameters,
gradients and AdamW state are split across ranks. What a rank computes is :class:`LocalBackend`'s math
(see ``_fsdp_rank.py``).

One step, as the driver (this class, in the trainer's process) runs it::

    batch ──split by tokens──▶ rank r: its sequences, with the WHOLE batch's loss normalisers
                               forward/backward per micro-batch (same count on every rank)
          ◀─metric sums──────  gradients reduce-scattered as SUMS ⇒ Σ_r ∇L_r = ∇L(batch)
    optim_step ────────────▶   global grad norm, clip, AdamW on each shard, LR schedule

so one step's update equals LocalBackend's on the whole batch, up to float32 summation order.

With ``roles`` (one LoRA adapter per role) each adapter's rows are split across the ranks on their own, and
every rank runs the adapters in the same order with the same micro-batch count for each (zero-weight ones
where its share is short or empty), so each adapter's gradient is the local backend's; each adapter has its
own AdamW, schedule and clip on every rank.

Tensor parallel is not implemented; it would go in ``_ShardedBackend._wrap_model``: a 2-D DeviceMesh
``("dp", "tp")`` over the same actors (``tp`` ranks on one node, so one node's bundles), each layer
``parallelize_module``-d over ``mesh["tp"]`` first, then ``fully_shard`` over ``mesh["dp"]``; the batch
split here would go by ``dp`` rank. Nothing in the driver assumes a 1-D mesh beyond that split.
"""

from __future__ import annotations

import importlib.util
import logging
import random
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rllm.algorithms.losses import LossConfig
from rllm.trainer.backends.base import TrainingBackend, UnsupportedConfigError
from rllm.trainer.backends.local import LOCAL_CAPABILITIES, cut_micro_batches, micro_batch_order
from rllm.trainer.config import TrainConfig, adapter_names, role_adapters
from rllm.trainer.profiler import collective_metrics
from rllm.types import DEFAULT_ADAPTER, TrainBatch

logger = logging.getLogger(__name__)

# The ranks run LocalBackend's math, so they support what it does (one adapter per role included: see
# _fsdp_rank.py), except sharing prompt prefixes: FSDP2 frees a layer's gathered weights after its backward, and
# the shared-prefix forward needs them for a second pass.
DISTRIBUTED_CAPABILITIES = LOCAL_CAPABILITIES.model_copy(
    update={"name": "distributed", "share_prefix": False}
)

DRIVER_RNG = "driver_rng.pt"
TRAINER_STATE = "trainer_state.pt"  # written by rank 0 (see _fsdp_rank.py)


def split_by_tokens(batch: TrainBatch, world_size: int) -> list[list[int]]:
    """Indices of ``batch.sequences`` for each rank: contiguous runs of the local backend's micro-batch
    order (length buckets, a group's answers together for the shared-prefix forward), cut so
    that each rank gets about ``1/world_size`` of the tokens, and every rank one sequence when there
    are enough. Deterministic: the same batch always splits the same way."""
    seqs = batch.sequences
    order = micro_batch_order(seqs)
    total = sum(len(s.input_ids) for s in seqs)
    shards: list[list[int]] = [[] for _ in range(world_size)]
    rank, acc = 0, 0.0
    for pos, i in enumerate(order):
        n = len(seqs[i].input_ids)
        left = len(order) - pos  # this one included
        if (
            rank < world_size - 1
            and shards[rank]
            and (acc + n / 2 > (rank + 1) * total / world_size or left <= world_size - 1 - rank)
        ):
            rank += 1
        shards[rank].append(i)
        acc += n
    return shards


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UnsupportedConfigError(
            "backend.name=distributed needs Ray, which is not installed: pip install 'rllm[distributed]'"
        ) from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail fast (instead of Ray's minute of retries) when nothing listens at a ``host:port`` address."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and friends: Ray's own lookup says whether a cluster runs
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as e:
        raise UnsupportedConfigError(
            f"backend.distributed.ray_address={address!r} is unreachable ({e.strerror or e}): start the cluster "
            "(`ray start --head`) or set backend.distributed.ray_address=null for a local one"
        ) from None


class DistributedBackend(TrainingBackend):
    """The driver: holds no weights, only the rank actors; every primitive runs on all ranks at once."""

    capabilities = DISTRIBUTED_CAPABILITIES

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """What the config asks first, then what this machine has."""
        if cfg.backend.distributed.comm == "nccl" and cfg.backend.device == "cpu":
            raise UnsupportedConfigError(
                "backend.distributed.comm=nccl needs GPUs, and backend.device=cpu: "
                "set backend.distributed.comm=gloo (or auto)"
            )
        if importlib.util.find_spec("ray") is None:
            raise UnsupportedConfigError(
                "backend.name=distributed places its ranks with Ray, which is not installed: "
                "pip install 'rllm[distributed]' (or bash scripts/setup.sh distributed)"
            )

    def __init__(self, cfg: TrainConfig, model_path: str, pad_id: int) -> None:
        self.cfg = cfg
        self.model_path = model_path
        self.pad_id = pad_id
        self.lora = cfg.lora.enabled
        self._adapter_names = adapter_names(cfg.roles)  # [] without roles
        self._role_adapters = role_adapters(cfg.roles)
        self.adapter_scaling = cfg.lora.alpha / cfg.lora.rank
        self.step = 0
        self._synced_once = False
        self._ray: Any = None
        self._started_ray = False
        self._pg: Any = None
        self._ranks: list[Any] = []
        dc = cfg.backend.distributed
        self.world_size = dc.world_size
        if cfg.backend.device not in ("auto", "cpu", "cuda"):
            raise UnsupportedConfigError(
                f"backend.device={cfg.backend.device!r}: distributed ranks get their GPU from Ray; use cuda, cpu or auto"
            )
        if cfg.backend.device == "cpu" and dc.comm == "nccl":
            raise UnsupportedConfigError(
                "backend.distributed.comm=nccl needs GPUs but backend.device=cpu: set comm=gloo (or auto)"
            )
        ray = _import_ray()
        try:
            self._start(ray)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start-up
    def _start(self, ray: Any) -> None:
        dc = self.cfg.backend.distributed
        started = time.monotonic()
        self._ray = ray
        if ray.is_initialized():
            logger.info("distributed backend: using the Ray connection this process already has")
        else:
            if dc.ray_address:
                _check_reachable(dc.ray_address)
            try:
                with _keeping_sigterm_handler():
                    ray.init(address=dc.ray_address, include_dashboard=False, logging_level=logging.WARNING)
            except ConnectionError as e:
                raise UnsupportedConfigError(
                    f"backend.distributed.ray_address={dc.ray_address!r}: no Ray cluster there "
                    f"({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}); start one "
                    "(`ray start --head`) or set backend.distributed.ray_address=null"
                ) from None
            self._started_ray = True
        total = ray.cluster_resources()
        device = self.cfg.backend.device
        if device == "auto":
            device = "cuda" if total.get("GPU", 0) >= 1 else "cpu"
        comm = dc.comm if dc.comm != "auto" else ("nccl" if device == "cuda" else "gloo")
        if device == "cpu" and comm == "nccl":
            raise UnsupportedConfigError(
                "backend.distributed.comm=nccl needs GPUs but the ranks run on cpu: set comm=gloo (or auto)"
            )
        gpus = dc.gpus_per_rank if dc.gpus_per_rank is not None else (1.0 if device == "cuda" else 0.0)
        if device == "cuda" and gpus <= 0:
            raise UnsupportedConfigError("backend.device=cuda needs backend.distributed.gpus_per_rank > 0")
        if comm == "nccl" and gpus < 1 and self.world_size > 1:
            raise UnsupportedConfigError(
                f"backend.distributed.gpus_per_rank={gpus:g}: NCCL needs each rank on a GPU of its own; set it to 1"
            )
        bundle = {"CPU": dc.cpus_per_rank, **({"GPU": gpus} if gpus else {})}
        self._reserve(ray, bundle, total, started)

        # Ray is optional (rllm[distributed]); the rank module loads transformers and torch's FSDP, which only
        # the rank processes use.
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from rllm.trainer.backends._fsdp_rank import FSDPRank

        actor = ray.remote(FSDPRank)
        self._ranks = [
            actor.options(
                num_cpus=dc.cpus_per_rank,
                num_gpus=gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._pg, placement_group_bundle_index=r
                ),
            ).remote(r, self.world_size)
            for r in range(self.world_size)
        ]
        rank_cfg = self.cfg.model_copy(deep=True)
        rank_cfg.backend.device = device
        rank_cfg.backend.share_prefix = False  # see _fsdp_rank.py: one decoder pass per micro-batch
        left = max(1.0, dc.startup_timeout_s - (time.monotonic() - started))
        master = self._get(self._ranks[0].master_address.remote(), timeout=left, what="rank 0 to start")
        threads = max(1, int(dc.cpus_per_rank))
        left = max(1.0, dc.startup_timeout_s - (time.monotonic() - started))
        self._get(
            [
                r.setup.remote(rank_cfg, self.model_path, self.pad_id, master, comm, threads)
                for r in self._ranks
            ],
            timeout=left,
            what="the ranks to join the process group and load the model",
        )
        logger.info(
            "distributed backend: %d %s ranks (%s, %s), %s, started in %.1f s",
            self.world_size,
            device,
            comm,
            bundle,
            "LoRA" if self.lora else "full fine-tune",
            time.monotonic() - started,
        )

    def _reserve(self, ray: Any, bundle: dict[str, float], total: dict[str, float], started: float) -> None:
        """A placement group of world_size bundles, or a one-line refusal naming what is missing."""
        from ray.util.placement_group import placement_group

        dc = self.cfg.backend.distributed
        need = {k: v * self.world_size for k, v in bundle.items()}
        short = {k: (v, total.get(k, 0.0)) for k, v in need.items() if total.get(k, 0.0) < v}
        if short:
            missing = ", ".join(f"{k} {v:g} (the cluster has {have:g})" for k, (v, have) in short.items())
            raise UnsupportedConfigError(
                f"backend.distributed: {self.world_size} ranks x {bundle} need {missing}: lower world_size, "
                "cpus_per_rank or gpus_per_rank, or add nodes"
            )
        self._pg = placement_group([dict(bundle) for _ in range(self.world_size)], strategy=dc.placement)
        left = max(1.0, dc.startup_timeout_s - (time.monotonic() - started))
        try:
            ray.get(self._pg.ready(), timeout=left)
        except ray.exceptions.GetTimeoutError:
            free = ray.available_resources()
            have = ", ".join(f"{k} {free.get(k, 0.0):g} of {v:g} free" for k, v in need.items())
            raise UnsupportedConfigError(
                f"backend.distributed: the placement group ({self.world_size} x {bundle}, {dc.placement}) was not "
                f"ready after {dc.startup_timeout_s:g} s ({have}; other work holds the rest, or no single node "
                "fits a bundle): free resources, lower the per-rank request or change placement"
            ) from None

    def _get(self, refs: Any, *, timeout: float | None = None, what: str = "the ranks") -> Any:
        ray = self._ray
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise UnsupportedConfigError(
                f"backend.distributed: timed out after {timeout:.0f} s waiting for {what}: raise "
                "backend.distributed.startup_timeout_s or check the ranks' logs"
            ) from None
        except ray.exceptions.RayTaskError as e:
            raise e.as_instanceof_cause() from None

    def _all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``method`` on every rank with the same arguments; the ranks' results in rank order."""
        return self._get([r.call.remote(method, *args, **kwargs) for r in self._ranks])

    # ------------------------------------------------------------------ primitives
    def _shards(self, batch: TrainBatch) -> tuple[list[list[int]], int, int, dict[str, int] | None]:
        """Each rank's sequence indices, the micro-batch count every rank runs, the filler's index (the
        shortest sequence: the zero-weight micro-batch a rank with fewer sequences pads with) and, with
        roles, the adapters with rows in order, each with the micro-batch count every rank runs for it
        (each adapter's rows are split across the ranks on their own)."""
        b = self.cfg.backend

        def micro_count(idx: list[int]) -> int:  # what the rank's _micro_batches will cut these rows into
            rows = [batch.sequences[i] for i in idx]
            return len(cut_micro_batches(rows, b.micro_batch_size, b.micro_batch_tokens))

        filler = min(range(len(batch.sequences)), key=lambda i: len(batch.sequences[i].input_ids))
        if not self._adapter_names:
            shards = split_by_tokens(batch, self.world_size)
            return shards, max(micro_count(s) for s in shards), filler, None
        rows: dict[str, list[int]] = {name: [] for name in self._adapter_names}
        for i, s in enumerate(batch.sequences):
            rows[self._role_adapters.get(s.trajectory_name, DEFAULT_ADAPTER)].append(i)
        shards: list[list[int]] = [[] for _ in range(self.world_size)]
        counts: dict[str, int] = {}
        for name, idx in rows.items():
            if not idx:
                continue
            parts = split_by_tokens(TrainBatch(sequences=[batch.sequences[i] for i in idx]), self.world_size)
            for shard, part in zip(shards, parts):
                shard.extend(idx[j] for j in part)
            counts[name] = max(micro_count([idx[j] for j in p]) for p in parts)
        return shards, max(micro_count(s) for s in shards), filler, counts

    def forward_backward(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
        logprobs_out: list[list[float]] | None = None,
    ) -> dict[str, float]:
        if not batch.sequences:
            raise ValueError("forward_backward got an empty batch; skip the step instead")
        # The whole batch's normalisers, on every shard: Σ_r loss_r is the batch's loss.
        num_tokens, num_seqs = batch.loss_norms()
        shards, num_micro, f, adapter_micro = self._shards(batch)

        def pick(rows: list[list[float]] | None, idx: list[int]) -> list[list[float]] | None:
            return None if rows is None else [rows[i] for i in idx]

        seqs = batch.sequences
        filler = (
            seqs[f],
            old_logprobs[f] if old_logprobs else None,
            ref_logprobs[f] if ref_logprobs else None,
        )
        refs = [
            rank.call.remote(
                "shard_forward_backward",
                TrainBatch(
                    sequences=[seqs[i] for i in idx],
                    loss_norm_tokens=num_tokens,
                    loss_norm_sequences=num_seqs,
                ),
                loss,
                pick(old_logprobs, idx),
                pick(ref_logprobs, idx),
                num_micro,
                filler,
                logprobs_out is not None,
                adapter_micro,
            )
            for rank, idx in zip(self._ranks, shards)
        ]
        sums: dict[str, float] = {}
        per_adapter: dict[str, float] = {}  # with roles: adapter/<name>/loss and tokens, summed over ranks
        weight_total = total_loss = 0.0
        rows: list[list[float]] = [[] for _ in seqs]
        for idx, (rank_sums, weight, rank_loss, rank_rows, rank_adapters) in zip(shards, self._get(refs)):
            for k, v in rank_sums.items():
                sums[k] = sums.get(k, 0.0) + v
            for k, v in rank_adapters.items():
                per_adapter[k] = per_adapter.get(k, 0.0) + v
            weight_total += weight
            total_loss += rank_loss
            for i, row in zip(idx, rank_rows or []):
                rows[i] = row
        if logprobs_out is not None:
            logprobs_out[:] = rows
        out = {**per_adapter, **{f"train/{k}": v / max(weight_total, 1.0) for k, v in sums.items()}}
        out["train/loss"] = total_loss
        return out

    def compute_logprobs(self, batch: TrainBatch, *, reference: bool = False) -> list[list[float]]:
        if not batch.sequences:
            return []
        shards, num_micro, f, adapter_micro = self._shards(batch)
        refs = [
            rank.call.remote(
                "shard_logprobs",
                TrainBatch(sequences=[batch.sequences[i] for i in idx]),
                reference,
                num_micro,
                batch.sequences[f],
                adapter_micro,
            )
            for rank, idx in zip(self._ranks, shards)
        ]
        out: list[list[float]] = [[] for _ in batch.sequences]
        for idx, rows in zip(shards, self._get(refs)):
            for i, row in zip(idx, rows):
                out[i] = row
        return out

    def step_metrics(self) -> dict[str, float]:
        """Each rank's time in collectives since the previous call (``profile/collective_*``: the mean over
        ranks, and the slowest rank's total), when ``backend.distributed.profile_collectives`` is on."""
        if not self.cfg.backend.distributed.profile_collectives or not self._ranks:
            return {}
        stats = self._get([r.take_collective_stats.remote() for r in self._ranks])
        return collective_metrics([s for s in stats if s is not None])

    def optim_step(self) -> dict[str, float]:
        metrics = self._all("optim_step")[0]  # every rank saw the same global norm and LR
        self.step += 1
        return metrics

    def set_optimizer(
        self,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        grad_clip: float | None,
    ) -> None:
        self._all(
            "set_optimizer", lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, grad_clip=grad_clip
        )

    def skip_step(self) -> None:
        self._all("skip_step")
        self.step += 1

    def named_merged_weights(self, *, changed_only: bool = False) -> list[tuple[str, torch.Tensor]]:
        return self._all("named_merged_weights", changed_only=changed_only)[0]

    def save_adapter(self, path: Path, adapter: str | None = None) -> None:
        if not self.lora:
            raise UnsupportedConfigError("save_adapter needs a LoRA run (lora.enabled=true)")
        if self._adapter_names and (adapter or DEFAULT_ADAPTER) not in self._adapter_names:
            raise ValueError(f"no adapter {adapter!r}: this run trains {', '.join(self._adapter_names)}")
        if not self._adapter_names and adapter not in (None, DEFAULT_ADAPTER):
            raise ValueError(f"no adapter {adapter!r}: this run has no roles, so one adapter (default)")
        self._all("save_adapter", str(Path(path).resolve()), adapter)

    @property
    def adapter_names(self) -> list[str]:
        return list(self._adapter_names)

    def named_adapter_tensors(
        self, *, changed_only: bool = False
    ) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
        if not self._adapter_names:
            raise UnsupportedConfigError("named_adapter_tensors needs roles (one adapter per role)")
        return self._all("named_adapter_tensors", changed_only=changed_only)[0]

    def export_model(self, path: Path) -> None:
        """Without roles: ``path`` is the model (LoRA merged). With roles: ``path/<adapter>/`` per adapter."""
        self._all("export_model", str(Path(path).resolve()))

    def save_state(self, path: Path) -> None:
        """A directory: ``dcp/`` (model + AdamW state, sharded, loadable at any world size),
        ``trainer_state.pt`` (schedule, step), one RNG file per rank and the driver's RNG. On several
        nodes ``path`` must be on a filesystem every node sees."""
        path = Path(path).resolve()
        path.mkdir(parents=True, exist_ok=True)
        self._all("save_state", str(path))
        torch.save(
            {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
            path / DRIVER_RNG,
        )

    def load_state(self, path: Path) -> None:
        path = Path(path).resolve()
        self._all("load_state", str(path))
        self.step = torch.load(path / TRAINER_STATE, weights_only=False)["step"]
        rng = torch.load(path / DRIVER_RNG, weights_only=False)
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        self._synced_once = False

    def close(self) -> None:
        """Stop the ranks, free their placement group, and disconnect from Ray if this backend connected."""
        ray = self._ray
        if ray is None:
            return
        if self._ranks:
            try:
                ray.get([r.close.remote() for r in self._ranks], timeout=30)
            except Exception:  # a rank that died or hangs is killed below all the same
                logger.warning("distributed backend: a rank did not close cleanly", exc_info=True)
            for r in self._ranks:
                ray.kill(r)
            self._ranks = []
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
            self._pg = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
        self._ray = None


@contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the SIGTERM handler with its own ``sys.exit(15)``; a handler the program set on purpose
    (``rllm train`` installs one that unwinds and then exits without interpreter finalization, which can crash in
    Ray's extension after a SIGTERM) is put back. A program that left SIGTERM at its default keeps Ray's."""
    on_main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if on_main else None
    try:
        yield
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)
