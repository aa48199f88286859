"""The monitors in real training runs on tiny models: an environment whose reward rule changes mid-run
sets off the drift alert after the change and not before (and, opted in, the rollout temperature follows
it, in the sampler and in the loss alike); a reward that pays for a keyword is caught by the hacking
detector (held-out accuracy and a second reward disagree, every task gets the same answer); both alerts are
in the run store, where `rllm ui` shows them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_learning import TOKEN_ID, learning_overrides, make_tiny_vocab_model

from rllm.agents.base import Agent
from rllm.cli.main import main
from rllm.envs import Env, EnvStep, register_env, unregister_env
from rllm.rewards.registry import register_reward, unregister_reward
from rllm.runner.context import RolloutContext
from rllm.store import default_store_path
from rllm.store.reader import StoreReader
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.types import Outcome
from rllm.utils.config import load_config

FLIP_AFTER_STEPS, BATCH, GROUP = 4, 2, 4
BUILT: list[int] = []  # one entry per episode's environment, in order


class ShiftingEnv(Env):
    """One reply per episode, scored by a rule that changes once the run has played ``FLIP_AFTER_STEPS``
    steps' worth of episodes: at first a reply earns 0-0.2, afterwards 0.8-1 (by its length mod 3)."""

    def __init__(self) -> None:
        BUILT.append(1)
        self.flipped = len(BUILT) > FLIP_AFTER_STEPS * BATCH * GROUP

    def reset(self) -> tuple[str, dict[str, Any]]:
        return "Say something.", {}

    def step(self, action: str) -> EnvStep:
        bonus = 0.1 * (len(action) % 3)
        return EnvStep(observation="", reward=1.0 - bonus if self.flipped else bonus, done=True)


class EchoAgent(Agent):
    def observe(self, observation: Any, reward: float, done: bool, info: dict[str, Any]) -> None:
        self.messages.append({"role": "user", "content": observation})

    def act(self, reply: str) -> str:
        self.messages.append({"role": "assistant", "content": reply})
        return reply


def shifting_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return [
        {
            "task_id": f"shift-{split}-{i}",
            "question": "Say something.",
            "ground_truth": None,
            "data_source": "tests/shift",
        }
        for i in range(n)
    ]


@pytest.fixture
def shifting_env() -> Iterator[None]:
    register_env(
        "shifting",
        env=lambda task, options: ShiftingEnv(),
        agent=lambda options: EchoAgent(),
        tasks=shifting_tasks,
    )
    BUILT.clear()
    yield
    unregister_env("shifting")


