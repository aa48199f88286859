"""The agent examples' configs (tool agent, solver–judge, FrozenLake) train end to end through
``AgentTrainer`` — here on the tiny model for two steps, so every piece of each loop runs: the workflow,
its metrics, per-role groups, per-step credit, merged turns, the optimizer step and the held-out eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.utils.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def _config(example: str, model_dir: Path, run_dir: Path, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        REPO / "examples" / example / "config.yaml",
        [
            f"model.path={model_dir}",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            "trainer.steps=2",
            "trainer.threads=1",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "data.train_size=8",
            "data.test_size=2",
            "eval.every_steps=0",
            f"trainer.run_dir={run_dir}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            *extra,
        ],
    )


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("example", "keys"),
    [
        ("tool_agent", {"tools/calls", "tools/errors/malformed", "tools/used", "agent/turns"}),
        ("finance_agent", {"tools/calls", "tools/errors/invalid_arguments", "tools/used", "agent/turns"}),
        ("solver_judge", {"solver/accuracy", "judge/accuracy", "judge/valid_pick"}),
        ("frozenlake", {"env/turns", "agent/invalid_actions"}),
        ("coordinator", {"coordinator/accuracy", "coordinator/faithful", "parts/accuracy"}),
    ],
)
def test_example_config_trains_end_to_end(
    example: str, keys: set[str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = _config(example, tiny_model_dir, tmp_path, "rollout.max_tokens=8", "eval.max_tokens=8")
    result = AgentTrainer(cfg).train()
    records = _records(result.run_dir)
    steps = [r for r in records if "reward/mean" in r]
    assert len(steps) == 2
    for r in steps:
        assert keys <= set(r), sorted(keys - set(r))
        assert r["episodes/failed"] == 0
    assert {f"eval/{k}" for k in keys} <= set(records[-1])  # the held-out eval reports them too
    # One model directory, or one per adapter when the example gives each role its own (roles).
    for model_dir in list(result.adapter_models.values()) or [result.final_model_dir]:
        assert (model_dir / "config.json").exists()


def test_frozenlake_workflow_and_task_go_together(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedConfigError, match="frozenlake"):
        AgentTrainer(_config("frozenlake", tiny_model_dir, tmp_path, "data.task=larger"))
    with pytest.raises(
        ConfigError,
        match="workflow.name=tool_agent has no such option, it belongs to workflow.name=frozenlake",
    ):
        AgentTrainer(_config("tool_agent", tiny_model_dir, tmp_path, "workflow.history_turns=0"))
    with pytest.raises(UnsupportedConfigError, match="per_step"):
        AgentTrainer(_config("tool_agent", tiny_model_dir, tmp_path, "algorithm.gamma=0.9"))
    with pytest.raises(UnsupportedConfigError, match="step_weight weighs per_state"):
        AgentTrainer(_config("tool_agent", tiny_model_dir, tmp_path, "algorithm.step_weight=0.5"))
    with pytest.raises(UnsupportedConfigError, match="drop one"):
        AgentTrainer(_config("tool_agent", tiny_model_dir, tmp_path), workflow=lambda task, ctx: 1.0)
    with pytest.raises(UnsupportedConfigError, match="format_regex"):
        AgentTrainer(_config("tool_agent", tiny_model_dir, tmp_path, "algorithm.shaping.format_regex=(("))
