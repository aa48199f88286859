"""The workflow runner on the tiny model: groups, seeds, failures kept with their reason, retries,
timeouts, the values a workflow may return, and truncation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rllm.inference.base import Completion, SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.context import RolloutContext
from rllm.runner.workflow_runner import WorkflowRunner, task_id_of
from rllm.types import Outcome, TerminationReason
from rllm.workflows.single_turn import SingleTurnWorkflow

SAMPLING = SamplingParams(temperature=1.0, max_tokens=4, seed=0)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


def _run(engine: LocalEngine, workflow: Any, tasks: list[dict], group_size: int = 1, **kwargs: Any) -> list:
    sampling = kwargs.pop("sampling", SAMPLING)
    runner = WorkflowRunner(workflow, engine, sampling, show_progress=False, **kwargs)
    return asyncio.run(runner.run_tasks(tasks, group_size=group_size))


async def ask(task: dict[str, Any], ctx: RolloutContext) -> Outcome:
    """Samples one reply; reward 1 when the reply's first token id is even."""
    completion = await ctx.chat([{"role": "user", "content": task["question"]}])
    return Outcome(reward=float(completion.completion_ids[0] % 2 == 0), info={"seed": ctx.sampling.seed})


def test_group_size_episodes_per_task_with_distinct_seeds(engine) -> None:
    tasks = [{"task_id": "a", "question": "Hi"}, {"id": 7, "question": "Hello"}]
    episodes = _run(engine, ask, tasks, group_size=3)
    assert [e.task_id for e in episodes] == ["a"] * 3 + ["7"] * 3  # task order, attempts adjacent
    assert len({e.id for e in episodes}) == 6
    assert len({e.info["seed"] for e in episodes}) == 6
    for e in episodes:
        assert e.termination_reason is TerminationReason.MAX_RESPONSE_LENGTH  # 4 tokens, no eos
        assert e.attempt == 0 and e.error is None
        (traj,) = e.trajectories
        (step,) = traj.steps
        assert len(step.response_ids) == 4 and len(step.logprobs) == 4
        assert step.messages == [{"role": "user", "content": e.task["question"]}]
        assert step.reward == traj.reward == e.reward
    # the seeds give the group different samples, and the same seeds give the same samples again
    responses = [tuple(e.trajectories[0].steps[0].response_ids) for e in episodes[:3]]
    assert len(set(responses)) == 3
    again = _run(engine, ask, tasks, group_size=3)
    assert [tuple(e.trajectories[0].steps[0].response_ids) for e in again[:3]] == responses


def test_done_jobs_are_returned_in_place_and_only_the_rest_run(engine) -> None:
    """A resumed step hands run_tasks the jobs a killed run finished: those come back as given, the others
    are sampled with the seeds they would have had, and on_episode sees only the ones that ran."""
    tasks = [{"task_id": "a", "question": "Hi"}, {"task_id": "b", "question": "Hello"}]
    full = _run(engine, ask, tasks, group_size=2)
    runner = WorkflowRunner(ask, engine, SAMPLING, show_progress=False)
    seen: list[tuple[int, str]] = []
    done = {0: full[0], 3: full[3]}
    out = asyncio.run(
        runner.run_tasks(tasks, group_size=2, done=done, on_episode=lambda j, e: seen.append((j, e.task_id)))
    )
    assert out[0] is full[0] and out[3] is full[3]
    assert sorted(seen) == [(1, "a"), (2, "b")]
    assert [e.info["seed"] for e in out] == [e.info["seed"] for e in full]
    assert [e.trajectories[0].steps[0].response_ids for e in out] == [
        e.trajectories[0].steps[0].response_ids for e in full
    ]


def test_failed_episode_is_kept_with_error_and_retries_counted(engine) -> None:
    async def fails_after_one_call(task: dict, ctx: RolloutContext) -> float:
        await ctx.chat([{"role": "user", "content": "x"}])
        raise RuntimeError(f"tool broke on {task['question']}")

    (episode,) = _run(engine, fails_after_one_call, [{"question": "q1"}], retries=2)
    assert episode.termination_reason is TerminationReason.ERROR and episode.failed
    assert episode.attempt == 2  # the third attempt is the one kept
    assert episode.error == "RuntimeError: tool broke on q1"
    assert "Traceback" in episode.info["traceback"] and "fails_after_one_call" in episode.info["traceback"]
    assert len(episode.trajectories[0].steps) == 1  # what it did before failing is kept
    assert episode.reward == 0.0


def test_retry_that_succeeds_reports_its_attempt(engine) -> None:
    seen: list[int | None] = []

    async def flaky(task: dict, ctx: RolloutContext) -> bool:
        seen.append(ctx.sampling.seed)
        if len(seen) < 2:
            raise ValueError("first try fails")
        await ctx.chat([{"role": "user", "content": "x"}])
        return True

    (episode,) = _run(engine, flaky, [{"question": "q"}], retries=3)
    assert episode.attempt == 1
    assert not episode.failed and episode.error is None
    assert episode.reward == 1.0 and episode.is_correct is True
    assert seen[0] != seen[1]  # a retry samples with a new seed


