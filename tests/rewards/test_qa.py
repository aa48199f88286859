"""QA rewards: think-block stripping, answer extraction, SQuAD normalisation, exact match, token F1 and
multiple choice (including the replies a lenient reader gets wrong)."""

from __future__ import annotations

import json
import time

import pytest

from rllm.rewards.qa import (
    exact_match_reward,
    extract_answer,
    extract_choice,
    f1_reward,
    make_f1_reward,
    multiple_choice_reward,
    normalize_answer,
    token_f1,
)
from rllm.rewards.registry import get_reward
from rllm.rewards.text import strip_thinking


def _task(truth: object, **metadata: object) -> dict:
    task = {"task_id": "q1", "question": "?", "ground_truth": truth, "data_source": "test"}
    if metadata:
        task["metadata"] = metadata
    return task


# ------------------------------------------------------------------------------------------ thinking


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris", "Paris"),
        ("  Paris \n", "Paris"),
        ("<think>hmm, London?</think>\nParis", "Paris"),
        ("hmm, London?</think>Paris", "Paris"),  # the opening tag was in the prompt (Qwen3 templates)
        ("<think>a</think>x<think>b</think> y", "y"),
        ("<think>still thinking about Paris", None),  # cut off: nothing to grade
        ("<think>a</think>Paris<think>more", None),
        ("<think></think>", ""),
    ],
)
def test_strip_thinking(text: str, expected: str | None) -> None:
    assert strip_thinking(text) == expected


