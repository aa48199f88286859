"""The multi-turn workflow: an agent and an environment take turns until the episode ends.

    workflow = MultiTurnWorkflow(MyEnv, MyAgent, max_turns=8)     # an Env subclass, an Agent factory
    trainer = AgentTrainer(cfg, workflow=workflow, train_tasks=..., test_tasks=...)

Each turn is one LLM call, recorded as one Step whose prompt is the whole conversation so far and whose
``reward`` is the environment's reward for that turn. The transform pipeline joins the turns of a
trajectory into one training row when they extend each other token for token; the environment's
messages between them are then masked out of the loss (``loss_mask`` 0), and only the model's own
tokens are trained on. The episode's return is the sum of the step rewards; per-step or per-state credit
(``algorithm.credit=per_step`` or ``per_state``) discounts them with ``algorithm.gamma``.

The episode is correct when the last step's ``info["success"]`` is true (an environment that does not
say is judged by a positive return). Termination reasons: ``env_done`` (the environment said done), ``max_turns`` (the turn limit came
first), ``max_response_length`` (a reply was cut at ``max_tokens``). An ``InvalidAction`` from the agent
costs a turn and is shown to the model (metric ``agent/invalid_actions``); it never ends the batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rllm.agents.base import Agent, InvalidAction
from rllm.envs.base import Env, EnvStep
from rllm.runner.context import RolloutContext
from rllm.types import Outcome, TerminationReason

EnvFactory = Callable[[dict[str, Any]], Env]


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _env_factory(env: type[Env] | EnvFactory) -> EnvFactory:
    if isinstance(env, type) and issubclass(env, Env):
        return env.from_task
    return env


@dataclass
class GameResult:
    """How one agent x environment game ended: see ``play``."""

    total: float = 0.0  # the sum of the turn rewards
    turns: int = 0
    invalid: int = 0  # replies with no usable action
    reason: TerminationReason = TerminationReason.MAX_TURNS
    last: EnvStep = field(default_factory=EnvStep)  # the environment's last answer
    actions: list[Any] = field(default_factory=list)  # each turn's action, None for an invalid reply

    @property
    def success(self) -> bool:
        """The environment's ``info["success"]`` on its last answer, else a positive return."""
        success = self.last.info.get("success")
        return bool(success) if success is not None else self.total > 0


async def play(
    env: Env,
    agent: Agent,
    chat: Callable[[list[dict[str, Any]]], Awaitable[str]],
    *,
    max_turns: int,
    invalid_action_reward: float = 0.0,
    on_turn: Callable[[float, dict[str, Any]], None] | None = None,
) -> GameResult:
    """Play one game: ``chat(agent.messages)`` gives the model's reply each turn, the agent turns it into an
    action, the environment answers, at most ``max_turns`` turns. ``on_turn(reward, info)`` is called after
    each turn (``info``: ``action`` or ``invalid_action``). The environment is closed at the end.

    The training workflow plays through a ``RolloutContext`` (each turn a traced Step) and ``rllm eval``
    through any OpenAI client; both share this loop, so they play the same game.
    """
    result = GameResult()
    try:
        observation, info = await _maybe_await(env.reset())
        agent.observe(observation, 0.0, False, info)
        for result.turns in range(1, max_turns + 1):
            action = agent.act(await chat(agent.messages))
            if isinstance(action, InvalidAction):
                result.invalid += 1
                result.total += invalid_action_reward
                result.actions.append(None)
                if on_turn:
                    on_turn(invalid_action_reward, {"invalid_action": True})
                agent.observe(action.message, invalid_action_reward, False, {"invalid_action": True})
                continue
            result.last = last = await _maybe_await(env.step(action))
            result.total += float(last.reward)
            result.actions.append(action)
            if on_turn:
                on_turn(
                    float(last.reward),
                    {"action": action if isinstance(action, (str, int, float)) else repr(action)},
                )
            agent.observe(last.observation, last.reward, last.done, last.info)
            if last.done:
                result.reason = TerminationReason.ENV_DONE
                break
    finally:
        env.close()
    return result


class MultiTurnWorkflow:
    """Runs ``agent_cls`` against the environment built from each task, at most ``max_turns`` turns.

    ``env`` is an ``Env`` subclass (built with ``Env.from_task(task)``) or any ``task -> Env`` callable;
    ``agent`` is an ``Agent`` subclass or factory called with no arguments. ``invalid_action_reward`` is
    the step reward of a reply with no usable action (0 by default; a small negative value speeds up
    learning the format). ``role`` names the trajectory.
    """

    def __init__(
        self,
        env: type[Env] | EnvFactory,
        agent: Callable[[], Agent],
        *,
        max_turns: int = 8,
        invalid_action_reward: float = 0.0,
        role: str = "default",
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

        async def chat(messages: list[dict[str, Any]]) -> str:
            return (await ctx.chat(messages, trajectory=self.role)).text

        def on_turn(reward: float, info: dict[str, Any]) -> None:
            step = ctx.trajectories[self.role].steps[-1]
            step.reward = reward
            step.info.update(info)

        game = await play(
            env,
            agent,
            chat,
            max_turns=self.max_turns,
            invalid_action_reward=self.invalid_action_reward,
            on_turn=on_turn,
        )
        return Outcome(
            reward=game.total,
            is_correct=game.success,
            termination_reason=game.reason,
            metrics={
                "env/turns": float(game.turns),
                "agent/invalid_actions": float(game.invalid),
                "env/done": float(game.reason == TerminationReason.ENV_DONE),
            },
        )