def test_timeout(engine) -> None:
    async def slow(task: dict, ctx: RolloutContext) -> float:
        # a step recorded directly, so the budget cannot run out inside the call on a loaded machine
        ctx.record(
            Completion(prompt_ids=[1], completion_ids=[2], logprobs=[-1.0], text="", finish_reason="stop"),
            messages=[],
        )
        await asyncio.sleep(30)
        return 1.0

    (episode,) = _run(engine, slow, [{"question": "q"}], timeout_s=0.2, retries=1)
    assert episode.termination_reason is TerminationReason.TIMEOUT and episode.failed
    assert episode.attempt == 1
    assert "timeout_s=0.2" in episode.error
    assert len(episode.trajectories[0].steps) == 1
    assert episode.reward == 0.0


def test_workflows_own_timeout_error_is_an_error(engine) -> None:
    async def tool_times_out(task: dict, ctx: RolloutContext) -> float:
        raise TimeoutError("search tool did not answer")

    for timeout_s in (None, 30.0):
        (episode,) = _run(engine, tool_times_out, [{"question": "q"}], timeout_s=timeout_s)
        assert episode.termination_reason is TerminationReason.ERROR
        assert episode.error == "TimeoutError: search tool did not answer"


@pytest.mark.parametrize(
    ("result", "reward", "is_correct"),
    [
        (True, 1.0, True),
        (False, 0.0, False),
        (0.25, 0.25, None),
        (3, 3.0, None),
        (None, 0.0, None),
        ({"reward": 0.75, "is_correct": False}, 0.75, False),
        (Outcome(reward=0.5, is_correct=True, metrics={"turns": 1.0}, signals={"format": 1}), 0.5, True),
    ],
)
def test_workflow_return_values(engine, result: Any, reward: float, is_correct: bool | None) -> None:
    async def returns(task: dict, ctx: RolloutContext) -> Any:
        return result

    (episode,) = _run(engine, returns, [{"question": "q"}])
    assert episode.termination_reason is TerminationReason.ENV_DONE
    assert episode.reward == reward and episode.is_correct is is_correct
    assert "episode_time_s" in episode.metrics
    if isinstance(result, Outcome):  # signals are logged as signal/<name>, metrics under their own names
        assert episode.metrics["turns"] == 1.0 and episode.metrics["signal/format"] == 1.0


def test_workflow_returning_something_else_is_an_error(engine) -> None:
    async def returns_text(task: dict, ctx: RolloutContext) -> Any:
        return "yes"

    (episode,) = _run(engine, returns_text, [{"question": "q"}])
    assert episode.termination_reason is TerminationReason.ERROR
    assert "must return an Outcome, a float or a bool, not str" in episode.error


def test_truncated_response_gives_max_response_length_and_roles_get_their_rewards(engine) -> None:
    async def two_roles(task: dict, ctx: RolloutContext) -> Outcome:
        await ctx.chat([{"role": "user", "content": "solve"}], trajectory="solver", max_tokens=2)
        await ctx.chat([{"role": "user", "content": "judge"}], trajectory="judge", max_tokens=1)
        return Outcome(reward=1.0, role_rewards={"judge": 0.25})

    (episode,) = _run(engine, two_roles, [{"question": "q"}])
    assert episode.termination_reason is TerminationReason.MAX_RESPONSE_LENGTH and episode.truncated
    solver, judge = episode.trajectories
    assert (solver.name, solver.reward, judge.name, judge.reward) == ("solver", 1.0, "judge", 0.25)
    assert len(solver.steps[0].response_ids) == 2 and solver.steps[0].finish_reason == "length"
    assert solver.steps[0].weight_version == judge.steps[0].weight_version == 0


def test_single_turn_workflow_scores_with_its_reward_fn(engine) -> None:
    workflow = SingleTurnWorkflow(reward_fn=lambda task, text: len(text) >= 0, system_prompt="Be brief.")
    episodes = _run(engine, workflow, [{"question": "What is 2 + 2?", "ground_truth": "4"}], group_size=2)
    for e in episodes:
        assert e.reward == 1.0 and e.is_correct is True
        messages = e.trajectories[0].steps[0].messages
        assert messages[0] == {"role": "system", "content": "Be brief."}
    (bad,) = _run(engine, workflow, [{"prompt": "no question field"}])
    assert bad.termination_reason is TerminationReason.ERROR and "question" in bad.error


def test_max_concurrency_is_respected(engine) -> None:
    running = peak = 0

    async def tracked(task: dict, ctx: RolloutContext) -> float:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return 0.0

    episodes = _run(engine, tracked, [{"question": str(i)} for i in range(10)], max_concurrency=3)
    assert len(episodes) == 10 and peak == 3


def test_task_id_of() -> None:
    assert task_id_of({"task_id": "x", "id": "y"}) == "x"
    assert task_id_of({"id": 3}) == "3"
    assert task_id_of({"q": 1, "a": 2}) == task_id_of({"a": 2, "q": 1}) != task_id_of({"q": 2, "a": 2})


def test_call_overrides_are_validated(engine) -> None:
    ctx = RolloutContext(engine, SAMPLING, episode_id="e", task_id="t")
    params = ctx.params(stop="Answer:", max_tokens=2)
    assert params.stop == ["Answer:"] and params.max_tokens == 2  # one stop string, not seven letters
    assert ctx.params().seed != params.seed  # every call of a seeded episode gets its own seed
    with pytest.raises(ValueError):
        ctx.params(max_tokens=0)
    with pytest.raises(ValueError):
        ctx.params(temprature=0.5)
