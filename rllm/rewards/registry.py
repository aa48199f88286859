"""Reward functions by name, so datasets and configs can name the reward that grades them.

    from rllm.rewards.registry import get_reward
    result = get_reward("math")(task, response)

The rewards live in ``REWARDS``, a :class:`rllm.utils.registry.Registry` (docs/plugins.md). Built-ins are
given as ``"module:attribute"`` and imported on first use (the math grader pulls in sympy, the code grader
the sandbox). A reward declares, beside its function, what the rest of rllm asks of it:

- ``check``: its ground-truth check, what the reward needs of a task to grade it, asked of every row when
  a dataset that names the reward is registered or loaded;
- ``instruction``: the answer format it reads, said to the model after each question
  (``data.instruction=auto``; ``rllm.rewards.instructions``).

``register_reward`` adds a user's own function under a new name; an installed package adds one through the
``rllm.rewards`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm.rewards.types import RewardFn
from rllm.utils.registry import Registry, UnknownPluginError, load_target

__all__ = [
    "REWARDS",
    "GroundTruthCheck",
    "UnknownRewardError",
    "get_reward",
    "ground_truth_check",
    "register_reward",
    "reward_instruction",
    "reward_names",
    "unregister_reward",
]

GroundTruthCheck = Callable[[dict[str, Any]], "str | None"]
"""``check(task)``: why the reward cannot grade ``task`` (its ground truth is unusable), or None."""


class UnknownRewardError(UnknownPluginError):
    """No reward of that name is registered; the message says which are (and the closest one)."""


def _check_reward(name: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"reward {name!r} must be a function (task, response) -> Outcome, not {fn!r}")


REWARDS: Registry[RewardFn] = Registry("reward", group="rllm.rewards", check=_check_reward)
"""Every reward by name. ``Plugin.extra``: ``check`` (a ground-truth check) and ``instruction``."""

_BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
_ANSWER_LINE = "End your reply with a line 'Answer: <short answer>'."

REWARDS.register("number", "rllm.rewards.basic:number_reward")
REWARDS.register("last_number", "rllm.rewards.basic:last_number_reward")
REWARDS.register("number_list", "rllm.rewards.basic:number_list_reward")  # its tasks say the format
REWARDS.register(
    "math",
    "rllm.rewards.math:math_reward",
    check="rllm.rewards.math:ground_truth_problem",
    instruction=_BOXED,
)
REWARDS.register(
    "code",
    "rllm.rewards.code:code_reward",
    instruction="Write your solution as a complete Python program in one ```python code block.",
)
REWARDS.register("exact_match", "rllm.rewards.qa:exact_match_reward", instruction=_ANSWER_LINE)
REWARDS.register("f1", "rllm.rewards.qa:f1_reward", instruction=_ANSWER_LINE)
REWARDS.register(
    "multiple_choice",
    "rllm.rewards.qa:multiple_choice_reward",
    instruction="Answer with the letter of the correct option.",
)
REWARDS.register("countdown", "rllm.rewards.countdown:countdown_reward")  # its tasks say the format
REWARDS.register(
    "finance_number",
    "rllm.rewards.finance:finance_number_reward",
    check="rllm.rewards.finance:ground_truth_problem",
)
REWARDS.register(
    "tool_call",
    "rllm.rewards.tool_call:tool_call_reward",
    check="rllm.rewards.tool_call:ground_truth_problem",
)


def reward_names() -> list[str]:
    """Every name ``get_reward`` accepts."""
    return sorted(REWARDS)


def register_reward(
    name: str,
    fn: RewardFn,
    *,
    overwrite: bool = False,
    check: GroundTruthCheck | str | None = None,
    instruction: str | None = None,
) -> None:
    """Make ``fn`` available as ``get_reward(name)``; ``check`` (optional) is its ground-truth check and
    ``instruction`` (optional) the answer format it reads, told to the model after each question."""
    if not overwrite and name in REWARDS:
        raise ValueError(f"reward {name!r} already exists: pass overwrite=True to replace it")
    REWARDS.register(name, fn, replace=overwrite, check=check, instruction=instruction)


def unregister_reward(name: str) -> None:
    """Forget reward ``name`` (a test's reward, say); unknown names are ignored."""
    REWARDS.unregister(name)


def get_reward(name: str) -> RewardFn:
    """The reward function registered as ``name``."""
    try:
        return REWARDS.get(name)
    except UnknownPluginError as exc:
        raise UnknownRewardError(*exc.args) from None


def ground_truth_check(name: str) -> GroundTruthCheck | None:
    """The ground-truth check of reward ``name``, or None when it declares none (every row is accepted)."""
    if name not in REWARDS:
        return None
    plugin = REWARDS.plugin(name)
    check = plugin.extra.get("check")
    if isinstance(check, str):
        plugin.extra["check"] = check = load_target(check)
    return check  # type: ignore[no-any-return]


def reward_instruction(name: str | None) -> str | None:
    """The answer format reward ``name`` reads, in words for the model; None when it declares none."""
    if name is None or name not in REWARDS:
        return None
    return REWARDS.plugin(name).extra.get("instruction")  # type: ignore[no-any-return]
