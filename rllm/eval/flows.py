"""The agent flows ``rllm eval`` runs when the user brings none: one per kind of dataset.

Each is an ``@rllm.rollout`` flow, the same kind a user writes, so a built-in flow and a user's flow run
through the same gateway and are scored the same way:

- ``chat_flow(instruction)``: one chat call with the question (plus the reward's answer instruction);
  returns the reply, which the dataset's reward scores (``reward_evaluator``).
- ``frozenlake_flow``: plays the FrozenLake map of a task, one chat call per move; the environment
  says whether the goal was reached.
"""

from __future__ import annotations

from typing import Any

from rllm.envs.frozenlake import FrozenLakeAgent, FrozenLakeEnv
from rllm.rewards.types import RewardFn, RewardResult
from rllm.sdk.decorators import AgentConfig, EvalResult, Rollout, evaluator, rollout
from rllm.types import Episode
from rllm.workflows.multi_turn import play
from rllm.workflows.single_turn import question_messages


def chat_flow(instruction: str | None = None, system_prompt: str | None = None) -> Rollout:
    """A single-turn flow: ask ``task["question"]`` (or send ``task["messages"]``), return the reply text."""

    @rollout(name="chat")
    async def chat(task: dict[str, Any], config: AgentConfig) -> str:
        messages = question_messages(task, system_prompt=system_prompt, instruction=instruction)
        # --system-prompt also goes before a task's own messages, unless they open with one.
        if system_prompt and not (messages and messages[0]["role"] == "system"):
            messages.insert(0, {"role": "system", "content": system_prompt})
        # The gateway session enforces temperature, max_tokens and the seed on every call.
        reply = await config.async_client().chat.completions.create(model=config.model, messages=messages)
        return reply.choices[0].message.content or ""

    return chat


def reward_evaluator(reward_fn: RewardFn) -> Any:
    """An evaluator scoring the flow's returned text with ``reward_fn(task, text)``."""

    @evaluator(name="reward")
    def score(task: dict[str, Any], episode: Episode) -> EvalResult:
        output = episode.info.get("output")
        if not isinstance(output, str):
            raise TypeError(
                f"the flow returned {type(output).__name__}, not the reply text the reward scores: "
                "return the final answer text, or pass --evaluator"
            )
        result: RewardResult = reward_fn(task, output)
        return EvalResult(reward=result.reward, is_correct=result.is_correct, info=result.info)

    return score


def frozenlake_flow(max_turns: int = 5, history_turns: int | None = 0) -> Rollout:
    """Play the task's FrozenLake map, one chat call per move, with the training workflow's own loop
    (``rllm.workflows.multi_turn.play``) and agent; the defaults are ``examples/frozenlake``'s."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    FrozenLakeAgent(history_turns=history_turns)  # refuse a bad history_turns now, not once per episode

    @rollout(name="frozenlake")
    async def frozenlake(task: dict[str, Any], config: AgentConfig) -> EvalResult:
        env, agent = FrozenLakeEnv.from_task(task), FrozenLakeAgent(history_turns=history_turns)
        agent.reset(task)
        client = config.async_client()

        async def chat(messages: list[dict[str, Any]]) -> str:
            reply = await client.chat.completions.create(model=config.model, messages=messages)
            return reply.choices[0].message.content or ""

        game = await play(env, agent, chat, max_turns=max_turns)
        moves = [action if action is not None else "invalid" for action in game.actions]
        return EvalResult(reward=float(game.success), is_correct=game.success, info={"moves": moves})

    return frozenlake
