"""``backend.name=tinker``: train through a Tinker service, the hosted one or ``rllm serve tinker``.

The service holds the LoRA weights and the optimizer; this backend turns each rllm batch into the Tinker
API's calls on the real ``tinker`` SDK, and the ``tinker`` inference engine (below) samples through the
service's sampling client: weight transfer is ``service`` (``save_weights_for_sampler`` after every
optimizer step, then a sampling client on that path, as weight version ``step``).

How rllm's loss maps onto Tinker's (which sums over tokens and has no normaliser of its own):

- ``algorithm.loss.name``: ``is`` is Tinker's ``importance_sampling``, ``ppo`` its ``ppo`` (``clip_low`` /
  ``clip_high`` become ``clip_low_threshold = 1 - clip_low`` / ``clip_high_threshold = 1 + clip_high``).
  Both are linear in the advantage, so rllm's aggregation (``algorithm.loss.agg``: token-mean, seq-mean-...,
  with the batch's global normalisers) is applied by scaling each token's advantage by its normaliser: the
  service's sum is then rllm's loss, value and gradient. Other losses (gspo, cispo), a KL to a reference
  (``kl_coef``), truncated IS (``tis_cap``) have no Tinker equivalent here and are refused at start-up.
- ``backend.old_logprobs=recompute`` uses the service's ``forward`` (logprobs of the same tokens under the
  current weights) before the update.
- ``optim.*`` becomes the ``AdamParams`` of each ``optim_step`` (the learning rate at this step of the
  schedule, betas, eps, weight decay, ``grad_clip`` as ``grad_clip_norm``).

Capabilities: LoRA only (rank from ``lora.rank``; Tinker fixes alpha and trains every linear layer), no
reference model, no local device. Everything else is refused at start-up in one line (``check_config``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from rllm.algorithms.losses import LossConfig, aggregate_loss, compute_policy_loss
from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams, WeightSyncError
from rllm.models import BUILTIN_MODELS, resolve_model
from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend, UnsupportedConfigError, lr_factor
from rllm.types import TrainBatch, TrainSequence

logger = logging.getLogger(__name__)

__all__ = ["TinkerBackend", "TinkerEngine", "TinkerEnginePlugin", "TinkerOptions"]

# rllm loss -> Tinker loss_fn
_LOSSES = {"is": "importance_sampling", "ppo": "ppo"}
_FIXED_LORA_KEYS = ("alpha", "dropout", "target_modules")  # the service's own choice


class TinkerOptions(BaseModel):
    """``backend.tinker.*``: where the service is and what it calls the model."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(
        None,
        description="The service's URL (e.g. http://127.0.0.1:8765 for `rllm serve tinker`); null: "
        "$TINKER_BASE_URL, else the hosted Tinker service.",
    )
    base_model: str | None = Field(
        None,
        description="The service's name for the base model; null: model.path (a name the service serves, "
        "e.g. Qwen/Qwen3-8B; it is not loaded here).",
    )
    api_key_env: str = Field(
        "TINKER_API_KEY",
        description="Environment variable that holds the API key (keys never go in a config file).",
    )
    timeout_s: float = Field(600.0, gt=0, description="Most seconds one service operation may take.")
    tokenizer: str | None = Field(
        None,
        description="Where the sampler's tokenizer loads from (a local directory or hub id); null: model.path "
        "when it is a built-in model or a local directory, else the service's model name (from the hub).",
    )


def _options(cfg: Any) -> TinkerOptions:
    opts = cfg.backend.options
    return opts if isinstance(opts, TinkerOptions) else TinkerOptions()


# The SDK refuses to start without a key; a service of your own (`rllm serve tinker` without --api-key)
# accepts any, so one given by URL gets this placeholder when the environment has none.
LOCAL_PLACEHOLDER_KEY = "tml-rllm-local-service"


def _service_client(opts: TinkerOptions) -> Any:
    import tinker  # the optional SDK: only a tinker run needs it

    key = os.environ.get(opts.api_key_env) or (LOCAL_PLACEHOLDER_KEY if opts.base_url else None)
    return tinker.ServiceClient(base_url=opts.base_url, api_key=key)


