"""The multi-turn workflow: an agent and an environment take turns until the episode ends.

    workflow = MultiTurnWorkflow(FrozenLakeEnv, FrozenLakeAgent, max_turns=8)
    trainer = AgentTrainer(cfg, workflow=workflow, train_tasks=..., test_tasks=...)

Each turn is one LLM call, recorded as one Step whose prompt is the whole conversation so far and whose
``reward`` is the environment's reward for that turn. The transform pipeline joins the turns of a
trajectory into one training row when they extend each other token for token; the environment's
messages between them are then masked out of the loss (``loss_mask`` 0), and only the model's own
tokens are trained on. The episode's return is the sum of the step rewards; per-step credit
(``algorithm.credit=per_step``) discounts them with ``algorithm.gamma``.

The episode is correct when the last step's ``info["success"]`` is true (an environment that does not
say is judged by a positive return). Termination reasons: ``env_done`` (the environment said done), ``max_turns`` (the turn limit came
first), ``max_response_length`` (a reply was cut at ``max_tokens``). An ``InvalidAction`` from the agent
costs a turn and is shown to the model (metric ``agent/invalid_actions``); it never ends the batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rllm.agents.base import Agent, InvalidAction
from rllm.engine.context import Outcome, RolloutContext
from rllm.envs.base import Env, EnvStep
from rllm.types import TerminationReason

EnvFactory = Callable[[dict[str, Any]], Env]


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _env_factory(env: type[Env] | EnvFactory) -> EnvFactory:
    if isinstance(env, type) and issubclass(env, Env):
        return env.from_task
    return env


class MultiTurnWorkflow:
    """Runs ``agent_cls`` against the environment built from each task, at most ``max_turns`` turns.

    ``env`` is an ``Env`` subclass (built with ``Env.from_task(task)``) or any ``task -> Env`` callable;
    ``agent`` is an ``Agent`` subclass or factory called with no arguments. ``invalid_action_reward`` is
    the step reward of a reply with no usable action (0 by default; a small negative value speeds up
    learning the format). ``role`` names the trajectory.
    """

    def __init__(
        self, env: type[Env] | EnvFactory, agent: Callable[[], Agent], *, max_turns: int = 8,
        invalid_action_reward: float = 0.0, role: str = "default",
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.make_env = _env_factory(env)
        self.make_agent = agent
        self.max_turns = max_turns
        self.invalid_action_reward = invalid_action_reward
        self.role = role

    async def __call__(self, task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        env = self.make_env(task)
        agent = self.make_agent()
        agent.reset(task)
        total, turns, invalid = 0.0, 0, 0
        reason = TerminationReason.MAX_TURNS
        last = EnvStep()
        try:
            observation, info = await _maybe_await(env.reset())
            agent.observe(observation, 0.0, False, info)
            for turns in range(1, self.max_turns + 1):
                completion = await ctx.chat(agent.messages, trajectory=self.role)
                step = ctx.trajectories[self.role].steps[-1]
                action = agent.act(completion.text)
                if isinstance(action, InvalidAction):
                    invalid += 1
                    step.reward = self.invalid_action_reward
                    step.info["invalid_action"] = True
                    total += step.reward
                    agent.observe(action.message, step.reward, False, {"invalid_action": True})
                    continue
                last = await _maybe_await(env.step(action))
                step.reward = float(last.reward)
                step.info["action"] = action if isinstance(action, (str, int, float)) else repr(action)
                total += step.reward
                agent.observe(last.observation, last.reward, last.done, last.info)
                if last.done:
                    reason = TerminationReason.ENV_DONE
                    break
        finally:
            env.close()
        success = last.info.get("success")
        return Outcome(
            reward=total,
            is_correct=bool(success) if success is not None else total > 0,
            termination_reason=reason,
            metrics={"env/turns": float(turns), "agent/invalid_actions": float(invalid),
                     "env/done": float(reason == TerminationReason.ENV_DONE)},
        )
