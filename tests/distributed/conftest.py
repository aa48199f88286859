"""Shared pieces of the distributed-backend tests: one local Ray cluster per test module (starting one
costs seconds on this machine), the tiny model's config, and batches whose groups share their prompts.

Every test here runs real Ray actors and a real gloo process group on this machine's CPUs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ci_support import require_import

from rllm.trainer.config import TrainConfig
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import load_config

PAD_ID = 2
TESTS = Path(__file__).resolve().parents[1]
DIST = (
    "backend.name=distributed",
    "backend.distributed.world_size=2",
    "backend.distributed.startup_timeout_s=120",
)


def run_resume_job(model: Path | str, tmp_path: Path, *overrides: str) -> Path:
    """Run the resume job (tests/resume_job.py) on 2 gloo ranks in a child process with ``overrides``;
    fail with the end of its log unless it exits 0. Returns the run directory."""
    runs = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(TESTS.parent)}
    log = tmp_path / "job.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, str(TESTS / "resume_job.py"), str(model), str(runs), *DIST, *overrides],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=600,
            check=False,
        )
    assert proc.returncode == 0, log.read_text()[-4000:]
    return runs / "job"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/distributed/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.distributed)


def require_ray() -> Any:
    """The ``ray`` module. Without it these tests skip on a developer's machine, but fail under CI, whose
    distributed tier installs it: a tier that skips itself green would hide a broken install."""
    return require_import("ray", "bash scripts/setup.sh distributed")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray cluster for this module's backends (which reuse the connection and leave it up)."""
    ray = require_ray()
    ray.init(num_cpus=6, include_dashboard=False, logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()


def make_config(model_dir: Path, *overrides: str) -> TrainConfig:
    base = [
        f"model.path={model_dir}",
        "backend.device=cpu",
        "backend.autocast=none",
        "rollout.temperature=1.0",
        "lora.rank=4",
        "lora.alpha=8",
        "optim.lr=0.01",
        "optim.grad_clip=null",
        "trainer.steps=10",
        "backend.name=distributed",
        "backend.distributed.world_size=2",
        "backend.distributed.startup_timeout_s=120",
    ]
    return load_config(TrainConfig, None, base + list(overrides))


def make_batch(seed: int, groups: int = 4, group_size: int = 2) -> TrainBatch:
    """``groups`` prompts with ``group_size`` answers each (so the shared-prefix forward runs), of
    different lengths, with a masked-out hole and +-1 advantages."""
    gen = torch.Generator().manual_seed(seed)
    sequences = []
    for g in range(groups):
        prompt = torch.randint(
            3, 49152, (int(torch.randint(2, 6, (1,), generator=gen)),), generator=gen
        ).tolist()
        for j in range(group_size):
            n = int(torch.randint(1, 7 + 4 * (g == 0), (1,), generator=gen))
            ids = prompt + torch.randint(3, 49152, (n,), generator=gen).tolist()
            mask = [0] * len(prompt) + [1] * n
            if n > 2:
                mask[len(prompt) + 1] = 0  # a token spliced in by the environment
            adv = 1.0 if j % 2 == 0 else -1.0
            sequences.append(
                TrainSequence(
                    input_ids=ids,
                    loss_mask=mask,
                    rollout_logprobs=[-10.8 * m for m in mask],
                    advantages=[adv * m for m in mask],
                    group_id=f"g{g}",
                )
            )
    return TrainBatch(sequences=sequences)
