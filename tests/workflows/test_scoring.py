"""How workflows score a reply: sync rewards off the event loop, async rewards awaited, every return type."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rllm.types import Outcome
from rllm.workflows.single_turn import score

TASK = {"task_id": "t", "question": "2 + 2?", "ground_truth": "4"}


def test_sync_rewards_run_off_the_event_loop_thread() -> None:
    seen = {}

    def reward(task: dict, response: str) -> Outcome:
        seen["thread"] = threading.current_thread()
        return Outcome(reward=1.0, is_correct=True, info={"answer": response})

    outcome = asyncio.run(score(reward, TASK, "4"))
    assert seen["thread"] is not threading.main_thread()
    assert (outcome.reward, outcome.is_correct, outcome.info) == (1.0, True, {"reward": {"answer": "4"}})


def test_async_rewards_are_awaited_on_the_loop() -> None:
    async def reward(task: dict, response: str) -> bool:
        await asyncio.sleep(0)
        return response == task["ground_truth"]

    class Judge:  # the shape of rllm.rewards.judge's async judge: an object with an async __call__
        async def __call__(self, task: dict, response: str) -> Outcome:
            return Outcome(reward=0.5, is_correct=False)

    assert asyncio.run(score(reward, TASK, "4")).is_correct is True
    assert asyncio.run(score(reward, TASK, "5")).reward == 0.0
    assert asyncio.run(score(Judge(), TASK, "4")).reward == 0.5


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, (1.0, True)),
        (0.25, (0.25, None)),
        (Outcome(reward=2.0, is_correct=True), (2.0, True)),
    ],
)
def test_every_return_type_becomes_an_outcome(value, expected) -> None:
    outcome = asyncio.run(score(lambda task, response: value, TASK, "x"))
    assert (outcome.reward, outcome.is_correct) == expected


def test_a_rewards_verdict_is_copied_so_the_workflow_can_add_to_it() -> None:
    shared = Outcome(reward=1.0, is_correct=True, metrics={"reward/x": 1.0}, info={"answer": "4"})
    outcome = asyncio.run(score(lambda task, response: shared, TASK, "4"))
    outcome.metrics["agent/turns"] = 2.0  # what tool_agent does with the verdict
    assert outcome.info == {"reward": {"answer": "4"}} and outcome.metrics["reward/x"] == 1.0
    assert shared.metrics == {"reward/x": 1.0} and shared.info == {"answer": "4"}
