"""Countdown: equation extraction, the safe parser, the rules (each number exactly once, exact arithmetic),
the format reward, and the task generator's splits and solvability."""

from __future__ import annotations

import json
import time
from itertools import permutations

import pytest

from rllm.rewards.countdown import (
    countdown_reward,
    countdown_tasks,
    extract_equation,
    make_countdown_reward,
    solve_countdown,
)
from rllm.rewards.registry import get_reward


def _task(target: int, numbers: list[int]) -> dict:
    return {
        "task_id": "cd1",
        "question": "?",
        "ground_truth": {"target": target, "numbers": numbers},
        "data_source": "builtin/countdown",
        "metadata": {},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>(3 + 5) * 2</answer>", "(3 + 5) * 2"),
        ("<answer>1+1</answer> text <answer> 2 * 8 </answer>", "2 * 8"),  # the last block
        ("<answer>(3 + 5) * 2.</answer>", "(3 + 5) * 2"),  # a sentence-final period
        (
            "I tried 3 + 5 = 8.\nSo the equation is (3 + 5) * 2 = 16.",
            "(3 + 5) * 2 = 16",
        ),  # last line with one
        ("Step 1: 3 + 5 = 8", "3 + 5 = 8"),  # "1:" is not arithmetic
        ("(3 + 5) * 2\nThat is my answer.", "(3 + 5) * 2"),
        ("<answer>$3 \\times 5 \\div 2$</answer>", "3 * 5 / 2"),
        ("3 × 5 − 2 ÷ 1", "3 * 5 - 2 / 1"),
        ("The answer is 16.", None),  # a number, no equation
        ("no numbers here", None),
        ("<answer>  </answer>", None),
    ],
)
def test_extract_equation(text: str, expected: str | None) -> None:
    assert extract_equation(text) == expected


@pytest.mark.parametrize(
    ("target", "numbers", "response", "correct", "reason"),
    [
        (16, [3, 5, 2], "<answer>(3 + 5) * 2</answer>", True, None),
        (16, [3, 5, 2], "<answer>2 * (5 + 3) = 16</answer>", True, None),  # any order, "= target" allowed
        (16, [3, 5, 2], "<think>try 3*5+2=17, no</think>\n(5 + 3) * 2 = 16", True, None),
        (24, [8, 3, 8, 3], "<answer>8 / (3 - 8 / 3)</answer>", True, None),  # fractional intermediate
        (24, [8, 3, 8, 3], "<answer>8 * 3 * (8 - 8)</answer>", False, "number_reused"),  # 8 three times
        (4, [5, 1], "<answer>-1 + 5</answer>", True, None),  # unary minus
        (4, [2, 2, 1], "<answer>2 * 2 * 1</answer>", True, None),  # a number given twice is used twice
        (17, [3, 5, 2], "<answer>(3 + 5) * 2</answer>", False, "wrong_value"),
        (16, [3, 5, 2], "<answer>(3 + 5) * 2 = 17</answer>", False, "rhs_not_target"),
        (16, [3, 5, 2], "<answer>(3 + 3) * 2 + 4</answer>", False, "number_not_given"),
        (16, [3, 5, 2], "<answer>(3 + 3) * 2 + 5</answer>", False, "number_reused"),
        (8, [3, 5, 2], "<answer>3 + 5</answer>", False, "number_unused"),  # every number must be used
        (4, [4, 2, 2], "<answer>4 / (2 - 2)</answer>", False, "division_by_zero"),
        (16, [3, 5, 2], "<answer>16</answer>", False, "number_not_given"),
        (1024, [2, 10], "<answer>2**10</answer>", False, "disallowed_syntax"),
        (1, [9, 9, 9], "<answer>9**9**9**9</answer>", False, "disallowed_syntax"),  # refused, never computed
        (7, [7, 2], "<answer>7 // 2 * 2</answer>", False, "disallowed_syntax"),
        (0, [1], "<answer>__import__('os').system('true')</answer>", False, "disallowed_syntax"),
        (0, [1], "<answer>(lambda: 1)()</answer>", False, "disallowed_syntax"),
        (6, [3, 3], "<answer>3.0 + 3</answer>", False, "disallowed_syntax"),  # integers only
        (6, [3, 3], "<answer>3 + 3 = 6 = 6</answer>", False, "disallowed_syntax"),
        (6, [3, 3], "<answer>3 + +3</answer>", False, "disallowed_syntax"),  # only unary minus
        (6, [3, 3], "<answer>(3 + 3</answer>", False, "disallowed_syntax"),
        (6, [3, 3], "<answer>" + "(" * 200 + "3 + 3" + ")" * 200 + "</answer>", False, "disallowed_syntax"),
        (6, [3, 3], "<answer>3 + 3 + " + "9" * 5000 + "</answer>", False, "disallowed_syntax"),
        (6, [3, 3], "I don't know.", False, "no_equation"),
        (6, [3, 3], "<think>3 + 3", False, "unclosed_think"),
    ],
)
def test_countdown_reward(
    target: int, numbers: list[int], response: str, correct: bool, reason: str | None
) -> None:
    result = countdown_reward(_task(target, numbers), response)
    assert result.is_correct is correct
    assert result.reward == float(correct)
    assert result.info.get("reason") == reason
    json.dumps(result.info)


