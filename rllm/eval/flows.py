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

from rllm.rewards.types import RewardFn, RewardResult
from rllm.sdk.decorators import AgentConfig, EvalResult, Rollout, evaluator, rollout
from rllm.types import Episode
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
            raise TypeError(f"the flow returned {type(output).__name__}, not the reply text the reward scores: "
                            "return the final answer text, or pass --evaluator")
        result: RewardResult = reward_fn(task, output)
        return EvalResult(reward=result.reward, is_correct=result.is_correct, info=result.info)

    return score


@rollout(name="frozenlake")
async def frozenlake_flow(task: dict[str, Any], config: AgentConfig) -> EvalResult:
    """Play the task's map, one move per chat call, showing only the current board (as in training)."""
    from rllm.envs.frozenlake import FrozenLakeAgent, FrozenLakeEnv

    env, agent = FrozenLakeEnv.from_task(task), FrozenLakeAgent(history_turns=0)
    max_turns = int(task.get("max_turns", 5))
    agent.reset(task)
    observation, info = env.reset()
    agent.observe(observation, 0.0, False, info)
    client = config.async_client()
    moves: list[str] = []
    for _ in range(max_turns):
        reply = await client.chat.completions.create(model=config.model, messages=agent.messages)
        action = agent.act(reply.choices[0].message.content or "")
        if not isinstance(action, str):  # InvalidAction: shown to the model, costs the turn
            agent.observe(action.message, 0.0, False, {"invalid_action": True})
            moves.append("invalid")
            continue
        moves.append(action)
        result = env.step(action)
        agent.observe(result.observation, result.reward, result.done, result.info)
        if result.done:
            break
    success = env.grid[env.position[0]][env.position[1]] == "G"
    return EvalResult(reward=float(success), is_correct=success, info={"moves": moves})
