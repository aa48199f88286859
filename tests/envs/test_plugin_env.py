"""A new environment is one file and one registry call: the toy "guess the number" environment below
(its env, agent, options and task family) is registered with ``register_env`` and then trained by
``AgentTrainer`` and evaluated by ``rllm eval`` with no other change anywhere; its options are the
``workflow.*`` keys of the run, and names and options it does not have are refused at config time."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from rllm.agents.base import Agent, InvalidAction
from rllm.cli.main import main
from rllm.envs import Env, EnvOptions, EnvStep, register_env, unregister_env
from rllm.eval.runner import load_results
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.utils.config import ConfigError, describe_config, dump_config, load_config

# ------------------------------------------------------------------- the environment: this file only


class NumberOptions(EnvOptions):
    """What a run playing ``hidden_number`` may set, besides ``max_turns`` / ``invalid_action_reward``."""

    hints: bool = Field(True, description="say 'higher' or 'lower' after a wrong guess.")


PLAYED_WITH: list[NumberOptions] = []  # the options each episode's environment was built with


class NumberEnv(Env):
    """Guess a hidden digit 1-9: reward 1 for the digit, which ends the episode."""

    def __init__(self, secret: int, options: NumberOptions) -> None:
        self.secret, self.hints = secret, options.hints
        PLAYED_WITH.append(options)

    def reset(self) -> tuple[str, dict[str, Any]]:
        return "I am thinking of a digit from 1 to 9. Which is it?", {}

    def step(self, action: int) -> EnvStep:
        if action == self.secret:
            return EnvStep(observation="Right!", reward=1.0, done=True, info={"success": True})
        hint = ("Higher." if action < self.secret else "Lower.") if self.hints else "No."
        return EnvStep(observation=f"Not {action}. {hint}", info={"success": False})


class NumberAgent(Agent):
    def observe(self, observation: Any, reward: float, done: bool, info: dict[str, Any]) -> None:
        self.messages.append({"role": "user", "content": f"{observation} Answer with one digit."})

    def act(self, reply: str) -> int | InvalidAction:
        self.messages.append({"role": "assistant", "content": reply})
        digit = re.search(r"[1-9]", reply)
        return int(digit.group()) if digit else InvalidAction("Answer with one digit from 1 to 9.")


def number_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"{split}-{seed}")
    return [
        {
            "task_id": f"hidden_number-{split}-{i}",
            "question": "Guess the hidden digit.",
            "ground_truth": secret,
            "data_source": "tests/hidden_number",
            "metadata": {"secret": secret},
        }
        for i, secret in enumerate(rng.randint(1, 9) for _ in range(n))
    ]


@pytest.fixture
def hidden_number() -> Iterator[None]:
    register_env(
        "hidden_number",
        env=lambda task, options: NumberEnv(task["metadata"]["secret"], options),
        agent=lambda options: NumberAgent(),
        tasks=number_tasks,
        options=NumberOptions,
        description="guess a hidden digit (a test's toy environment)",
        eval_options={"max_turns": 2},
    )
    PLAYED_WITH.clear()
    yield
    unregister_env("hidden_number")


# ----------------------------------------------------------------------------------------------- tests


def _config(model_dir: Path, run_dir: Path, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            "workflow.name=hidden_number",
            "data.task=hidden_number",
            f"model.path={model_dir}",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            "trainer.steps=2",
            "trainer.threads=1",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=4",
            "data.train_size=8",
            "data.test_size=2",
            "eval.every_steps=0",
            "eval.max_tokens=4",
            f"trainer.run_dir={run_dir}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            *extra,
        ],
    )


def test_a_registered_environment_trains_with_its_own_options(
    hidden_number: None, tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny_model_dir, tmp_path, "workflow.max_turns=3", "workflow.hints=false")
    result = AgentTrainer(cfg).train()
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward/mean" in r]
    assert len(steps) == 2 and all(r["episodes/failed"] == 0 for r in steps)
    assert all(1 <= r["env/turns"] <= 3 for r in steps)
    assert PLAYED_WITH and all(o.hints is False and o.max_turns == 3 for o in PLAYED_WITH)


def test_rllm_eval_plays_a_registered_environment(
    hidden_number: None, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "number.jsonl"
    args = ["eval", "hidden_number", "--model", str(tiny_model_dir), "--max-examples", "3"]
    args += ["--max-tokens", "4", "--device", "cpu", "--output", str(out), "--no-store"]
    assert main(args) == 0, capsys.readouterr().err
    rows = load_results(out)
    assert len(rows) == 3
    for row in rows:  # eval_options: at most 2 turns; the environment's success is the reward
        assert 1 <= len(row["info"]["moves"]) <= 2 and row["reward"] == float(row["is_correct"])
    code = main([*args[:4], "--history-turns", "1", "--output", str(tmp_path / "x.jsonl"), "--no-store"])
    err = capsys.readouterr().err
    assert code == 2 and "environment 'hidden_number' has no option 'history_turns'" in err


def test_a_misspelt_environment_name_is_refused_with_did_you_mean(hidden_number: None) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown workflow 'hiden_number' — did you mean 'hidden_number'\?"
    ):
        load_config(TrainConfig, None, ["workflow.name=hiden_number", "data.task=hidden_number"])


def test_options_of_another_workflow_are_refused_in_one_line(hidden_number: None) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(TrainConfig, None, ["workflow.name=hidden_number", "workflow.history_turns=0"])
    message = str(caught.value)
    assert message == (
        "unknown config key 'workflow.history_turns': workflow.name=hidden_number has no such option, "
        "it belongs to workflow.name=frozenlake"
    )
    with pytest.raises(ConfigError, match="workflow.name=single_turn has no such option, it belongs to "):
        load_config(TrainConfig, None, ["workflow.hints=false"])
    with pytest.raises(ConfigError, match=r"config key 'workflow.hints' expects a boolean"):
        load_config(TrainConfig, None, ["workflow.name=hidden_number", "workflow.hints=maybe"])


def test_an_environment_is_played_on_its_own_tasks(
    hidden_number: None, tiny_model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(UnsupportedConfigError, match="set data.task=hidden_number"):
        AgentTrainer(_config(tiny_model_dir, tmp_path, "data.task=larger"))
    with pytest.raises(UnsupportedConfigError, match="set workflow.name=hidden_number"):
        AgentTrainer(_config(tiny_model_dir, tmp_path, "workflow.name=single_turn"))


def test_help_config_describes_the_environment_options(hidden_number: None) -> None:
    rows = [line for line in describe_config(TrainConfig).splitlines() if "workflow.hints" in line]
    assert len(rows) == 1 and "(workflow.name=hidden_number) say 'higher' or 'lower'" in rows[0]


def test_the_config_snapshot_of_an_environment_run_loads_back_equal(
    hidden_number: None, tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = _config(tiny_model_dir, tmp_path, "workflow.hints=false")
    loaded = load_config(TrainConfig, dump_config(cfg, tmp_path / "config.yaml"))
    assert loaded == cfg and loaded.workflow.hints is False
