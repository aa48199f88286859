"""Solver–judge on the tiny model: N solver trajectories and a judge per episode, per-role rewards, and
per-role advantage groups with an estimator chosen per role."""

from __future__ import annotations

import pytest
from workflow_support import ScriptedEngine, run_episodes

from rllm.algorithms.transforms import build_train_batch, compute_advantages, group_episodes
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.workflows.solver_judge import SolverJudgeWorkflow, parse_pick

SAMPLING = SamplingParams(temperature=1.0, max_tokens=16, seed=0)
TASK = {
    "task_id": "q",
    "question": "Which number is larger, 37 or 82? Answer with just the number.",
    "ground_truth": "82",
}


def _policy(solver_answers: list[str], picks: list[str]):
    """Solvers answer in turn from solver_answers; the k-th judge call replies picks[k]."""
    calls = {"solver": 0, "judge": 0}

    def policy(prompt: str) -> str:
        role = "judge" if "Solution 1:" in prompt else "solver"
        k = calls[role]
        calls[role] += 1
        return picks[k] if role == "judge" else solver_answers[k % len(solver_answers)]

    return policy


def test_per_role_rewards_groups_and_estimators(engine: LocalEngine) -> None:
    # Two attempts at one task, 3 solvers each: answers 82, 37, 82; judge picks 2 (wrong), then 3 (right).
    scripted = ScriptedEngine(engine, _policy(["82", "37", "82"], ["Solution 2", "3"]))
    first, second = run_episodes(
        scripted, SolverJudgeWorkflow(n_solvers=3), [TASK], SAMPLING, group_size=2, max_concurrency=1
    )
    for ep in (first, second):
        assert [t.name for t in ep.trajectories] == ["solver", "solver", "solver", "judge"]
        assert [t.reward for t in ep.trajectories] == [1.0, 0.0, 1.0, ep.reward]
        assert ep.metrics["solver/accuracy"] == pytest.approx(2 / 3) and ep.metrics["judge/oracle"] == 1.0
        judge_prompt = ep.trajectories[-1].steps[0].messages[0]["content"]
        assert "Solution 1: 82\nSolution 2: 37\nSolution 3: 82" in judge_prompt
    assert (first.reward, first.is_correct, first.info["pick"]) == (0.0, False, 1)
    assert (second.reward, second.is_correct, second.info["pick"]) == (1.0, True, 2)

    groups = group_episodes([first, second])
    assert [(g.group_id, len(g.members)) for g in groups] == [("q/solver", 6), ("q/judge", 2)]
    compute_advantages(groups, {"solver": "grpo", "judge": "reinforce"}, norm_std=False)
    solver_advs = [t.steps[0].advantage for _, t in groups[0].members]
    assert solver_advs == pytest.approx([1 / 3, -2 / 3, 1 / 3] * 2)  # reward - mean(2/3)
    assert [t.steps[0].advantage for _, t in groups[1].members] == [0.0, 1.0]  # raw reward
    batch = build_train_batch(groups)
    assert [s.trajectory_name for s in batch.sequences] == ["solver"] * 6 + ["judge"] * 2


def test_judge_pick_parsing() -> None:
    assert parse_pick("Solution 2", 3) == 1
    assert parse_pick("I pick 1, no, 3.", 3) == 2
    assert parse_pick("Solution 7", 3) is None and parse_pick("none", 2) is None


def test_the_tiny_models_own_replies_give_complete_episodes(engine: LocalEngine) -> None:
    for ep in run_episodes(engine, SolverJudgeWorkflow(n_solvers=2), [TASK], SAMPLING, group_size=2):
        assert not ep.failed and len(ep.trajectories) == 3
        assert {k for k in ep.metrics if "/" in k} >= {
            "solver/accuracy",
            "judge/accuracy",
            "judge/valid_pick",
        }


def test_a_judge_needs_two_solutions() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        SolverJudgeWorkflow(n_solvers=1)