TINKER_CAPABILITIES = BackendCapabilities(
    name="tinker",
    full_finetune=False,
    lora=True,
    losses=frozenset(_LOSSES),
    kl_to_reference=False,
    recompute_old_logprobs=True,
    bf16_autocast=False,
    devices=frozenset({"remote"}),
    share_prefix=False,
    weight_transfer=frozenset({"service"}),
    loads_model=False,
    backend_keys=frozenset({"old_logprobs"}),
)


class TinkerBackend(TrainingBackend):
    """The policy lives in a Tinker service; see the module docstring."""

    capabilities = TINKER_CAPABILITIES

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        if importlib.util.find_spec("tinker") is None:
            raise UnsupportedConfigError(
                "backend.name=tinker needs the tinker SDK, which is not installed: pip install 'rllm[tinker]'"
            )
        fixed = [f"lora.{k}" for k in _FIXED_LORA_KEYS if k in cfg.lora.model_fields_set]
        if fixed:
            raise UnsupportedConfigError(
                f"backend.name=tinker sets only the LoRA rank (the service fixes alpha, dropout and the adapted "
                f"layers): drop {', '.join(fixed)}"
            )
        loss = cfg.algorithm.loss
        if loss.tis_cap is not None:
            raise UnsupportedConfigError(
                "backend.name=tinker: Tinker's losses take no per-token truncated-IS weight: drop "
                "algorithm.loss.tis_cap"
            )
        opts = _options(cfg)
        if (
            opts.base_url is None
            and not os.environ.get("TINKER_BASE_URL")
            and not os.environ.get(opts.api_key_env)
        ):
            raise UnsupportedConfigError(
                f"backend.name=tinker: no service to talk to: set backend.tinker.base_url (e.g. the URL of "
                f"`rllm serve tinker`) or $TINKER_BASE_URL, or ${opts.api_key_env} for the hosted service"
            )

    def __init__(self, cfg: Any, model_path: str, pad_id: int) -> None:
        import tinker  # the optional SDK: only a tinker run needs it

        self.cfg = cfg
        self.opts = _options(cfg)
        self.pad_id = pad_id
        self.lora = True
        self.step = 0
        self.base_model = self.opts.base_model or model_path
        self.service = _service_client(self.opts)
        self.client = self._wait(
            self.service.create_lora_training_client(
                base_model=self.base_model, rank=cfg.lora.rank, seed=cfg.trainer.seed
            )
        )
        self._types = tinker.types
        logger.info(
            "tinker backend: LoRA rank %d on %s at %s",
            cfg.lora.rank,
            self.base_model,
            self.opts.base_url or os.environ.get("TINKER_BASE_URL") or "the hosted service",
        )

    def _wait(self, future: Any) -> Any:
        return future.result(timeout=self.opts.timeout_s)

    # ------------------------------------------------------------------ data
    def _datum(self, seq: TrainSequence, advantages: list[float], logprobs: list[float]) -> Any:
        """One Tinker ``Datum``: the model reads ``input_ids[:-1]`` and predicts ``input_ids[1:]``; per-token
        inputs are those of the predicted tokens (position i+1 of rllm's aligned lists)."""
        t = self._types
        ids = seq.input_ids
        return t.Datum(
            model_input=t.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={
                "target_tokens": t.TensorData.from_numpy(np.asarray(ids[1:], dtype=np.int64)),
                "logprobs": t.TensorData.from_numpy(np.asarray(logprobs[1:], dtype=np.float32)),
                "advantages": t.TensorData.from_numpy(np.asarray(advantages[1:], dtype=np.float32)),
            },
        )

    def _scaled_advantages(self, batch: TrainBatch, loss: LossConfig) -> list[list[float]]:
        """Each token's advantage times its weight in rllm's aggregated loss (masked tokens: 0), so that
        Tinker's sum over tokens is rllm's loss (see the module docstring). The weight is the derivative of
        ``aggregate_loss`` by the token's loss (it is linear in them): the one definition of the modes."""
        seqs = batch.sequences
        num_tokens, num_seqs = batch.loss_norms()
        unit_BT = torch.ones(len(seqs), max(len(s.input_ids) for s in seqs), requires_grad=True)
        aggregate_loss(
            unit_BT,
            _padded([[float(m) for m in s.loss_mask] for s in seqs]),
            loss.agg,
            num_tokens=num_tokens,
            num_sequences=num_seqs,
            norm_tokens=loss.agg_norm_tokens,
        ).backward()
        weights = unit_BT.grad.tolist()  # type: ignore[union-attr]
        return [[a * w for a, w in zip(s.advantages, row)] for s, row in zip(seqs, weights)]

    @staticmethod
    def _loss_config(loss: LossConfig) -> dict[str, float] | None:
        if loss.name == "ppo":
            return {"clip_low_threshold": 1.0 - loss.clip_low, "clip_high_threshold": 1.0 + loss.clip_high}
        return None

    @staticmethod
    def _aligned_logprobs(output: dict[str, Any], seq: TrainSequence) -> list[float]:
        """The service's per-target logprobs as rllm aligns them with ``input_ids`` (0.0 at position 0)."""
        values = output["logprobs"].to_numpy()  # a TensorData
        return [0.0, *values.astype(np.float64).tolist()][: len(seq.input_ids)]

    # ------------------------------------------------------------------ primitives
    def forward_backward(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
        logprobs_out: list[list[float]] | None = None,
    ) -> dict[str, float]:
        if ref_logprobs is not None:
            raise UnsupportedConfigError(
                "backend.name=tinker has no reference model (algorithm.loss.kl_coef=0)"
            )
        if loss.name not in _LOSSES:
            raise UnsupportedConfigError(f"backend.name=tinker has no loss {loss.name!r}")
        seqs = batch.sequences
        if not seqs:
            raise ValueError("forward_backward got an empty batch; skip the step instead")
        behaviour = old_logprobs if old_logprobs is not None else [s.rollout_logprobs for s in seqs]
        advantages = self._scaled_advantages(batch, loss)
        data = [self._datum(s, a, b) for s, a, b in zip(seqs, advantages, behaviour)]
        out = self._wait(self.client.forward_backward(data, _LOSSES[loss.name], self._loss_config(loss)))
        trainer_lp = [self._aligned_logprobs(o, s) for o, s in zip(out.loss_fn_outputs, seqs)]
        if logprobs_out is not None:
            logprobs_out[:] = [[v * m for v, m in zip(row, s.loss_mask)] for row, s in zip(trainer_lp, seqs)]
        metrics = self._metrics(seqs, trainer_lp, behaviour, loss)
        metrics["train/loss"] = float(out.metrics.get("loss:sum", 0.0))
        return metrics

    @torch.no_grad()
    def _metrics(
        self,
        seqs: list[TrainSequence],
        trainer_lp: list[list[float]],
        behaviour: list[list[float]],
        loss: LossConfig,
    ) -> dict[str, float]:
        """rllm's own loss metrics (ratio, approx KL, clip fraction, rollout gap) from the logprobs the
        service computed in the same pass: the same formulas as the local backend's."""

        def pad(rows: list[list[float]]) -> torch.Tensor:
            return _padded(rows)[:, 1:]

        mask = pad([[float(m) for m in s.loss_mask] for s in seqs])
        lp, old = pad(trainer_lp), pad(behaviour)
        rollout = pad([s.rollout_logprobs for s in seqs])
        _, metrics = compute_policy_loss(lp, old, pad([s.advantages for s in seqs]), mask, loss)
        n = mask.sum().clamp(min=1)
        out = {f"train/{k}": float(v) for k, v in metrics.items()}
        out["train/trainer_rollout_logprob_diff"] = float(((lp - rollout).abs() * mask).sum() / n)
        return out

    def compute_logprobs(self, batch: TrainBatch, *, reference: bool = False) -> list[list[float]]:
        if reference:
            raise UnsupportedConfigError(
                "backend.name=tinker has no reference model (algorithm.loss.kl_coef=0)"
            )
        t = self._types
        data = [
            t.Datum(
                model_input=t.ModelInput.from_ints(s.input_ids[:-1]),
                loss_fn_inputs={
                    "target_tokens": t.TensorData.from_numpy(np.asarray(s.input_ids[1:], dtype=np.int64)),
                    "weights": t.TensorData.from_numpy(np.asarray(s.loss_mask[1:], dtype=np.float32)),
                },
            )
            for s in batch.sequences
        ]
        out = self._wait(self.client.forward(data, "cross_entropy"))
        return [
            [v * m for v, m in zip(self._aligned_logprobs(o, s), s.loss_mask)]
            for o, s in zip(out.loss_fn_outputs, batch.sequences)
        ]

    def _adam(self) -> Any:
        o = self.cfg.optim
        return self._types.AdamParams(
            learning_rate=o.lr * lr_factor(self.cfg, self.step),
            beta1=o.beta1,
            beta2=o.beta2,
            eps=o.eps,
            weight_decay=o.weight_decay,
            grad_clip_norm=o.grad_clip or 0.0,
        )

    def optim_step(self) -> dict[str, float]:
        params = self._adam()
        out = self._wait(self.client.optim_step(params))
        self.step += 1
        metrics = {"train/lr": params.learning_rate}
        for key, value in (out.metrics or {}).items():  # the service's own (grad_norm:mean, ...)
            if "grad_norm" in key:
                metrics["train/grad_norm"] = float(value)
        return metrics

    def skip_step(self) -> None:
        self.step += 1  # the schedule is a function of the step: nothing else to advance

    # ------------------------------------------------------------------ weights
    def sampler_for(self, version: int) -> Any:
        """Save the current weights for sampling and return a sampling client on them."""
        name = f"step_{version:06d}_{int(time.time() * 1000)}"
        try:
            path = self._wait(self.client.save_weights_for_sampler(name)).path
            return self._wait(self.service.create_sampling_client(model_path=path))
        except Exception as exc:  # the SDK's errors: the trainer stops rather than sample stale weights
            raise WeightSyncError(f"tinker: saving weights for sampling failed: {exc}") from exc

    def save_state(self, path: Path) -> None:
        """Save the adapter and optimizer in the service (``save_state``) and record its path under
        ``path`` (the checkpoint directory rllm keeps)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = self._wait(self.client.save_state(f"step_{self.step:06d}_{int(time.time() * 1000)}")).path
        (path / "tinker_state.json").write_text(
            json.dumps({"state_path": state, "step": self.step, "base_model": self.base_model}) + "\n"
        )

    def load_state(self, path: Path) -> None:
        record = json.loads((Path(path) / "tinker_state.json").read_text())
        if record["base_model"] != self.base_model:
            raise UnsupportedConfigError(
                f"checkpoint {path} trained {record['base_model']}, not {self.base_model}: resume the same model"
            )
        self.client = self._wait(
            self.service.create_training_client_from_state_with_optimizer(record["state_path"])
        )
        self.step = int(record["step"])

    def export_model(self, path: Path) -> None:
        """The final weights stay in the service: write ``tinker.json`` with their sampler path (what
        ``create_sampling_client(model_path=...)`` takes)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        sampler = self._wait(self.client.save_weights_for_sampler(f"final_{self.step:06d}")).path
        (path / "tinker.json").write_text(
            json.dumps({"base_model": self.base_model, "sampler_path": sampler, "step": self.step}, indent=1)
            + "\n"
        )

    def close(self) -> None:
        _close_session(self.service, self.opts.timeout_s)


