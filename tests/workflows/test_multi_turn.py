"""The multi-turn workflow, run on the tiny model: turns become steps with the environment's rewards,
turns merge into one training row with the environment's tokens masked, invalid actions cost a turn,
and the turn limit ends the episode."""

from __future__ import annotations

import re
from typing import Any

import pytest
from workflow_support import ScriptedEngine, nth_reply, run_episodes

from rllm.agents.base import Agent, InvalidAction
from rllm.algorithms.transforms import build_train_batch, compute_advantages, group_episodes
from rllm.envs.base import Env, EnvStep
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.types import TerminationReason
from rllm.workflows.multi_turn import MultiTurnWorkflow

SAMPLING = SamplingParams(temperature=1.0, max_tokens=8, seed=0)


class GuessEnv(Env):
    """Guess the secret word; 0.1 for a word of the right length, 1 for the word."""

    def __init__(self, secret: str, closes: list | None = None) -> None:
        self.secret = secret
        self.closes = closes

    def reset(self) -> tuple[str, dict[str, Any]]:
        return f"Guess the {len(self.secret)}-letter word.", {}

    async def step(self, action: str) -> EnvStep:  # async on purpose: the workflow awaits either kind
        if action == self.secret:
            return EnvStep(observation="Correct!", reward=1.0, done=True, info={"success": True})
        reward = 0.1 if len(action) == len(self.secret) else 0.0
        return EnvStep(observation=f"No, not {action}.", reward=reward)

    def close(self) -> None:
        if self.closes is not None:
            self.closes.append(self.secret)


class GuessAgent(Agent):
    system_prompt = "Reply with 'Guess: <word>'."

    def observe(self, observation: Any, reward: float, done: bool, info: dict[str, Any]) -> None:
        self.messages.append({"role": "user", "content": str(observation)})

    def act(self, reply: str) -> Any:
        self.messages.append({"role": "assistant", "content": reply})
        found = re.findall(r"Guess: (\w+)", reply)
        return found[-1] if found else InvalidAction("Write your guess as 'Guess: <word>'.")


def _run(engine: Any, workflow: Any, tasks: list[dict], group_size: int = 1) -> list:
    return run_episodes(engine, workflow, tasks, SAMPLING, group_size)


def _guesser(words: list[str]):
    """A scripted policy: the k-th reply of a conversation guesses words[k]."""
    return nth_reply([f"Guess: {w}" for w in words])


def test_turns_are_steps_with_env_rewards_and_merge_into_one_masked_row(engine: LocalEngine) -> None:
    closes: list = []
    scripted = ScriptedEngine(engine, _guesser(["bird", "cat", "dog"]))
    workflow = MultiTurnWorkflow(lambda task: GuessEnv(task["secret"], closes), GuessAgent, max_turns=5)
    (ep,) = _run(scripted, workflow, [{"task_id": "w", "secret": "dog"}])
    assert ep.termination_reason is TerminationReason.ENV_DONE and ep.is_correct
    (traj,) = ep.trajectories
    assert [s.reward for s in traj.steps] == [0.0, 0.1, 1.0]
    assert ep.reward == pytest.approx(1.1) == traj.reward
    assert ep.metrics["env/turns"] == 3 and ep.metrics["agent/invalid_actions"] == 0
    assert [s.info["action"] for s in traj.steps] == ["bird", "cat", "dog"]
    assert closes == ["dog"]  # closed once
    # Each turn's prompt is the previous prompt + the sampled reply + the environment's turn.
    for prev, nxt in zip(traj.steps, traj.steps[1:]):
        assert (
            nxt.prompt_ids[: len(prev.prompt_ids) + len(prev.response_ids)]
            == prev.prompt_ids + prev.response_ids
        )
    groups = group_episodes([ep])
    compute_advantages(groups, "reinforce", credit="per_step", gamma=0.5)
    (row,) = build_train_batch(groups).sequences
    tok = engine.tokenizer
    trained = [i for i, m in zip(row.input_ids, row.loss_mask) if m]
    assert trained == [i for s in traj.steps for i in s.response_ids]  # exactly the model's tokens
    masked_after_first = tok.decode(
        [
            i
            for i, m in zip(
                row.input_ids[len(traj.steps[0].prompt_ids) :], row.loss_mask[len(traj.steps[0].prompt_ids) :]
            )
            if not m
        ]
    )
    assert "No, not bird." in masked_after_first and "No, not cat." in masked_after_first
    # per-step returns 0 + .5*.1 + .25*1, .1 + .5*1, 1 -> REINFORCE advantages, one per turn's tokens
    advs = sorted({a for a, m in zip(row.advantages, row.loss_mask) if m})
    assert advs == pytest.approx([0.3, 0.6, 1.0])


def test_invalid_actions_cost_turns_until_the_limit(engine: LocalEngine) -> None:
    # The tiny random model never writes 'Guess: ...': every reply is an invalid action.
    workflow = MultiTurnWorkflow(GuessEnv, GuessAgent, max_turns=3, invalid_action_reward=-0.1)
    episodes = _run(engine, workflow, [{"task_id": "w", "secret": "dog"}], group_size=2)
    for ep in episodes:
        assert ep.termination_reason in (TerminationReason.MAX_TURNS, TerminationReason.MAX_RESPONSE_LENGTH)
        assert not ep.failed and ep.is_correct is False
        (traj,) = ep.trajectories
        assert len(traj.steps) == 3 and all(s.info["invalid_action"] for s in traj.steps)
        assert [s.reward for s in traj.steps] == [-0.1] * 3 and ep.reward == pytest.approx(-0.3)
        assert ep.metrics["agent/invalid_actions"] == 3
        # the model is told the format, as the next user turn
        assert traj.steps[1].messages[-1] == {
            "role": "user",
            "content": "Write your guess as 'Guess: <word>'.",
        }


def test_an_env_that_raises_fails_only_its_episode(engine: LocalEngine) -> None:
    class Broken(GuessEnv):
        def reset(self) -> tuple[str, dict[str, Any]]:
            raise RuntimeError("no map")

    closes: list = []
    workflow = MultiTurnWorkflow(
        lambda t: Broken(t["secret"], closes) if t["secret"] == "x" else GuessEnv(t["secret"]),
        GuessAgent,
        max_turns=1,
    )
    bad, good = _run(engine, workflow, [{"task_id": "a", "secret": "x"}, {"task_id": "b", "secret": "dog"}])
    assert bad.termination_reason is TerminationReason.ERROR and "no map" in bad.error and closes == ["x"]
    assert not good.failed


def test_max_turns_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        MultiTurnWorkflow(GuessEnv, GuessAgent, max_turns=0)
