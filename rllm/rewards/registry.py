"""Reward functions by name, so datasets and configs can name the reward that grades them.

    from rllm.rewards.registry import get_reward
    result = get_reward("math")(task, response)

Entries are imported on first use (the math grader pulls in sympy, the code grader the sandbox).
``register_reward`` adds a user's own function under a new name.
"""

from __future__ import annotations

import importlib

from rllm.rewards.types import RewardFn

_BUILTIN: dict[str, str] = {
    "number": "rllm.rewards.basic:number_reward",
    "math": "rllm.rewards.math:math_reward",
    "code": "rllm.rewards.code:code_reward",
    "exact_match": "rllm.rewards.qa:exact_match_reward",
    "f1": "rllm.rewards.qa:f1_reward",
    "multiple_choice": "rllm.rewards.qa:multiple_choice_reward",
    "countdown": "rllm.rewards.countdown:countdown_reward",
}
_USER: dict[str, RewardFn] = {}


def reward_names() -> list[str]:
    """Every name ``get_reward`` accepts."""
    return sorted({*_BUILTIN, *_USER})


def register_reward(name: str, fn: RewardFn, *, overwrite: bool = False) -> None:
    """Make ``fn`` available as ``get_reward(name)``."""
    if not overwrite and (name in _BUILTIN or name in _USER):
        raise ValueError(f"reward {name!r} already exists: pass overwrite=True to replace it")
    _USER[name] = fn


def get_reward(name: str) -> RewardFn:
    """The reward function registered as ``name``."""
    if name in _USER:
        return _USER[name]
    if name not in _BUILTIN:
        raise KeyError(f"unknown reward {name!r}: choose one of {', '.join(reward_names())}")
    module, attr = _BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), attr)
