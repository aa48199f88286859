"""The simplest workflow: one question, one answer, one reward."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rllm.rewards.basic import number_reward
from rllm.rewards.instructions import with_instruction
from rllm.runner.context import RolloutContext
from rllm.types import Outcome, as_outcome

# reward_fn(task, response) -> Outcome | float | bool, or an awaitable of one
RewardFn = Callable[[dict[str, Any], str], Any]


def question_messages(
    task: dict[str, Any],
    *,
    system_prompt: str | None = None,
    instruction: str | None = None,
    examples: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The opening messages of a task: its own ``task["messages"]``, else the optional system prompt,
    worked ``examples``, and the question followed by the answer ``instruction``."""
    if "messages" in task:
        return list(task["messages"])
    if "question" not in task:
        raise KeyError(f"task {task.get('task_id', '?')!r} needs a 'question' or 'messages' field")
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [
        *msgs,
        *examples,
        {"role": "user", "content": with_instruction(str(task["question"]), instruction)},
    ]


class SingleTurnWorkflow:
    """Ask ``task["question"]`` (or send ``task["messages"]``), score the reply with ``reward_fn``.
    ``instruction`` (e.g. "put your final answer within \\boxed{}") follows the question."""

    def __init__(
        self,
        reward_fn: RewardFn = number_reward,
        system_prompt: str | None = None,
        instruction: str | None = None,
    ) -> None:
        self.reward_fn = reward_fn
        self.system_prompt = system_prompt
        self.instruction = instruction

    def messages(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        return question_messages(task, system_prompt=self.system_prompt, instruction=self.instruction)

    async def __call__(self, task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        completion = await ctx.chat(self.messages(task))
        return await score(self.reward_fn, task, completion.text)


class RewardError(RuntimeError):
    """The reward function raised while scoring a reply. The workflow runner fails that one episode with
    this message (``Episode.error``: which reward, which task, the original exception) and the run goes
    on; the trainer counts such episodes in ``episodes/failed`` and drops them from the update."""


async def score(reward_fn: RewardFn, task: dict[str, Any], response: str) -> Outcome:
    """``reward_fn(task, response)`` as an Outcome (a bool also says whether the answer is correct).

    A sync reward runs on a worker thread: graders that take real time (symbolic math, sandboxed test
    runs) must not stall the other episodes of the event loop. An async reward (``async def``, e.g. the
    LLM judge) is awaited. A reward that raises raises ``RewardError``, which fails the episode."""
    try:
        if inspect.iscoroutinefunction(reward_fn) or inspect.iscoroutinefunction(type(reward_fn).__call__):
            result = await reward_fn(task, response)
        else:
            result = await asyncio.to_thread(reward_fn, task, response)
            if inspect.isawaitable(result):
                result = await result
    except Exception as exc:
        where = f"reward {_name(reward_fn)} raised on task {task.get('task_id', '?')!r}"
        raise RewardError(f"{where}: {type(exc).__name__}: {exc}") from exc
    outcome = as_outcome(result, source=f"reward {_name(reward_fn)}")
    if not isinstance(result, (Outcome, dict)):  # a bare float or bool says nothing about why
        return outcome
    # What the reward says goes under info["reward"], beside the workflow's own keys; metrics are copied
    # because workflows add their own to them.
    return outcome.model_copy(update={"info": {"reward": outcome.info}, "metrics": dict(outcome.metrics)})


def _name(reward_fn: RewardFn) -> str:
    return getattr(reward_fn, "__qualname__", None) or type(reward_fn).__qualname__
