"""The agent interface: turns observations into chat messages and model replies into actions.

The multi-turn workflow drives it::

    agent.reset(task)
    agent.observe(observation, reward=0.0, done=False, info=info)   # the env's first observation
    while not done:
        reply = sample(agent.messages)                  # one LLM call, recorded as a Step
        action = agent.act(reply)                       # appends the assistant turn, parses the action
        result = env.step(action)
        agent.observe(result.observation, result.reward, result.done, result.info)

An agent keeps the conversation in ``self.messages`` (OpenAI chat format). ``act`` may return
``InvalidAction(message)`` when the reply holds no usable action: the workflow then skips the env and
shows ``message`` to the model as the next observation (a counted ``agent/invalid_actions``), so a bad
reply costs a turn, never the episode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InvalidAction:
    """``Agent.act``'s answer when the reply has no action; ``message`` is what the model is told."""

    message: str


class Agent(ABC):
    """Holds one episode's conversation. Subclasses implement ``observe`` and ``act``."""

    system_prompt: str | None = None

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def reset(self, task: dict[str, Any]) -> None:
        """Start a new episode on ``task``: clear the conversation, add the system prompt if any."""
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []

    @abstractmethod
    def observe(self, observation: Any, reward: float, done: bool, info: dict[str, Any]) -> None:
        """Turn an environment observation into messages (usually one user turn)."""

    @abstractmethod
    def act(self, reply: str) -> Any:
        """Record the model's reply as an assistant turn and return the action it names
        (or ``InvalidAction``)."""
