"""The exact rewards of the built-in tasks."""

import pytest

from rllm.rewards.basic import extract_last_number, number_match, single_number_match


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
