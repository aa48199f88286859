"""Rewards: functions ``reward_fn(task, response) -> Outcome`` that score one model response to one task
(math, code in the sandbox, QA, countdown, an LLM judge), and the registry by which datasets and configs
name them (``get_reward("math")``, ``register_reward`` for your own; ``REWARDS``, docs/plugins.md).

Names resolve on first use: the math grader imports sympy, the code grader the sandbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "REWARDS": "rllm.rewards.registry",
    "RewardFn": "rllm.rewards.types",
    "GroundTruthCheck": "rllm.rewards.registry",
    "get_reward": "rllm.rewards.registry",
    "ground_truth_check": "rllm.rewards.registry",
    "register_reward": "rllm.rewards.registry",
    "reward_names": "rllm.rewards.registry",
    "unregister_reward": "rllm.rewards.registry",
    "number_reward": "rllm.rewards.basic",
    "make_math_reward": "rllm.rewards.math",
    "math_reward": "rllm.rewards.math",
    "make_code_reward": "rllm.rewards.code",
    "exact_match_reward": "rllm.rewards.qa",
    "make_f1_reward": "rllm.rewards.qa",
    "multiple_choice_reward": "rllm.rewards.qa",
    "countdown_reward": "rllm.rewards.countdown",
    "make_countdown_reward": "rllm.rewards.countdown",
    "finance_number_reward": "rllm.rewards.finance",
    "make_finance_reward": "rllm.rewards.finance",
    "tool_call_reward": "rllm.rewards.tool_call",
    "AsyncRewardFn": "rllm.rewards.judge",
    "make_async_llm_judge_reward": "rllm.rewards.judge",
    "make_llm_judge_reward": "rllm.rewards.judge",
    "strip_thinking": "rllm.rewards.text",
}

__all__ = [
    "REWARDS",
    "AsyncRewardFn",
    "GroundTruthCheck",
    "RewardFn",
    "countdown_reward",
    "exact_match_reward",
    "finance_number_reward",
    "get_reward",
    "ground_truth_check",
    "make_async_llm_judge_reward",
    "make_code_reward",
    "make_countdown_reward",
    "make_f1_reward",
    "make_finance_reward",
    "make_llm_judge_reward",
    "make_math_reward",
    "math_reward",
    "multiple_choice_reward",
    "number_reward",
    "register_reward",
    "reward_names",
    "strip_thinking",
    "tool_call_reward",
    "unregister_reward",
]

if TYPE_CHECKING:
    from rllm.rewards.basic import number_reward
    from rllm.rewards.code import make_code_reward
    from rllm.rewards.countdown import countdown_reward, make_countdown_reward
    from rllm.rewards.finance import finance_number_reward, make_finance_reward
    from rllm.rewards.judge import AsyncRewardFn, make_async_llm_judge_reward, make_llm_judge_reward
    from rllm.rewards.math import make_math_reward, math_reward
    from rllm.rewards.qa import exact_match_reward, make_f1_reward, multiple_choice_reward
    from rllm.rewards.registry import (
        REWARDS,
        GroundTruthCheck,
        get_reward,
        ground_truth_check,
        register_reward,
        reward_names,
        unregister_reward,
    )
    from rllm.rewards.text import strip_thinking
    from rllm.rewards.tool_call import tool_call_reward
    from rllm.rewards.types import RewardFn

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
