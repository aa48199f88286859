"""Reward functions by name, so datasets and configs can name the reward that grades them.

    from rllm.rewards.registry import get_reward
    result = get_reward("math")(task, response)

Entries are imported on first use (the math grader pulls in sympy, the code grader the sandbox).
``register_reward`` adds a user's own function under a new name, optionally with a ground-truth check
(``ground_truth_check``): what the reward needs of a task to grade it, asked of every row when a dataset
that names the reward is registered or loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rllm.rewards.types import RewardFn
from rllm.utils.config import unknown_name

GroundTruthCheck = Callable[[dict[str, Any]], "str | None"]
"""``check(task)``: why the reward cannot grade ``task`` (its ground truth is unusable), or None."""

_BUILTIN: dict[str, str] = {
    "number": "rllm.rewards.basic:number_reward",
    "math": "rllm.rewards.math:math_reward",
    "code": "rllm.rewards.code:code_reward",
    "exact_match": "rllm.rewards.qa:exact_match_reward",
    "f1": "rllm.rewards.qa:f1_reward",
    "multiple_choice": "rllm.rewards.qa:multiple_choice_reward",
    "countdown": "rllm.rewards.countdown:countdown_reward",
    "finance_number": "rllm.rewards.finance:finance_number_reward",
    "tool_call": "rllm.rewards.tool_call:tool_call_reward",
}
_BUILTIN_CHECKS: dict[str, str] = {
    "math": "rllm.rewards.math:ground_truth_problem",
    "finance_number": "rllm.rewards.finance:ground_truth_problem",
    "tool_call": "rllm.rewards.tool_call:ground_truth_problem",
}
_USER: dict[str, RewardFn] = {}
_USER_CHECKS: dict[str, GroundTruthCheck] = {}


class UnknownRewardError(KeyError):
    """No reward of that name is registered; the message says which are (and the closest one)."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


def reward_names() -> list[str]:
    """Every name ``get_reward`` accepts."""
    return sorted({*_BUILTIN, *_USER})


def register_reward(
    name: str, fn: RewardFn, *, overwrite: bool = False, check: GroundTruthCheck | None = None
) -> None:
    """Make ``fn`` available as ``get_reward(name)``; ``check`` (optional) is its ground-truth check."""
    if not overwrite and (name in _BUILTIN or name in _USER):
        raise ValueError(f"reward {name!r} already exists: pass overwrite=True to replace it")
    _USER[name] = fn
    _USER_CHECKS.pop(name, None)
    if check is not None:
        _USER_CHECKS[name] = check


def get_reward(name: str) -> RewardFn:
    """The reward function registered as ``name``."""
    if name in _USER:
        return _USER[name]
    if name not in _BUILTIN:
        raise UnknownRewardError(unknown_name("reward", name, reward_names()))
    module, attr = _BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), attr)


def ground_truth_check(name: str) -> GroundTruthCheck | None:
    """The ground-truth check of reward ``name``, or None when it declares none (every row is accepted)."""
    if name in _USER:
        return _USER_CHECKS.get(name)
    if name not in _BUILTIN_CHECKS:
        return None
    module, attr = _BUILTIN_CHECKS[name].split(":")
    return getattr(importlib.import_module(module), attr)
