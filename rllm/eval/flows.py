"""The agent flows ``rllm eval`` runs when the user brings none: one per kind of dataset.

Each is an ``@rllm.rollout`` flow, the same kind a user writes, so a built-in flow and a user's flow run
through the same gateway and are scored the same way:

- ``chat_flow(instruction)``: one chat call with the question (plus the reward's answer instruction);
  returns the reply, which the dataset's reward scores (``reward_evaluator``).
- ``env_flow(name)``: plays the registered environment ``name`` on a task, one chat call per turn, with
  the training workflow's own loop; the environment says whether the episode succeeded.
"""

from __future__ import annotations

from typing import Any

from rllm.envs.registry import get_env
from rllm.rewards.types import RewardFn
from rllm.sdk.decorators import AgentConfig, Rollout, evaluator, rollout
from rllm.types import Episode, Outcome
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
    def score(task: dict[str, Any], episode: Episode) -> Outcome:
        output = episode.info.get("output")
        if not isinstance(output, str):
            raise TypeError(
                f"the flow returned {type(output).__name__}, not the reply text the reward scores: "
                "return the final answer text, or pass --evaluator"
            )
        result: Outcome = reward_fn(task, output)
        return Outcome(reward=result.reward, is_correct=result.is_correct, info=result.info)

    return score


def env_flow(name: str, **options: Any) -> Rollout:
    """Play environment ``name`` (``rllm.envs.register_env``) on each task, one chat call per turn, with the
    training workflow's own loop (``rllm.workflows.multi_turn.play``) and the environment's agent. Its
    ``options`` start from the environment's ``eval_options`` (how ``rllm eval`` plays it); a bad one is
    refused now, not once per episode. The reward is 1.0 when the environment calls the episode a success."""
    spec = get_env(name)
    chosen = spec.make_options(**{**spec.eval_options, **options})
    spec.agent(chosen)  # an agent that refuses its options says so now

    @rollout(name=name)
    async def play_env(task: dict[str, Any], config: AgentConfig) -> Outcome:
        env, agent = spec.env(task, chosen), spec.agent(chosen)
        agent.reset(task)
        client = config.async_client()

        async def chat(messages: list[dict[str, Any]]) -> str:
            reply = await client.chat.completions.create(model=config.model, messages=messages)
            return reply.choices[0].message.content or ""

        game = await play(env, agent, chat, max_turns=chosen.max_turns)
        moves = [action if action is not None else "invalid" for action in game.actions]
        return Outcome(reward=float(game.success), is_correct=game.success, info={"moves": moves})

    return play_env
