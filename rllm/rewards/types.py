"""What a reward function returns, and the shape every reward function has.

A reward function scores one model response to one task::

    def reward_fn(task: dict, response: str) -> RewardResult

``task`` is a row in the common task schema (``task_id``, ``question``, ``ground_truth``,
``data_source``, ``metadata``); ``response`` is the model's final text. The function never raises on
bad model output (that scores 0 with the reason in ``info``); it raises ``ValueError`` only when the
*task* is malformed (a missing or unusable ``ground_truth``), which is a bug in the dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RewardResult:
    """``reward`` is what training optimises; ``is_correct`` is what accuracy counts; ``info`` says why
    (the extracted answer, per-test results, the judge's verdict, ...) and must be JSON-serialisable.
    ``metrics`` are numbers the run's step metrics average over episodes (the code reward's
    ``reward/code/isolation/bwrap``: which sandbox graded)."""

    reward: float
    is_correct: bool
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


RewardFn = Callable[[dict[str, Any], str], RewardResult]
