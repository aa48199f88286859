"""A new training backend and a new inference engine are each one file and one register call: the plain-SGD
backend and the recording engine below are defined here, registered with ``BACKENDS.register`` and
``ENGINES.register``, and ``AgentTrainer`` trains with them (``backend.name=sgd inference.engine=recording``)
with no change anywhere else; the backend's options are the config's ``backend.sgd.*`` keys, its
capabilities are what the start-up checks ask, and names and keys it does not have are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import load_file, save_file
from test_learning import TASKS, _config, answer_workflow, make_tiny_vocab_model
from transformers import AutoModelForCausalLM

from rllm.algorithms.losses import LossConfig, aggregate_loss, compute_policy_loss
from rllm.inference.base import EngineCapabilities
from rllm.inference.local import LocalEngine
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends import BACKENDS
from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend, UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.trainer.engines import ENGINES
from rllm.types import TrainBatch
from rllm.utils.config import ConfigError, config_keys, load_config

# ------------------------------------------------------------------------- the backend: this file only


class SGDOptions(BaseModel):
    """``backend.sgd.*``."""

    model_config = ConfigDict(extra="forbid")

    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="SGD momentum.")


class SGDBackend(TrainingBackend):
    """Full fine-tuning with plain SGD, float32, one pass over the whole batch."""

    capabilities = BackendCapabilities(
        name="sgd",
        full_finetune=True,
        lora=False,
        losses=frozenset({"ppo", "is"}),
        kl_to_reference=False,
        recompute_old_logprobs=False,
        bf16_autocast=False,
        devices=frozenset({"cpu"}),
        share_prefix=False,
        weight_transfer=frozenset({"tensors"}),
        backend_keys=frozenset({"device", "autocast"}),
    )
    steps_taken: ClassVar[list[int]] = []

    def __init__(self, cfg: TrainConfig, model_path: str, pad_id: int) -> None:
        self.cfg, self.pad_id, self.lora, self.step = cfg, pad_id, False, 0
        self.options: SGDOptions = cfg.backend.options  # type: ignore[assignment]
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=cfg.optim.lr * 2, momentum=self.options.momentum
        )

    def _logprobs(self, batch: TrainBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        T = max(len(s.input_ids) for s in batch.sequences)

        def pad(field: str, fill: float) -> torch.Tensor:
            rows = [getattr(s, field) + [fill] * (T - len(s.input_ids)) for s in batch.sequences]
            return torch.tensor(rows)

        ids = pad("input_ids", self.pad_id).long()
        logits = self.model(ids).logits[:, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        cols = {k: pad(k, 0)[:, 1:].float() for k in ("loss_mask", "advantages", "rollout_logprobs")}
        return lp, cols

    def forward_backward(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
    ) -> dict[str, float]:
        lp, c = self._logprobs(batch)
        loss_BT, metrics = compute_policy_loss(
            lp, c["rollout_logprobs"], c["advantages"], c["loss_mask"], loss
        )
        total = aggregate_loss(
            loss_BT,
            c["loss_mask"],
            loss.agg,
            num_tokens=float(batch.loss_norm_tokens or c["loss_mask"].sum()),
            num_sequences=float(batch.loss_norm_sequences or len(batch.sequences)),
            norm_tokens=loss.agg_norm_tokens,
        )
        total.backward()
        return {"train/loss": float(total.detach()), **{f"train/{k}": float(v) for k, v in metrics.items()}}

    @torch.no_grad()
    def compute_logprobs(self, batch: TrainBatch, *, reference: bool = False) -> list[list[float]]:
        lp, _ = self._logprobs(batch)
        return [[0.0, *row[: len(s.input_ids) - 1].tolist()] for row, s in zip(lp, batch.sequences)]

    def optim_step(self) -> dict[str, float]:
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.step += 1
        type(self).steps_taken.append(self.step)
        return {"train/lr": self.optimizer.param_groups[0]["lr"]}

    def skip_step(self) -> None:
        self.step += 1

    def named_merged_weights(self, *, changed_only: bool = False) -> list[tuple[str, Any]]:
        return [(n, p.detach()) for n, p in self.model.named_parameters()]

    def save_state(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        save_file(
            {n: p.detach().contiguous() for n, p in self.model.named_parameters()}, path / "w.safetensors"
        )
        (path / "step.json").write_text(json.dumps(self.step))

    def load_state(self, path: Path) -> None:
        self.model.load_state_dict(load_file(path / "w.safetensors"), strict=False)
        self.step = json.loads((path / "step.json").read_text())

    def export_model(self, path: Path) -> None:
        self.model.save_pretrained(path)


# ------------------------------------------------------------------------- the engine: this file only


class RecordingEngine(LocalEngine):
    """The local engine, recording every weight version it was given."""

    capabilities = EngineCapabilities(name="recording", weight_transfer="tensors")
    versions: ClassVar[list[int]] = []

    def load_weights(self, named_tensors: Any, version: int | None = None) -> None:
        super().load_weights(named_tensors, version=version)
        type(self).versions.append(self.weight_version)


class RecordingEnginePlugin:
    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        if cfg.inference.dtype != "float32":
            raise UnsupportedConfigError("inference.engine=recording samples in float32: set inference.dtype")

    @classmethod
    def build(cls, cfg: TrainConfig, model_path: str, *, run_dir: Path) -> RecordingEngine:
        return RecordingEngine.from_pretrained(
            model_path, device="cpu", dtype="float32", seed=cfg.trainer.seed
        )


# ------------------------------------------------------------------------- the tests


@pytest.fixture
def plugins() -> Iterator[None]:
    BACKENDS.register("sgd", SGDBackend, options=SGDOptions)
    ENGINES.register("recording", RecordingEnginePlugin, capabilities=RecordingEngine.capabilities)
    try:
        yield
    finally:
        BACKENDS.unregister("sgd")
        ENGINES.unregister("recording")


def _sgd_config(model_dir: Path, run_dir: Path, steps: int, *extra: str) -> TrainConfig:
    """test_learning's run (same task, model and rollout), on this file's backend and engine."""
    base = _config(model_dir, run_dir, steps)
    return load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            "lora.enabled=false",
            "backend.name=sgd",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.engine=recording",
            "inference.dtype=float32",
            "algorithm.loss.name=is",
            f"optim.lr={base.optim.lr}",
            f"trainer.steps={steps}",
            "trainer.threads=1",
            f"rollout.batch_size={base.rollout.batch_size}",
            f"rollout.group_size={base.rollout.group_size}",
            "rollout.max_tokens=1",
            "eval.every_steps=0",
            "eval.max_tokens=1",
            f"trainer.run_dir={run_dir}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            *extra,
        ],
    )


def test_a_backend_and_an_engine_defined_in_a_test_file_train(plugins: None, tmp_path: Path) -> None:
    model_dir = make_tiny_vocab_model(tmp_path / "model")
    steps = 25
    cfg = _sgd_config(model_dir, tmp_path / "runs", steps, "backend.sgd.momentum=0.5")
    assert isinstance(cfg.backend.options, SGDOptions) and cfg.backend.options.momentum == 0.5
    SGDBackend.steps_taken.clear()
    RecordingEngine.versions.clear()
    result = AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS).train()
    rewards = [
        json.loads(line)["reward/mean"]
        for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()
        if "reward/mean" in line
    ]
    print("\nsgd plug-in: " + " ".join(f"{r:.2f}" for r in rewards))
    # The plug-in did the updates (a step whose groups all tied is skipped), and the engine took each.
    assert len(SGDBackend.steps_taken) >= steps - 3 and SGDBackend.steps_taken[-1] <= steps
    assert set(SGDBackend.steps_taken) <= set(RecordingEngine.versions)
    assert rewards[0] < 0.25 and sum(rewards[-3:]) / 3 >= 0.8 and result.final_accuracy >= 0.75


def test_a_plugins_keys_and_capabilities_are_what_the_config_and_checks_ask(
    plugins: None, tmp_path: Path
) -> None:
    keys = config_keys(TrainConfig)
    assert "backend.sgd.momentum" in keys  # --help-config lists the plug-in's own options
    with pytest.raises(ConfigError, match="unknown config key 'backend.sgd.nesterov'"):
        load_config(TrainConfig, None, ["backend.name=sgd", "backend.sgd.nesterov=true"])
    with pytest.raises(ConfigError, match="it belongs to backend.name=sgd"):
        load_config(TrainConfig, None, ["backend.sgd.momentum=0.9"])
    with pytest.raises(ConfigError, match="unknown backend 'sdg' — did you mean 'sgd'"):
        load_config(TrainConfig, None, ["backend.name=sdg"])
    model_dir = make_tiny_vocab_model(tmp_path / "model")

    def refused(*extra: str) -> str:
        cfg = _sgd_config(model_dir, tmp_path / "runs", 1, *extra)
        with pytest.raises(UnsupportedConfigError) as info:
            AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS)
        return str(info.value)

    assert "backend 'sgd' cannot train LoRA" in refused("lora.enabled=true")
    assert "backend 'sgd' has no loss 'cispo'" in refused("algorithm.loss.name=cispo")
    assert "does not read backend.micro_batch_size" in refused("backend.micro_batch_size=4")
    assert "samples in float32" in refused("inference.dtype=bfloat16")  # the engine plug-in's own check
    # A pair that cannot hand weights over: the vLLM pool reads files, this backend gives tensors only.
    assert "hands weights over as tensors, and inference.engine=vllm takes files" in refused(
        "inference.engine=vllm", "inference.dtype=auto"
    )
