"""The shape every reward function has.

A reward function scores one model response to one task::

    def reward_fn(task: dict, response: str) -> Outcome

``task`` is a row in the common task schema (``task_id``, ``question``, ``ground_truth``,
``data_source``, ``metadata``); ``response`` is the model's final text. The result is an
:class:`~rllm.types.Outcome`: ``reward`` is what training optimises, ``is_correct`` what accuracy counts,
``info`` says why (the extracted answer, per-test results, the judge's verdict, ...) and must be
JSON-serialisable; ``metrics`` are numbers the run's step metrics average over episodes (the code
reward's ``reward/code/isolation/bwrap``: which sandbox graded). The function never raises on bad model
output (that scores 0 with the reason in ``info``); it raises ``ValueError`` only when the *task* is
malformed (a missing or unusable ``ground_truth``), which is a bug in the dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm.types import Outcome

RewardFn = Callable[[dict[str, Any], str], Outcome]
