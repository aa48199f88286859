"""``rllm sft`` on ``backend.name=distributed``: two FSDP2 ranks give the per-step loss of the local backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rllm.trainer import SFTConfig, SFTTrainer
from rllm.utils.config import load_config

CHATS = [
    [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    for q, a in [
        ("Capital of France?", "Paris."),
        ("2 + 2?", "4, since two and two make four."),
        ("Color of the sky?", "Blue."),
        ("Say hi.", "Hello there, nice to meet you!"),
        ("Name a fruit.", "Apple."),
    ]
]


def _losses(tiny_model_dir: Path, tmp_path: Path, name: str, *backend: str) -> list[float]:
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CHATS))
    cfg = load_config(
        SFTConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"data.train_file={data}",
            f"trainer.run_dir={tmp_path}",
            f"trainer.name={name}",
            "trainer.steps=3",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "trainer.store_enabled=false",
            "sft.batch_size=4",  # the second step's batch is one row from epoch 1 short: uneven shards
            "backend.device=cpu",
            "backend.autocast=none",
            "backend.micro_batch_size=2",
            "lora.rank=4",
            "lora.alpha=8",
            "optim.lr=0.01",
            *backend,
        ],
    )
    SFTTrainer(cfg).train()
    lines: list[dict[str, Any]] = [
        json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    ]
    return [x["train/loss"] for x in lines if "train/loss" in x]


def test_two_ranks_give_the_local_per_step_loss(
    ray_cluster: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    local = _losses(tiny_model_dir, tmp_path, "local")
    dist = _losses(
        tiny_model_dir,
        tmp_path,
        "dist",
        "backend.name=distributed",
        "backend.distributed.world_size=2",
        "backend.distributed.startup_timeout_s=120",
    )
    assert len(local) == len(dist) == 3
    assert local[-1] < local[0]  # it learns
    assert dist == pytest.approx(local, rel=1e-4)
