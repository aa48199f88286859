"""``rllm train`` on any dataset: built-in, registered locally, or pulled; scored by the dataset's reward
with its answer instruction, and refused at start-up when the dataset, split or reward is not usable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllm.data.registry import DatasetRegistry
from rllm.data.schema import InvalidTaskError
from rllm.rewards.code import code_reward
from rllm.rewards.countdown import countdown_reward
from rllm.rewards.math import math_reward
from rllm.trainer.agent_trainer import AgentTrainer, check_config
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.trainer.workflows import build_workflow
from rllm.utils.config import load_config


@pytest.fixture
def datasets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "datasets"
    monkeypatch.setenv("RLLM_DATASETS_DIR", str(root))
    return root


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, list(overrides))


def _refusal(*overrides: str) -> str:
    with pytest.raises(UnsupportedConfigError) as info:
        check_config(_cfg(*overrides), LocalBackend.capabilities)
    return str(info.value)


ROWS = [
    {
        "task_id": f"m{i}",
        "question": f"What is {i} + {i}?",
        "ground_truth": f"\\frac{{{2 * i}}}{{1}}",
        "data_source": "mine",
        "metadata": {},
    }
    for i in range(6)
]


@pytest.mark.parametrize(
    ("task", "reward", "instruction"),
    [
        ("countdown", countdown_reward, None),  # its questions already ask for <answer> tags
        ("code_problems", code_reward, "```python"),
    ],
)
def test_builtin_datasets_bring_their_reward_and_instruction(
    datasets_dir: Path, task, reward, instruction
) -> None:
    workflow = build_workflow(_cfg(f"data.task={task}"))
    assert workflow.reward_fn is reward
    assert (workflow.instruction is None) if instruction is None else (instruction in workflow.instruction)
    assert build_workflow(_cfg(f"data.task={task}", "data.instruction=Be brief.")).instruction == "Be brief."
    assert build_workflow(_cfg(f"data.task={task}", "data.instruction=''")).instruction is None


def test_a_registered_dataset_trains_with_its_reward(
    datasets_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    DatasetRegistry().register("mine", ROWS, "train", reward="math")
    DatasetRegistry().register("mine", ROWS[:2], "test", reward="math")
    cfg = _cfg(
        "data.task=mine",
        f"model.path={tiny_model_dir}",
        "backend.device=cpu",
        "backend.autocast=none",
        "inference.dtype=float32",
        "trainer.steps=1",
        "trainer.threads=1",
        "rollout.batch_size=2",
        "rollout.group_size=2",
        "rollout.max_tokens=8",
        "eval.max_tokens=8",
        "eval.every_steps=0",
        f"trainer.run_dir={tmp_path / 'runs'}",
        "trainer.loggers=[jsonl]",
        "trainer.plot=false",
    )
    trainer = AgentTrainer(cfg)
    assert [t["task_id"] for t in trainer.test_tasks] == ["m0", "m1"] and len(trainer.train_tasks) == 6
    assert trainer.workflow.reward_fn is math_reward and "\\boxed{}" in trainer.workflow.instruction
    assert "\\boxed{}" in trainer.workflow.messages(ROWS[0])[-1]["content"]
    result = trainer.train()
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("reward/mean" in r for r in records)


def test_unusable_datasets_are_refused_at_start_up(datasets_dir: Path) -> None:
    assert "rllm dataset pull gsm8k" in _refusal("data.task=gsm8k")
    assert "is not a known dataset" in _refusal("data.task=nope")
    assert "has splits train, test" in _refusal("data.test_split=validation")
    assert "data.reward='nope' is not a reward" in _refusal("data.reward=nope")
    DatasetRegistry().register("unscored", ROWS, "train")
    DatasetRegistry().register("unscored", ROWS, "test")
    assert "names no reward: set data.reward" in _refusal("data.task=unscored")
    check_config(_cfg("data.task=unscored", "data.reward=math"), LocalBackend.capabilities)


def test_data_reward_checks_the_rows_before_the_run_starts(datasets_dir: Path) -> None:
    # Registered for exact_match (an empty answer is a valid string there), trained with data.reward=math:
    # the row math cannot grade is refused when the trainer loads the split, naming the row.
    rows = [*ROWS[:2], {**ROWS[2], "task_id": "empty", "ground_truth": ["", " "]}]
    DatasetRegistry().register("mine", rows, "train", reward="exact_match")
    with pytest.raises(InvalidTaskError, match=r"row 2 \(task_id 'empty'\).*'math' reward"):
        AgentTrainer(_cfg("data.task=mine", "data.test_split=train", "data.reward=math"))
