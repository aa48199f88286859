"""The exact rewards of the built-in tasks."""

import pytest

from rllm.rewards.basic import (
    extract_last_number,
    last_number_reward,
    number_match,
    number_reward,
    single_number_match,
)
from rllm.rewards.registry import REWARDS


@pytest.mark.parametrize(
    ("text", "answer", "expected"),
    [
        ("52", "52", True),
        ("52.", 52, True),
        ("The larger number is 52.", "52", True),
        ("  1,024 ", "1024", True),
        ("-7", "-7", True),
        ("37 is smaller than 52", "52", False),  # two numbers: not "just the number"
        ("52 or 52 or 52", "52", False),  # padding the answer with repeats is not rewarded
        ("Which number is not a factor of 76 or 76 or 76", "76", False),
        ("51", "52", False),
        ("fifty-two", "52", False),
        ("", "52", False),
    ],
)
def test_single_number_match(text: str, answer: str, expected: bool) -> None:
    assert single_number_match(text, answer) is expected


def test_last_number_helpers() -> None:
    assert extract_last_number("a 3 b 4.5 c") == "4.5"
    assert extract_last_number("none") is None
    assert number_match("so it is 12", 12)
    assert not number_match("so it is 12", 13)


@pytest.mark.parametrize(
    ("reply", "last", "single"),
    [
        ("5", 1.0, 1.0),
        ("3 + 2 = 5", 1.0, 0.0),  # right, worded as a sum: what the coordinator passes on is 5
        ("5 = 3 + 2", 0.0, 0.0),
        ("The answer is 6.", 0.0, 0.0),
        ("no number", 0.0, 0.0),
    ],
)
def test_last_number_reward_grades_the_number_passed_on(reply: str, last: float, single: float) -> None:
    task = {"task_id": "add-0", "question": "What is 3 + 2?", "ground_truth": "5"}
    got = last_number_reward(task, reply)
    assert (got.reward, got.is_correct) == (last, last == 1.0)
    assert number_reward(task, reply).reward == single
    assert REWARDS.get("last_number") is last_number_reward
    with pytest.raises(ValueError, match="no ground_truth"):
        last_number_reward({"task_id": "t"}, "5")
