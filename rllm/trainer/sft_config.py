"""The typed config of a supervised fine-tuning run: ``rllm sft [config.yaml] key=value ...``.

The sections ``rllm train`` has too mean the same here and are the same models (``model``, ``lora``,
``optim``, ``backend`` with its plug-in variants); ``trainer`` keeps the keys of ``rllm train``'s that apply
to a run without rollouts. ``data``, ``sft`` and ``eval`` are SFT's own. Unknown keys are refused with a
did-you-mean, as in ``rllm train``; ``rllm sft --help-config`` lists every key.

The backend is handed a :class:`~rllm.trainer.config.TrainConfig` made from these sections
(:meth:`SFTConfig.backend_config`) with ``algorithm.loss.name=cross_entropy``: SFT is that loss over the
same batches and the same backends as RL.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializeAsAny, ValidatorFunctionWrapHandler, field_validator, model_validator

from rllm.algorithms.losses import LossConfig
from rllm.trainer.config import (
    AlgorithmConfig,
    BackendConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    TrainerConfig,
    _Section,
    _validate_plugin_section,
    check_tracker_options,
)
from rllm.utils.config import unknown_name
from rllm.utils.metrics import SINKS

__all__ = ["SFTConfig", "SFTDataConfig", "SFTEvalConfig", "SFTSection", "SFTTrainerConfig"]

DataFormat = Literal["auto", "messages", "prompt_completion"]

_TRAINER_FIELDS = TrainerConfig.model_fields


class SFTDataConfig(_Section):
    train_file: str | None = Field(
        None,
        description="The training examples: a JSONL, JSON, CSV or parquet file of conversations "
        "(docs/sft.md for the formats). Required.",
    )
    test_file: str | None = Field(
        None,
        description="Held-out examples (same formats) for the eval loss; null = none, or data.test_fraction.",
    )
    test_fraction: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Hold out this fraction of data.train_file (a seeded split) for the eval loss when no "
        "data.test_file is given; 0 = no held-out set.",
    )
    format: DataFormat = Field(
        "auto",
        description="'messages' (a messages column of OpenAI chat messages, optional tools), "
        "'prompt_completion' (prompt with completion or response, strings or message lists), or 'auto' "
        "(picked per file from its columns).",
    )

    @model_validator(mode="after")
    def _one_held_out_source(self) -> SFTDataConfig:
        if self.test_file is not None and self.test_fraction > 0:
            raise ValueError(
                "data.test_file and data.test_fraction both name a held-out set: keep one of them"
            )
        return self


class SFTSection(_Section):
    batch_size: int = Field(
        8,
        gt=0,
        description="Training sequences per optimizer step (one per conversation, unless template drift "
        "splits one: docs/sft.md). The loss is the mean over every assistant token of the step's sequences.",
    )
    epochs: int = Field(1, gt=0, description="Passes over the training set when trainer.steps is not set.")
    shuffle: bool = Field(
        True, description="Shuffle the training rows each epoch (seeded by trainer.seed); false: file order."
    )
    max_length: int = Field(2048, gt=1, description="Most tokens per training sequence.")
    overlong: Literal["truncate", "drop"] = Field(
        "truncate",
        description="A sequence longer than sft.max_length is cut to it ('truncate'; dropped if no "
        "assistant token is left) or left out ('drop'); the count is logged either way.",
    )


class SFTEvalConfig(_Section):
    every_steps: int = Field(
        0, ge=0, description="Held-out loss every k optimizer steps (0 = only before/after)."
    )
    before: bool = Field(True, description="Measure the held-out loss of the initial model.")
    after: bool = Field(True, description="Measure the held-out loss of the final model.")


class SFTTrainerConfig(_Section):
    """``rllm train``'s ``trainer`` keys that apply to SFT (same meaning, same definitions)."""

    steps: int | None = Field(
        None, gt=0, description="Optimizer steps to run; null = sft.epochs passes over the training set."
    )
    seed: int = Field(0, description="Seed for the data order, the held-out split and initialisation.")
    run_dir: str = _TRAINER_FIELDS["run_dir"]
    name: str = Field("sft", description="Run name; the run lives in run_dir/name.")
    resume: bool = Field(
        False, description="Continue from the latest checkpoint in the run directory (same data order)."
    )
    checkpoint_every: int = _TRAINER_FIELDS["checkpoint_every"]
    keep_checkpoints: int = _TRAINER_FIELDS["keep_checkpoints"]
    loggers: list[str] = _TRAINER_FIELDS["loggers"]
    wandb_project: str = _TRAINER_FIELDS["wandb_project"]
    wandb_mode: Literal["offline", "online"] = _TRAINER_FIELDS["wandb_mode"]
    mlflow_tracking_uri: str | None = _TRAINER_FIELDS["mlflow_tracking_uri"]
    mlflow_experiment: str = _TRAINER_FIELDS["mlflow_experiment"]
    plot: bool = Field(
        True,
        description="Write metrics.png (train and held-out loss curves) at the end, if matplotlib is installed.",
    )
    store_enabled: bool = Field(
        True, description="Record the run (config, metrics, status) in the run store that `rllm ui` shows."
    )
    store: str | None = _TRAINER_FIELDS["store"]
    threads: int | None = _TRAINER_FIELDS["threads"]

    @field_validator("loggers")
    @classmethod
    def _known_loggers(cls, loggers: list[str]) -> list[str]:
        for name in loggers:
            if name not in SINKS:
                raise ValueError(unknown_name(SINKS.kind, name, SINKS))
        return loggers

    @model_validator(mode="after")
    def _tracker_options_need_their_logger(self) -> SFTTrainerConfig:
        check_tracker_options(self)
        return self


class SFTConfig(_Section):
    """Everything ``rllm sft`` reads."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    backend: SerializeAsAny[BackendConfig] = Field(default_factory=BackendConfig, validate_default=True)
    data: SFTDataConfig = Field(default_factory=SFTDataConfig)
    sft: SFTSection = Field(default_factory=SFTSection)
    eval: SFTEvalConfig = Field(default_factory=SFTEvalConfig)
    trainer: SFTTrainerConfig = Field(default_factory=SFTTrainerConfig)

    @field_validator("backend", mode="wrap")
    @classmethod
    def _backend_owns_its_options(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Validate the section with the options model of the backend it names (as ``rllm train`` does)."""
        return _validate_plugin_section(BackendConfig, value, handler)

    def backend_config(self, steps: int) -> TrainConfig:
        """The :class:`TrainConfig` a training backend is built from: these sections, ``steps`` optimizer
        steps (the LR schedule's length) and the ``cross_entropy`` loss."""
        t = self.trainer
        return TrainConfig.model_validate(
            {
                "model": self.model,
                "lora": self.lora,
                "optim": self.optim,
                "backend": self.backend,
                "algorithm": AlgorithmConfig(loss=LossConfig(name="cross_entropy")),
                "trainer": TrainerConfig(
                    steps=steps, seed=t.seed, run_dir=t.run_dir, name=t.name, threads=t.threads, loggers=[]
                ),
            }
        )