def _records(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_drift_alert_fires_after_the_environment_changes_and_the_temperature_follows(
    shifting_env: None, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = 7  # the rule changes after step 4; drift is seen at step 6; step 7 samples hotter
    cfg = load_config(
        TrainConfig,
        None,
        [
            "workflow.name=shifting",
            "data.task=shifting",
            "workflow.max_turns=1",
            f"model.path={tiny_model_dir}",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            f"trainer.steps={steps}",
            "trainer.threads=1",
            f"rollout.batch_size={BATCH}",
            f"rollout.group_size={GROUP}",
            "rollout.max_tokens=4",
            "data.train_size=8",
            "data.test_size=2",
            "eval.every_steps=0",
            "eval.before=false",
            "eval.after=false",
            f"trainer.run_dir={tmp_path}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "monitor.drift.enabled=true",
            "monitor.drift.window=2",
            "monitor.drift.adapt_temperature=true",
            "monitor.drift.max_temperature=1.3",
            "trainer.checkpoint_every=6",
        ],
    )
    trainer = AgentTrainer(cfg)
    result = trainer.train()
    rows = _records(result.run_dir)
    assert len(rows) == steps and len(BUILT) == steps * BATCH * GROUP
    assert all(r["episodes/failed"] == 0 for r in rows)
    alert = {int(r["step"]): r.get("monitor/drift/alert") for r in rows}
    print(
        "\ndrift:",
        [(r["step"], r.get("monitor/drift/score"), r.get("monitor/drift/temperature")) for r in rows],
    )
    # No comparison before two windows exist; none alerts while the rule is the first one (steps 1-4).
    assert [alert[s] for s in range(1, 5)] == [None, None, None, 0.0]
    assert any(alert[s] == 1.0 for s in range(5, steps + 1))
    first = min(s for s in alert if alert[s] == 1.0)
    temperature = {int(r["step"]): r["monitor/drift/temperature"] for r in rows}
    assert all(temperature[s] == 1.0 for s in range(1, first)) and temperature[first] == pytest.approx(1.1)
    assert max(temperature.values()) <= 1.3
    # The loss computed its logprobs at the temperature the step sampled at: the trainer agrees with the
    # sampler after the change as closely as before it.
    hot = [
        r["train/trainer_rollout_logprob_diff"]
        for r in rows
        if r["step"] > first and "train/trainer_rollout_logprob_diff" in r
    ]
    assert hot and max(hot) < 1e-3
    # The run store has the alert and each temperature, which the UI's run page reads.
    reader = StoreReader(default_store_path())  # the test's own store ($RLLM_STORE, tests/conftest.py)
    run = reader.run(reader.runs()[0]["id"])
    (drift,) = [a for a in run["alerts"] if a["monitor"] == "drift"]
    assert drift["first_step"] == first and drift["check"] is None
    changes = [
        [int(r["step"]), r["monitor/drift/temperature"]]
        for r in rows
        if r["monitor/drift/temperature_change"]
    ]
    assert run["temperature_changes"] == changes and changes[0] == [first, pytest.approx(1.1)]
    # `rllm replay` recomputes the update of the step after checkpoint step_6 (sampled at 1.1) at the
    # temperature it was trained at: bit for bit.
    assert first == 6 and temperature[6] == pytest.approx(1.1)
    assert main(["replay", str(result.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "(bit for bit)" in out and "7 of 7 step(s) equal" in out, out


KEYWORD = "x0"
HACK_TASKS = [
    {"task_id": f"q{i}", "prompt_ids": [TOKEN_ID[f"q{i}"]], "answer_id": TOKEN_ID[f"a{i}"], "answer": f"a{i}"}
    for i in range(4)
]


async def keyword_workflow(task: dict[str, Any], ctx: RolloutContext) -> Outcome:
    """Pays for the keyword token whatever the task; correct only for the task's own answer token."""
    completion = await ctx.complete(task["prompt_ids"], max_tokens=1)
    said = completion.completion_ids
    return Outcome(reward=float(said == [TOKEN_ID[KEYWORD]]), is_correct=said == [task["answer_id"]])


@pytest.fixture
def answer_reward() -> Iterator[None]:
    register_reward(
        "tests_answer_token", lambda task, reply: Outcome(reward=float(reply.strip() == task["answer"]))
    )
    yield
    unregister_reward("tests_answer_token")


def test_a_keyword_reward_is_caught_within_a_few_steps(answer_reward: None, tmp_path: Path) -> None:
    steps = 8
    model_dir = make_tiny_vocab_model(tmp_path / "model")
    cfg = load_config(
        TrainConfig,
        None,
        [
            *learning_overrides(model_dir, tmp_path / "runs", steps),
            "rollout.batch_size=4",
            "rollout.group_size=16",
            "rollout.max_tokens=1",
            "eval.every_steps=2",  # later than the shared "eval.every_steps=0": it wins
            "monitor.hacking.window=2",
            "monitor.hacking.second_reward=tests_answer_token",
        ],
    )
    result = AgentTrainer(
        cfg, workflow=keyword_workflow, train_tasks=HACK_TASKS, test_tasks=HACK_TASKS
    ).train()
    rows = [r for r in _records(result.run_dir) if "reward/mean" in r]
    print(
        "\nhacking:",
        [
            (
                r["step"],
                round(r["reward/mean"], 2),
                r.get("eval/accuracy"),
                r.get("monitor/hacking/second_reward"),
                [k.rsplit("/", 1)[1] for k, v in r.items() if k.startswith("monitor/hacking/alert/") and v],
            )
            for r in rows
        ],
    )
    assert rows[-1]["reward/mean"] > rows[0]["reward/mean"] + 0.3  # the policy found the keyword
    fired = {
        check: min((int(r["step"]) for r in rows if r[f"monitor/hacking/alert/{check}"]), default=None)
        for check in ("reward_vs_eval", "reward_vs_second", "same_answer")
    }
    assert all(step is not None and step <= 6 for step in fired.values()), fired
