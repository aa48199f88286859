"""The config of the tiny training runs several tests make (the store's recording, resume after a kill,
refill): the tiny model on CPU, LoRA rank 4, 2 tasks x 4 attempts a step, one thread, metrics to JSONL
only, no plot, no eval. Each test adds what it is about as ``key=value`` overrides (later ones win)."""

from __future__ import annotations

from pathlib import Path

from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config


def tiny_run_config(model_dir: str | Path, run_dir: str | Path, name: str, *overrides: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            f"trainer.run_dir={run_dir}",
            f"trainer.name={name}",
            "trainer.threads=1",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "eval.before=false",
            "eval.after=false",
            "backend.device=cpu",
            "lora.rank=4",
            "lora.alpha=8",
            "rollout.batch_size=2",
            "rollout.group_size=4",
            *overrides,
        ],
    )