def _padded(rows: list[list[float]]) -> torch.Tensor:
    """``[B, T]`` float32, each row zero-padded to the longest."""
    T = max(len(r) for r in rows)
    return torch.tensor([r + [0.0] * (T - len(r)) for r in rows], dtype=torch.float32)


def _is_local(name: str) -> bool:
    """A built-in rllm model or a model directory here: its tokenizer loads without the hub."""
    return name in BUILTIN_MODELS or Path(name).is_dir()


def _load_tokenizer(spec: str | None, base_model: str) -> Any:
    from transformers import AutoTokenizer  # only when sampling through a Tinker service

    source = spec or base_model
    return AutoTokenizer.from_pretrained(resolve_model(source) if source in BUILTIN_MODELS else source)


class TinkerEngine(EngineBase):
    """Samples through a Tinker service's sampling client: token ids in, token ids and logprobs out.
    ``sync_from`` takes the backend's sampler of the current weights; a call in flight keeps the sampler it
    started with (async training: the service keeps the paths, ``rllm serve tinker --max-samplers``)."""

    capabilities: ClassVar[EngineCapabilities] = EngineCapabilities(
        name="tinker",
        weight_transfer="service",
        # Whether the service's logprobs after top-p/top-k are renormalised is not documented: refused.
        truncation_logprobs_exact=False,
    )

    def __init__(
        self, service: Any, base_model: str, *, timeout_s: float = 600.0, tokenizer: str | None = None
    ) -> None:
        import tinker  # the optional SDK: only a tinker run needs it

        self._tinker = tinker
        self.service = service
        self.base_model = base_model
        self.timeout_s = timeout_s
        self.client = service.create_sampling_client(base_model=base_model).result(timeout=timeout_s)
        self.tokenizer = (
            _load_tokenizer(tokenizer, base_model) if tokenizer or _is_local(base_model) else None
        )
        if self.tokenizer is None:  # the SDK's way: the model's name on the hub
            self.tokenizer = self.client.get_tokenizer()
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.weight_version = 0
        self.stats: dict[str, float] = {"calls": 0, "generated_tokens": 0}

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        session_id: str | None = None,
        constraint: Any = None,
        adapter: str | None = None,
    ) -> list[Completion]:
        if constraint is not None:
            raise ValueError(
                "the tinker engine takes no grammar constraint (capabilities.constraints is false)"
            )
        self.check_adapter(adapter)
        if not prompt_ids:
            raise ValueError("generate() needs at least one prompt token")
        t = self._tinker.types
        client, version = self.client, self.weight_version
        sampling = t.SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k or -1,
            stop=list(params.stop) or None,
            seed=params.seed,
        )
        response = await asyncio.wait_for(
            client.sample(
                prompt=t.ModelInput.from_ints(list(prompt_ids)),
                num_samples=params.n,
                sampling_params=sampling,
            ),
            self.timeout_s,
        )
        out = []
        for seq in response.sequences:
            tokens = list(seq.tokens)
            logprobs = [float(x) for x in (seq.logprobs or [])]
            if len(logprobs) != len(tokens):
                raise RuntimeError(
                    f"tinker returned {len(logprobs)} logprobs for {len(tokens)} tokens: training needs one per token"
                )
            self.stats["generated_tokens"] += len(tokens)
            out.append(
                Completion(
                    prompt_ids=list(prompt_ids),
                    completion_ids=tokens,
                    logprobs=logprobs,
                    text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                    finish_reason="length" if str(seq.stop_reason).endswith("length") else "stop",
                    weight_version=version,
                )
            )
        self.stats["calls"] += 1
        return out

    def sync_from(self, backend: Any, *, version: int) -> None:
        self.client, self.weight_version = backend.sampler_for(version), version

    def close(self) -> None:
        _close_session(self.service, self.timeout_s)


def _close_session(service: Any, timeout_s: float) -> None:
    """End the client's session on the service (heartbeats stop, its resources are released)."""
    try:
        service.close("success").result(timeout=timeout_s)
    except Exception:  # closing must not hide the error that ended the run
        logger.warning("closing the tinker session failed", exc_info=True)


class TinkerEnginePlugin:
    """``inference.engine=tinker`` (the default with ``backend.name=tinker``)."""

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        if cfg.backend.name != "tinker":
            raise UnsupportedConfigError(
                "inference.engine=tinker samples the weights a Tinker service trains: set backend.name=tinker"
            )
        local_keys = sorted({"dtype", "max_batch_rows"} & cfg.inference.model_fields_set)
        if local_keys:
            raise UnsupportedConfigError(
                f"inference.{', inference.'.join(local_keys)} apply to the local engine; the Tinker service "
                "samples with its own: drop them"
            )

    @classmethod
    def build(cls, cfg: Any, model_path: str, *, run_dir: Path) -> TinkerEngine:
        opts = _options(cfg)
        return TinkerEngine(
            _service_client(opts),
            opts.base_model or model_path,
            timeout_s=opts.timeout_s,
            tokenizer=opts.tokenizer,
        )