def test_value_is_reported_exactly() -> None:
    result = countdown_reward(_task(2, [5, 3, 1]), "<answer>5 / 3 + 1</answer>")
    assert result.info["value"] == "8/3" and result.info["reason"] == "wrong_value"


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("<answer>(3 + 5) * 2</answer>", 1.0),
        ("<answer>(3 + 5) * 3</answer>", 0.1),  # well-formed, breaks a rule
        ("<answer>3 + 5 + 2</answer>", 0.1),  # well-formed, wrong value
        ("<answer>4 / (2 - 2) + 3 + 5 + 2</answer>", 0.1),  # division by zero still parsed
        ("<answer>2**3 + 5 + 3</answer>", 0.0),  # outside the grammar: no format credit
        ("no equation", 0.0),
    ],
)
def test_format_reward(response: str, reward: float) -> None:
    reward_fn = make_countdown_reward(format_reward=0.1)
    result = reward_fn(_task(16, [3, 5, 2]), response)
    assert result.reward == pytest.approx(reward)
    assert result.is_correct is (reward == 1.0)


def test_division_by_zero_with_the_right_numbers() -> None:
    result = make_countdown_reward(format_reward=0.1)(
        _task(10, [4, 2, 2, 5]), "<answer>4 / (2 - 2) + 5</answer>"
    )
    assert result.reward == pytest.approx(0.1) and result.info["reason"] == "division_by_zero"


@pytest.mark.parametrize(
    "truth",
    [
        None,
        {"target": 3},
        {"target": "3", "numbers": [1, 2]},
        {"target": 3, "numbers": []},
        {"target": 3, "numbers": [1, 2.0]},
        {"target": 3, "numbers": [True, 2]},
        [3, 1, 2],
    ],
)
def test_malformed_task_raises(truth: object) -> None:
    with pytest.raises(ValueError, match="cd1"):
        countdown_reward({"task_id": "cd1", "ground_truth": truth}, "<answer>1 + 2</answer>")


def test_format_reward_bounds() -> None:
    with pytest.raises(ValueError, match="format_reward"):
        make_countdown_reward(format_reward=1.0)


def _brute_force_solvable(numbers: list[int], target: int) -> bool:
    """Independent of solve_countdown: every order of the numbers, operator choice and bracketing."""
    from fractions import Fraction

    def values(items: tuple[Fraction, ...]) -> set[Fraction]:
        if len(items) == 1:
            return {items[0]}
        out: set[Fraction] = set()
        for cut in range(1, len(items)):
            for a in values(items[:cut]):
                for b in values(items[cut:]):
                    out |= {a + b, a - b, a * b}
                    if b != 0:
                        out.add(a / b)
        return out

    return any(
        Fraction(target) in values(tuple(map(Fraction, order))) for order in set(permutations(numbers))
    )


