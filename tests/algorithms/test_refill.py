"""DAPO's dynamic sampling with refill (``rllm.algorithms.refill``), on hand-made episodes: which refill
episodes join the batch, when it stops, what it counts; and the refill tasks' choice."""

from __future__ import annotations

import pytest

from rllm.algorithms.refill import fresh_tasks, refill_batch, signal_task_ids
from rllm.algorithms.transforms import FilterConfig
from rllm.types import Episode, Step, Trajectory


def _episode(task_id: str, reward: float) -> Episode:
    step = Step(prompt_ids=[1, 2], response_ids=[10, 11], logprobs=[-0.1, -0.2])
    return Episode(task_id=task_id, reward=reward, trajectories=[Trajectory(steps=[step], reward=reward)])


def _group(task_id: str, rewards: tuple[float, ...]) -> list[Episode]:
    """One task's attempts: with signal when the rewards differ."""
    return [_episode(task_id, r) for r in rewards]


SIGNAL, FLAT = (1.0, 0.0), (1.0, 1.0)


def _rounds(*rounds: list[tuple[str, tuple[float, ...]]]):
    """A FAKE sampler: round r returns the groups given for it (nothing past the last), recording calls."""
    calls: list[int] = []

    def sample_round(r: int) -> list[Episode]:
        calls.append(r)
        return (
            [e for task, rewards in rounds[r - 1] for e in _group(task, rewards)] if r <= len(rounds) else []
        )

    return sample_round, calls


def test_refill_adds_signal_tasks_until_the_target_and_leaves_the_surplus_out() -> None:
    step = _group("a", SIGNAL) + _group("b", FLAT) + _group("c", FLAT)  # 1 of 3 tasks with signal
    sample_round, calls = _rounds(
        [("d", FLAT), ("e", SIGNAL), ("f", FLAT)],  # one more
        [("g", SIGNAL), ("h", SIGNAL), ("i", FLAT)],  # one needed, two found: h is surplus
    )
    result = refill_batch(step, target=3, max_rounds=5, sample_round=sample_round, filters=FilterConfig())
    assert calls == [1, 2]  # stopped once the target was reached
    # Round 0 stays whole (flat groups included, as without refill); later rounds add signal tasks only.
    assert [e.task_id for e in result.batch] == ["a", "a", "b", "b", "c", "c", "e", "e", "g", "g"]
    assert len(result.sampled) == 18
    assert signal_task_ids(result.batch, FilterConfig()) == ["a", "e", "g"]
    assert result.metrics == {
        "refill/rounds": 2.0,
        "refill/tasks_sampled": 9.0,
        "refill/signal_tasks_sampled": 4.0,
        "refill/signal_tasks": 3.0,
        "refill/surplus_tasks": 1.0,
        "refill/short": 0.0,
    }


def test_refill_stops_at_its_bound_and_says_it_fell_short() -> None:
    sample_round, calls = _rounds([("b", FLAT)], [("c", FLAT)], [("d", SIGNAL)])
    result = refill_batch(
        _group("a", FLAT), target=2, max_rounds=2, sample_round=sample_round, filters=FilterConfig()
    )
    assert calls == [1, 2]  # never a third round: the bound
    assert [e.task_id for e in result.batch] == ["a", "a"]
    assert result.metrics["refill/short"] == 1.0 and result.metrics["refill/signal_tasks"] == 0.0


def test_refill_ends_when_no_task_is_left() -> None:
    sample_round, calls = _rounds([("b", SIGNAL)])
    result = refill_batch(
        _group("a", FLAT), target=3, max_rounds=10, sample_round=sample_round, filters=FilterConfig()
    )
    assert calls == [1, 2]  # round 2 found nothing to sample
    assert result.metrics["refill/rounds"] == 1.0 and result.metrics["refill/short"] == 1.0


def test_no_refill_when_the_step_already_has_enough_signal() -> None:
    sample_round, calls = _rounds([("z", SIGNAL)])
    step = _group("a", SIGNAL) + _group("b", SIGNAL)
    result = refill_batch(step, target=2, max_rounds=3, sample_round=sample_round, filters=FilterConfig())
    assert calls == [] and result.batch == step and result.metrics["refill/rounds"] == 0.0


def test_refill_needs_the_zero_variance_filter() -> None:
    with pytest.raises(ValueError, match="set algorithm.filters.drop_zero_variance=true"):
        FilterConfig(drop_zero_variance=False, refill_rounds=2)


def test_fresh_tasks_skip_used_ids_and_repeat_for_the_same_key() -> None:
    tasks = [{"task_id": str(i)} for i in range(20)]
    used = {"3", "4"}
    first = fresh_tasks(tasks, 5, key="refill-0-7-1", used=used, task_id=lambda t: t["task_id"])
    assert len(first) == 5 and not {"3", "4"} & {t["task_id"] for t in first}
    assert used == {"3", "4"} | {t["task_id"] for t in first}  # what it picked is now used
    again = fresh_tasks(tasks, 5, key="refill-0-7-1", used={"3", "4"}, task_id=lambda t: t["task_id"])
    assert again == first
    other = fresh_tasks(tasks, 5, key="refill-0-7-2", used={"3", "4"}, task_id=lambda t: t["task_id"])
    assert other != first
    assert len(fresh_tasks(tasks, 50, key="k", used=set(), task_id=lambda t: t["task_id"])) == 20