# ------------------------------------------------------------------------------- extraction, normalise


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris", "Paris"),
        ("Let me think.\nThe capital is big.\nParis", "Paris"),  # no marker: the last non-empty line
        ("It is in France.\nAnswer: Paris\nI am confident.", "Paris"),  # the Answer line beats the last line
        ("**Final Answer:** the Eiffel Tower", "the Eiffel Tower"),
        ("**Answer**: Rome**", "Rome"),
        ("Reasoning...\nThe answer is Paris.", "Paris."),
        ("Answer:\n\n  Paris  \n", "Paris"),  # empty Answer line: the next line
        ("Answer: London\nAnswer: Paris", "Paris"),  # the last one wins
        ("x <answer>Rome</answer> then <answer> Oslo </answer>\nAnswer: Paris", "Oslo"),  # tags first
        ("", ""),
    ],
)
def test_extract_answer(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   apple\tpie ", "apple pie"),
        ("U.S.A.", "usa"),  # punctuation is deleted, not spaced: as SQuAD does
        ("don't stop", "dont stop"),
        ("Theory of the Atom", "theory of atom"),  # only whole-word articles go
        ("A", ""),
        ("“Quoted” — text…", "quoted text"),  # Unicode punctuation too
        ("$100", "100"),
        ("Anthem, a hymn", "anthem hymn"),
        ("", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


# ------------------------------------------------------------------------------------------ exact match


@pytest.mark.parametrize(
    ("truth", "response", "correct"),
    [
        ("Paris", "Paris", True),
        ("Paris", "paris.", True),
        ("The Eiffel Tower", "Answer: eiffel tower", True),
        ("Paris", "<think>London</think>Paris", True),
        ("Paris", "Paris, France", False),
        (["NYC", "New York City"], "new york city", True),  # any alias
        (["NYC", "New York City"], "New York", False),
        (1969, "Answer: 1969", True),  # numeric ground truth
        ("Paris", "I reasoned a lot.\nAnswer: Paris\nThat is my final answer.", True),
        ("Paris", "<think>Paris", False),  # unclosed think: not graded
    ],
)
def test_exact_match(truth: object, response: str, correct: bool) -> None:
    result = exact_match_reward(_task(truth), response)
    assert result.is_correct is correct
    assert result.reward == float(correct)
    json.dumps(result.info)


def test_exact_match_reasons() -> None:
    assert exact_match_reward(_task("Paris"), "<think>Paris").info["reason"] == "unclosed_think"
    # An empty answer never matches, even a reference that normalises to nothing.
    result = exact_match_reward(_task("The"), "   ")
    assert not result.is_correct and result.info["reason"] == "no_answer"
    assert exact_match_reward(_task(["x", "Paris"]), "paris").info["matched"] == "Paris"


# ---------------------------------------------------------------------------------------------- F1


@pytest.mark.parametrize(
    ("prediction", "reference", "f1"),
    [
        ("Barack Obama", "Obama", 2 / 3),  # P = 1/2, R = 1
        ("the cat sat on the mat", "a cat on a mat", 6 / 7),  # "cat sat on mat" vs "cat on mat": P 3/4, R 1
        ("New York City", "York", 0.5),  # P = 1/3, R = 1
        ("red red blue", "red blue blue", 2 / 3),  # multiset overlap 2: P = R = 2/3
        ("apple", "banana", 0.0),
        ("president barack obama", "Barack Obama", 0.8),  # P = 2/3, R = 1
        ("Obama", "Barack Hussein Obama", 0.5),  # P = 1, R = 1/3
        ("The", "the", 1.0),  # both normalise to nothing
        ("anything", "the", 0.0),
    ],
)
def test_token_f1(prediction: str, reference: str, f1: float) -> None:
    assert token_f1(prediction, reference) == pytest.approx(f1)


@pytest.mark.parametrize(
    ("truth", "response", "reward", "correct"),
    [
        ("Barack Obama", "Barack Obama", 1.0, True),
        ("Barack Obama", "Obama", 2 / 3, False),  # below the 0.8 threshold
        ("Barack Obama", "President Barack Obama", 0.8, True),  # exactly at the threshold
        (["NYC", "New York City"], "New York", 0.8, True),  # best alias: P = 1, R = 2/3
        (["Obama", "Barack Obama"], "Barack Obama was president", 2 / 3, False),  # best: P 1/2, R 1
        ("Paris", "London", 0.0, False),
        ("Paris", "Long reasoning.\nAnswer: Paris", 1.0, True),
    ],
)
def test_f1_reward(truth: object, response: str, reward: float, correct: bool) -> None:
    result = f1_reward(_task(truth), response)
    assert result.reward == pytest.approx(reward)
    assert result.is_correct is correct
    json.dumps(result.info)


def test_f1_threshold_is_configurable() -> None:
    assert make_f1_reward(correct_threshold=0.5)(_task("Barack Obama"), "Obama").is_correct
    assert not make_f1_reward(correct_threshold=1.0)(
        _task("Barack Obama"), "President Barack Obama"
    ).is_correct
    with pytest.raises(ValueError, match="correct_threshold"):
        make_f1_reward(correct_threshold=0.0)


@pytest.mark.parametrize("reward_name", ["exact_match", "f1"])
@pytest.mark.parametrize("truth", [None, [], {"a": 1}, ["ok", None], True])
def test_free_form_rejects_malformed_tasks(reward_name: str, truth: object) -> None:
    with pytest.raises(ValueError, match="q1"):
        get_reward(reward_name)(_task(truth), "Paris")
    with pytest.raises(ValueError, match="no ground_truth"):
        get_reward(reward_name)({"task_id": "q2"}, "Paris")


# ----------------------------------------------------------------------------------- multiple choice


@pytest.mark.parametrize(
    ("response", "letter", "reason"),
    [
        ("The answer is (B)", "B", None),
        ("Answer: B", "B", None),
        ("**B**", "B", None),
        ("B) Paris", "B", None),
        ("B", "B", None),
        ("b", "B", None),
        ("Answer: b", "B", None),
        ("**Answer:** C", "C", None),
        ("**Answer**: (D)", "D", None),
        ("The final answer is $\\boxed{E}$.", "E", None),
        ("The correct answer is option J.", "J", None),  # MMLU-Pro's tenth option
        ("the answer is clearly (C)", "C", None),
        ("I think the answer is I.", "I", None),  # option I, not the pronoun
        ("B is correct.", "B", None),
        ("Let me check each option.\nA. Paris", "A", None),
        ("A good answer is C", "C", None),  # "A" is the article
        ("A careful reading shows the best choice is D.", "D", None),
        ("The answer is A because it is a good choice", "A", None),
        ("Comparing A and B, I pick **C**", "C", None),  # a labelled letter beats bare ones in prose
        ("The answer is B, not A", "B", None),
        ("Answer: A\nOn reflection, the answer is D.", "D", None),  # the last statement wins
        ("A or B", None, "ambiguous_choice"),
        ("Answer: A or B", None, "ambiguous_choice"),
        ("The answer is B and C", None, "ambiguous_choice"),
        ("Answer: (A), (C)", None, "ambiguous_choice"),
        ("(A) London (B) Paris", None, "ambiguous_choice"),  # listing the options picks none
        ("A) London\nB) Paris\nC) Berlin", None, "ambiguous_choice"),
        ("The answer is I think B", None, "no_choice"),  # "I think": the pronoun
        ("A good city would be Paris", None, "no_choice"),
        ("I don't know", None, "no_choice"),
        ("", None, "no_choice"),
    ],
)
def test_extract_choice(response: str, letter: str | None, reason: str | None) -> None:
    assert extract_choice(response) == (letter, reason)


@pytest.mark.parametrize(
    ("truth", "response", "correct"),
    [
        ("B", "The answer is (B)", True),
        ("b", "B", True),  # a lowercase letter as ground truth
        ("C", "The answer is (B)", False),
        ("B", "<think>A or C? The answer is A.</think>\nAnswer: B", True),  # only the reply after thinking
        ("B", "<think>The answer is B", False),
        ("J", "Answer: J", True),
    ],
)
def test_multiple_choice_reward(truth: str, response: str, correct: bool) -> None:
    result = multiple_choice_reward(_task(truth), response)
    assert result.is_correct is correct and result.reward == float(correct)
    json.dumps(result.info)


CHOICES = ["London", "Paris", "Berlin", "Rome"]


def test_multiple_choice_with_option_text() -> None:
    # Ground truth given as the option's text, when metadata.choices lists the options.
    task = _task("Paris", choices=CHOICES)
    assert multiple_choice_reward(task, "Answer: B").is_correct
    assert multiple_choice_reward(_task("paris.", choices=CHOICES), "(B)").is_correct  # normalised match
    assert not multiple_choice_reward(task, "Answer: A").is_correct
    # A reply naming no letter may give the option's text.
    assert multiple_choice_reward(task, "I am sure.\nAnswer: Paris").is_correct
    assert not multiple_choice_reward(task, "Answer: Lyon").is_correct
    # A letter beyond the listed options is marked as such.
    result = multiple_choice_reward(task, "Answer: F")
    assert not result.is_correct and result.info["reason"] == "not_an_option"
    # A one-letter ground truth is a letter even when some option's text is a letter.
    assert multiple_choice_reward(_task("B", choices=["B", "A"]), "Answer: B").info["expected"] == "B"


def test_multiple_choice_info() -> None:
    result = multiple_choice_reward(_task("B"), "A or B")
    assert result.info == {"answer": None, "expected": "B", "reason": "ambiguous_choice"}
    assert multiple_choice_reward(_task("B"), "(B)").info == {"answer": "B", "expected": "B"}


@pytest.mark.parametrize(
    ("truth", "metadata", "message"),
    [
        ("K", {}, "not a letter A-J"),
        ("Paris", {}, "metadata.choices"),
        (1, {}, "is a letter"),
        ("E", {"choices": CHOICES}, "matches 0"),  # E is beyond four options and is no option's text
        ("Madrid", {"choices": CHOICES}, "matches 0"),
        ("Paris", {"choices": ["Paris", "Paris "]}, "matches 2"),
        ("A", {"choices": ["only one"]}, "2 to 10"),
        ("A", {"choices": "London, Paris"}, "2 to 10"),
    ],
)
def test_multiple_choice_rejects_malformed_tasks(truth: object, metadata: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        multiple_choice_reward(_task(truth, **metadata), "Answer: A")
    assert "q1" in str(err.value)


def test_registry_names_these_rewards() -> None:
    assert get_reward("exact_match") is exact_match_reward
    assert get_reward("f1") is f1_reward
    assert get_reward("multiple_choice") is multiple_choice_reward


@pytest.mark.parametrize(
    "degenerate",
    [
        " " * 100_000 + "x",
        "answer: " + " " * 100_000 + "b!",
        "answer is " * 10_000,
        "<answer>" * 10_000,
        "(A" * 50_000,
        "Answer: (B " * 10_000,
        "A, " * 30_000,
    ],
)
def test_degenerate_output_is_graded_quickly(degenerate: str) -> None:
    # Repetitive output is common early in RL; the patterns must not backtrack quadratically on it.
    start = time.monotonic()
    for reward in (exact_match_reward, f1_reward, multiple_choice_reward):
        reward(_task("B"), degenerate)
    assert time.monotonic() - start < 2.0
