"""The environment interface: what a multi-turn agent acts in.

An environment is built from one task (``Env.from_task(task)``), then::

    observation, info = env.reset()
    result = env.step(action)      # EnvStep(observation, reward, done, info)

``reset`` and ``step`` may be plain or ``async`` methods; the multi-turn workflow awaits whichever it
gets. ``reward`` is the reward of this step only (the workflow sums them into the episode's return and
keeps each on its step for per-step credit assignment). ``done`` ends the episode; an environment that
wants the model to try again after a bad action returns ``done=False`` with an observation saying why.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EnvStep(BaseModel):
    """What ``Env.step`` returns."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    observation: Any = None
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class Env(ABC):
    """A task the agent acts in over several turns. Subclasses implement ``reset`` and ``step``."""

    @classmethod
    def from_task(cls, task: dict[str, Any]) -> Env:
        """Build the environment for one dataset row. Default: ``cls(**task)`` minus bookkeeping keys."""
        skip = {"task_id", "id", "data_source"}
        return cls(**{k: v for k, v in task.items() if k not in skip})

    @abstractmethod
    def reset(self) -> tuple[Any, dict[str, Any]]:
        """Start the episode: the first observation and an info dict."""

    @abstractmethod
    def step(self, action: Any) -> EnvStep:
        """Apply the agent's action."""

    def close(self) -> None:  # optional hook
        """Release what the environment holds (processes, files). Called once, even after an error."""
