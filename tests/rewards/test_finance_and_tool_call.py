"""The ``finance_number`` and ``tool_call`` rewards, on replies written the ways models write them."""

from __future__ import annotations

import json

import pytest

from rllm.rewards.finance import make_finance_reward, parse_number
from rllm.rewards.registry import get_reward, ground_truth_check
from rllm.rewards.tool_call import extract_tool_calls, tool_call_reward


def finance(truth: object, reply: str, **kwargs: object) -> bool:
    reward = make_finance_reward(**kwargs) if kwargs else get_reward("finance_number")
    return reward({"task_id": "t", "ground_truth": truth}, reply).is_correct


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Answer: 1,234.5", (1234.5, False)),
        ("a loss of $(94) million", (-94.0, False)),
        ("−3.2%", (-3.2, True)),
        ("it grew 12 percent", (12.0, True)),
        ("2007 and then 0.5326", (0.5326, False)),
        ("1.5e3", (1500.0, False)),
        ("no number", None),
    ],
)
def test_parse_number(text: str, parsed: tuple[float, bool] | None) -> None:
    assert parse_number(text) == parsed


@pytest.mark.parametrize(
    ("truth", "reply", "correct"),
    [
        ("0.5326", "Answer: 53.26%", True),  # FinQA's ratio, said as a percentage
        ("0.5326", "Answer: 0.5326", True),
        ("0.5326", "Answer: 53.3%", True),  # rounded: within 1 %
        ("0.5326", "Answer: 53.26", False),  # a bare 53.26 is not a ratio of 0.5326
        ("53.26%", "Answer: 0.5326", True),
        ("53.26", "The answer is 53.26%.", True),
        ("-94.0", "Answer: (94)", True),
        ("-94.0", "Answer: 94", False),
        ("1496.5", "Answer: $1,496.5 million", True),
        ("100", "Answer: 102", False),  # 2 % off
        ("100", "\\boxed{100.4}", True),
        ("yes", "Answer: Yes.", True),  # a non-numeric ground truth: normalised text
        ("yes", "Answer: no", False),
        ("0.5", "<think>maybe 50%</think>", False),  # no answer after the reasoning
        (12, "Answer: 12", True),
        (["12", "12.0"], "Answer: 12.0", True),
    ],
)
def test_finance_number(truth: object, reply: str, correct: bool) -> None:
    assert finance(truth, reply) is correct


def test_finance_tolerance_and_checks() -> None:
    assert finance("100", "Answer: 102", rel_tol=0.05) and not finance("100", "Answer: 100.5", rel_tol=0.0)
    with pytest.raises(ValueError, match="rel_tol"):
        make_finance_reward(rel_tol=1.5)
    check = ground_truth_check("finance_number")
    assert check is not None and check({"ground_truth": "1.5"}) is None
    assert "holds no answer" in check({"ground_truth": ["", None]})
    with pytest.raises(ValueError, match="holds no answer"):
        get_reward("finance_number")({"task_id": "t", "ground_truth": ""}, "Answer: 1")


CALLS = [
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}},
    {"name": "get_time", "arguments": {}},
]


@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        (json.dumps(CALLS), True),
        (json.dumps(CALLS[::-1]), True),  # order is free
        (
            '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n'
            + '<tool_call>{"name": "get_weather", "arguments": {"days": 3.0, "city": "Paris"}}</tool_call>',
            True,
        ),
        (
            "Sure:\n```json\n"
            + json.dumps(
                [{"function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}} for c in CALLS]
            )
            + "\n```",
            True,
        ),
        ("I will call them: " + json.dumps(CALLS) + " now.", True),
        (json.dumps(CALLS[:1]), False),  # one call missing
        (json.dumps([*CALLS, CALLS[1]]), False),  # one call too many
        (json.dumps([{**CALLS[0], "arguments": {"city": "Lyon", "days": 3}}, CALLS[1]]), False),
        ("<think>" + json.dumps(CALLS), False),  # reasoning never closed
        ("get_weather(city='Paris')", False),
    ],
)
def test_tool_call(reply: str, correct: bool) -> None:
    result = tool_call_reward({"task_id": "t", "ground_truth": CALLS}, reply)
    assert (result.reward, result.is_correct) == (float(correct), correct), result.info


def test_tool_call_ground_truth_and_info() -> None:
    as_json = {"task_id": "t", "ground_truth": json.dumps(CALLS[0])}  # one call, as a JSON string
    assert tool_call_reward(as_json, json.dumps(CALLS[0])).is_correct
    result = tool_call_reward({"task_id": "t", "ground_truth": CALLS}, json.dumps(CALLS[:1]))
    assert result.info["missing"] == ["get_time"] and result.info["unexpected"] == []
    check = ground_truth_check("tool_call")
    assert check is not None and check({"ground_truth": CALLS}) is None
    assert "is not a list of calls" in check({"ground_truth": [{"name": 3}]})
    with pytest.raises(ValueError, match="is not a list of calls"):
        tool_call_reward({"task_id": "t", "ground_truth": "nope"}, "[]")
    assert extract_tool_calls("<tool_call>not json</tool_call>") is None