@pytest.mark.parametrize(
    ("numbers", "target"),
    [
        ([3, 5, 2], 16),
        ([8, 3, 8, 3], 24),
        ([1, 1, 1], 100),
        ([4, 4, 10, 10], 24),
        ([99, 98, 97, 96], 1),
        ([2, 3], 5),
        ([2, 3], 7),
        ([5], 5),
        ([1, 5, 5, 5], 24),
    ],
)
def test_solver_agrees_with_brute_force(numbers: list[int], target: int) -> None:
    solution = solve_countdown(numbers, target)
    assert (solution is not None) is _brute_force_solvable(numbers, target)
    if solution is not None:
        assert countdown_reward(_task(target, numbers), f"<answer>{solution}</answer>").is_correct


def test_generator_splits_are_disjoint_and_solvable() -> None:
    start = time.monotonic()
    train = countdown_tasks("train", 300, seed=0)
    test = countdown_tasks("test", 100, seed=0)
    other_seed = countdown_tasks("test", 100, seed=1)

    def puzzle(task: dict) -> tuple:
        return task["ground_truth"]["target"], tuple(sorted(task["ground_truth"]["numbers"]))

    assert len({puzzle(t) for t in train}) == 300 and len({puzzle(t) for t in test}) == 100  # distinct
    assert not {puzzle(t) for t in train} & {puzzle(t) for t in test + other_seed}
    assert len({t["task_id"] for t in train + test}) == 400
    for task in train + test:
        truth = task["ground_truth"]
        assert task["data_source"] == "builtin/countdown"
        assert 1 <= truth["target"] <= 100 and all(1 <= n <= 99 for n in truth["numbers"])
        assert len(truth["numbers"]) == task["metadata"]["n_numbers"] in (3, 4)
        assert str(truth["target"]) in task["question"] and "<answer>" in task["question"]
        # Solvable: the stored solution passes the reward, and the independent solver finds one.
        assert countdown_reward(task, f"<answer>{task['metadata']['solution']}</answer>").is_correct
        assert solve_countdown(truth["numbers"], truth["target"]) is not None
        json.dumps(task)
    assert [t["metadata"]["n_numbers"] for t in train[:4]] == [3, 4, 3, 4]
    assert time.monotonic() - start < 10


def test_generator_is_deterministic_and_validates() -> None:
    assert countdown_tasks("train", 20, seed=3) == countdown_tasks("train", 20, seed=3)
    assert countdown_tasks("train", 20, seed=3) != countdown_tasks("train", 20, seed=4)
    small = countdown_tasks("train", 10, n_numbers=(2,), max_number=10, max_target=20)
    assert all(t["ground_truth"]["target"] <= 20 and max(t["ground_truth"]["numbers"]) <= 10 for t in small)
    with pytest.raises(ValueError, match="split"):
        countdown_tasks("dev", 1)
    with pytest.raises(ValueError, match="n_numbers"):
        countdown_tasks("train", 1, n_numbers=(1,))
    with pytest.raises(ValueError, match="fewer tasks"):
        countdown_tasks("test", 50, n_numbers=(2,), max_number=2, max_target=4)  # too few distinct puzzles


def test_registry_names_countdown() -> None:
    assert get_reward("countdown") is countdown_reward


@pytest.mark.parametrize(
    "degenerate", ["(" * 100_000, "1+" * 50_000, "<answer>" * 10_000, " 1 " * 30_000 + "x"]
)
def test_degenerate_output_is_graded_quickly(degenerate: str) -> None:
    start = time.monotonic()
    assert not countdown_reward(_task(16, [3, 5, 2]), degenerate).is_correct
    assert time.monotonic() - start < 2.0
