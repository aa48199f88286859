"""A reward that raises fails only its own episode, with the reason, and is counted; the run goes on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workflow_support import run_episodes

from rllm.inference.base import SamplingParams
from rllm.rewards.math import math_reward
from rllm.store import EpisodeQuery, StoreReader
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.types import Outcome, TerminationReason
from rllm.utils.config import load_config
from rllm.workflows.single_turn import SingleTurnWorkflow
from rllm.workflows.solver_judge import SolverJudgeWorkflow

SAMPLING = SamplingParams(temperature=1.0, max_tokens=4, seed=0)
GOOD = {"task_id": "good", "question": "What is 6 * 7?", "ground_truth": "42"}
# Handed to the workflow directly, past the dataset registry that would have refused it at load.
UNGRADABLE = {"task_id": "ungradable", "question": "What is 1 + 1?", "ground_truth": ["", " "]}


def test_a_raising_reward_fails_its_episodes_with_the_reason_and_spares_the_rest(engine) -> None:
    episodes = run_episodes(
        engine, SingleTurnWorkflow(math_reward), [GOOD, UNGRADABLE, GOOD], SAMPLING, group_size=2
    )
    assert len(episodes) == 6
    failed = [e for e in episodes if e.failed]
    assert [e.task_id for e in failed] == ["ungradable", "ungradable"]
    for episode in failed:
        assert episode.termination_reason == TerminationReason.ERROR and episode.is_correct is None
        assert episode.error.startswith(
            "rllm.workflows.single_turn.RewardError: reward math_reward raised on task 'ungradable': ValueError: "
            "math task 'ungradable': ground_truth ['', ' '] holds no usable answer"
        )
        assert "ValueError" in episode.info["traceback"]
        assert episode.trajectories and episode.trajectories[0].steps  # the model's reply is kept
    assert all(e.reward is not None and not e.failed for e in episodes if e.task_id == "good")


def test_a_judged_workflow_fails_only_the_episode_whose_reward_raised(engine) -> None:
    episodes = run_episodes(engine, SolverJudgeWorkflow(2, math_reward), [UNGRADABLE, GOOD], SAMPLING)
    assert [(e.task_id, e.failed) for e in episodes] == [("ungradable", True), ("good", False)]
    assert "RewardError" in episodes[0].error


def _flaky_grader(task: dict[str, Any], response: str) -> Outcome:
    if task["task_id"].startswith("bad"):
        raise RuntimeError(f"grader has no key for {task['task_id']}")
    correct = len(response) % 2 == 0  # some variance within a group, so the good tasks train
    return Outcome(reward=float(correct), is_correct=correct)


def test_training_goes_on_when_a_reward_raises_and_counts_the_failed_episodes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    tasks = [{"task_id": f"good{i}", "question": f"Tell me about {i}."} for i in range(2)]
    tasks.append({"task_id": "bad0", "question": "Tell me about nothing."})
    cfg: TrainConfig = load_config(
        TrainConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"trainer.run_dir={tmp_path}",
            "trainer.name=flaky",
            "trainer.steps=2",
            "trainer.threads=1",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "eval.before=false",
            "eval.after=true",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            "lora.rank=4",
            "lora.alpha=8",
            "rollout.batch_size=3",
            "rollout.group_size=4",
            "rollout.max_tokens=6",
            "eval.max_tokens=6",
        ],
    )
    result = AgentTrainer(
        cfg, workflow=SingleTurnWorkflow(_flaky_grader), train_tasks=tasks, test_tasks=tasks
    ).train()

    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "episodes" in r]
    assert len(steps) == 2 and not any(r.get("train/skipped") for r in steps)  # both steps ran and updated
    for r in steps:  # every step has the bad task's group of 4: counted, and kept out of the update
        assert (r["episodes"], r["episodes/failed"], r["filter/failed_dropped"]) == (12.0, 4.0, 4.0)
        assert r["termination/error"] == 4 / 12
    assert result.eval_history[-1]["eval/n"] == 3.0  # the held-out eval ran on all three, the bad one too
    assert result.eval_history[-1]["eval/failed"] == 1.0  # and counted the one whose reward raised

    reader = StoreReader(os.environ["RLLM_STORE"])
    [run] = reader.runs()
    assert run["status"] == "finished" and run["step"] == 2
    stored = reader.episodes(run["id"], EpisodeQuery(termination="error"))["episodes"]
    assert stored and all(e["task_id"] == "bad0" for e in stored)
    reason = (
        "RewardError: reward _flaky_grader raised on task 'bad0': RuntimeError: grader has no key for bad0"
    )
    assert all(e["error"] == f"rllm.workflows.single_turn.{reason}" for e in stored)
