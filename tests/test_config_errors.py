"""Configs the trainer refuses at start-up: one line each, naming the key to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.trainer.agent_trainer import AgentTrainer, check_config
from rllm.trainer.backends.base import BackendCapabilities, UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.checkpoint import LOOP_STATE
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

TASKS = [{"task_id": "t", "question": "1 + 1?", "ground_truth": "2"}]


def _refusal(*overrides: str, capabilities: BackendCapabilities = LocalBackend.capabilities) -> str:
    cfg = load_config(TrainConfig, None, list(overrides))
    with pytest.raises(UnsupportedConfigError) as info:
        check_config(cfg, capabilities)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        (["algorithm.loss.tis_cap=2.0"], "backend.old_logprobs=recompute"),
        (
            ["lora.dropout=0.1", "backend.gradient_checkpointing=true"],
            "set lora.dropout=0 or backend.gradient_checkpointing=false",
        ),
        (["rollout.group_size=1"], "set rollout.group_size >= 2"),
        (["rollout.group_size=1", "algorithm.advantage=rloo"], "set rollout.group_size >= 2"),
        (
            ["rollout.group_size=1", "algorithm.advantage={default: reinforce, solver: dr_grpo}"],
            "set rollout.group_size >= 2",
        ),
        (["rollout.temperature=0"], "rollout.temperature"),
        (
            ["rollout.group_size=1", "algorithm.advantage=reinforce", "algorithm.filters.refill_rounds=2"],
            "set rollout.group_size >= 2 or algorithm.filters.refill_rounds=0",
        ),
    ],
)
def test_refused_configs_name_the_fix(overrides: list[str], fix: str) -> None:
    assert fix in _refusal(*overrides)


def test_accepted_configs() -> None:
    for overrides in (
        [],
        ["algorithm.loss.tis_cap=2.0", "backend.old_logprobs=recompute"],
        ["lora.dropout=0.1"],
        [
            "lora.dropout=0.1",
            "lora.enabled=false",
            "backend.gradient_checkpointing=true",
            "backend.share_prefix=false",
        ],
        ["rollout.group_size=1", "algorithm.advantage=reinforce"],
    ):
        check_config(load_config(TrainConfig, None, overrides), LocalBackend.capabilities)


def test_refusals_for_what_a_backend_cannot_do() -> None:
    lora_only = LocalBackend.capabilities.model_copy(
        update={
            "name": "remote",
            "full_finetune": False,
            "kl_to_reference": False,
            "losses": frozenset({"ppo"}),
        }
    )
    assert "set lora.enabled=true" in _refusal("lora.enabled=false", capabilities=lora_only)
    assert "set algorithm.loss.kl_coef=0" in _refusal("algorithm.loss.kl_coef=0.1", capabilities=lora_only)
    assert "choose one of ['ppo']" in _refusal("algorithm.loss.name=gspo", capabilities=lora_only)


def test_trainer_refuses_at_construction(tiny_model_dir: Path) -> None:
    cfg = load_config(TrainConfig, None, [f"model.path={tiny_model_dir}", "rollout.temperature=0"])
    with pytest.raises(UnsupportedConfigError, match="rollout.temperature"):
        AgentTrainer(cfg, train_tasks=TASKS, test_tasks=TASKS)


def test_existing_checkpoints_need_resume(tiny_model_dir: Path, tmp_path: Path) -> None:
    checkpoints = tmp_path / "runs" / "old" / "checkpoints"
    (checkpoints / "step_000002").mkdir(parents=True)
    (checkpoints / "step_000002" / LOOP_STATE).write_text('{"step": 2, "eval_history": []}')
    (checkpoints / "latest").write_text("step_000002")
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"trainer.run_dir={tmp_path / 'runs'}",
            "trainer.name=old",
        ],
    )
    trainer = AgentTrainer(cfg, train_tasks=TASKS, test_tasks=TASKS)
    with pytest.raises(UnsupportedConfigError) as info:
        trainer.train()  # refused before any model loads
    message = str(info.value)
    assert "\n" not in message
    assert "trainer.resume=true" in message and "trainer.name" in message
    assert not hasattr(trainer, "backend")


def test_loss_norm_sampled_counts_skipped_zero_variance_rows(tiny_model_dir) -> None:
    """algorithm.loss_norm=sampled hands the backend normalisers that include the skipped rows; kept does not."""
    from rllm.trainer.agent_trainer import AgentTrainer
    from rllm.types import Outcome

    async def flow(
        task, ctx
    ):  # task "flat" always scores 1 (a zero-variance group), "mixed" depends on the sample
        reply = await ctx.chat([{"role": "user", "content": task["question"]}])
        return Outcome(reward=1.0 if task["task_id"] == "flat" else float(reply.completion_ids[0] % 2))

    tasks = [{"task_id": "flat", "question": "a"}, {"task_id": "mixed", "question": "b"}]
    seen = {}
    for norm in ("kept", "sampled"):
        cfg = load_config(
            TrainConfig,
            None,
            [
                f"model.path={tiny_model_dir}",
                "rollout.batch_size=2",
                "rollout.group_size=8",
                "rollout.max_tokens=6",
                "trainer.steps=1",
                "eval.before=false",
                "eval.after=false",
                "trainer.loggers=[jsonl]",
                f"algorithm.loss_norm={norm}",
                "trainer.threads=1",
            ],
        )
        trainer = AgentTrainer(cfg, workflow=flow, train_tasks=tasks, test_tasks=tasks)
        trainer._setup()
        captured = {}
        original = trainer.backend.forward_backward

        def spy(batch, loss, _original=original, _captured=captured, **kw):
            _captured["batch"] = batch
            return _original(batch, loss, **kw)

        trainer.backend.forward_backward = spy
        try:
            metrics = trainer.train_step(0)
        finally:
            trainer._close()  # the engine's thread and the run's loop, as train() closes them
        seen[norm] = (captured.get("batch"), metrics)
    kept_batch, _ = seen["kept"]
    sampled_batch, sampled_metrics = seen["sampled"]
    if kept_batch is None or sampled_batch is None:
        pytest.skip("the 'mixed' group happened to have no variance")
    assert kept_batch.loss_norm_tokens is None and kept_batch.loss_norm_sequences is None
    assert sampled_metrics["filter/zero_variance_sequences"] == 8.0
    assert sampled_batch.loss_norm_sequences == len(sampled_batch.sequences) + 8.0
    assert sampled_batch.loss_norm_tokens == (
        sampled_batch.num_response_tokens + sampled_metrics["filter/zero_variance_response_tokens"]
    )
