"""The ``finance_number`` reward: a numeric answer to a question over a financial report (FinQA,
ConvFinQA, TAT-QA), right within a relative tolerance, with percentages read either way.

The answer is read from the reply as ``extract_answer`` does for QA (the last ``<answer>`` block, else the
last "Answer:" line, else the last non-empty line), or from the last ``\\boxed{}``; its number is the last
one written there. Numbers may carry ``$``, thousands commas, a sign or accounting parentheses
(``(1,234)`` is -1234) and a ``%``.

Percentages: a number written with ``%`` (in the reply or in the ground truth) also counts as its
fraction, so a ground truth ``0.5326`` (what FinQA's program computes) accepts ``53.26%`` and
``0.5326``, and a ground truth ``53.26%`` accepts ``53.26%``, ``53.26`` ... as well as ``0.5326``. A bare
``53.26`` for a ground truth ``0.5326`` is wrong: the reply must say it is a percentage.

Close enough: ``|a - b| <= rel_tol * max(|a|, |b|)`` (default 1 %, for answers rounded to a few digits),
or ``|a - b| <= 1e-6``. A ground truth that is not a number (TAT-QA's spans, "yes"/"no") is compared as
text after ``normalize_answer``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rllm.rewards.qa import extract_answer, normalize_answer
from rllm.rewards.text import strip_thinking
from rllm.rewards.types import RewardFn
from rllm.types import Outcome

DEFAULT_REL_TOL = 0.01
_ABS_TOL = 1e-6
_NUMBER = re.compile(
    r"(?P<open>\()?\s*(?P<sign>[-−+])?\s*\$?\s*"
    r"(?P<digits>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[-+]?\d+))?\s*(?P<close>\))?\s*(?P<pct>%|percent\b)?",
    re.IGNORECASE,
)


def parse_number(text: str) -> tuple[float, bool] | None:
    """The last number in ``text`` and whether it is a percentage; None when there is none."""
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    value = float(m["digits"].replace(",", "")) * (10 ** int(m["exp"]) if m["exp"] else 1)
    if m["sign"] in ("-", "−") or (m["open"] and m["close"]):
        value = -value
    return value, m["pct"] is not None


def _readings(number: tuple[float, bool]) -> tuple[float, ...]:
    value, percent = number
    return (value, value / 100) if percent else (value,)


def numbers_match(predicted: tuple[float, bool], truth: tuple[float, bool], rel_tol: float) -> bool:
    """True when any reading of ``predicted`` is within the tolerance of any reading of ``truth``."""
    return any(
        math.isclose(a, b, rel_tol=rel_tol, abs_tol=_ABS_TOL)
        for a in _readings(predicted)
        for b in _readings(truth)
    )


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, open_at = 0, start + len("\\boxed")
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i]
    return None


def _references(task: dict[str, Any]) -> list[str]:
    truth = task.get("ground_truth")
    items = truth if isinstance(truth, list) else [truth]
    refs = [str(i).strip() for i in items if isinstance(i, (str, int, float)) and not isinstance(i, bool)]
    refs = [r for r in refs if r]
    if not refs:
        raise ValueError(f"finance task {task.get('task_id', '?')!r}: {ground_truth_problem(task)}")
    return refs


def ground_truth_problem(task: dict[str, Any]) -> str | None:
    """Why ``finance_number`` cannot grade ``task`` (None when it can)."""
    truth = task.get("ground_truth")
    items = truth if isinstance(truth, list) else [truth]
    if any(
        isinstance(i, (int, float)) and not isinstance(i, bool) or isinstance(i, str) and i.strip()
        for i in items
    ):
        return None
    return (
        f"ground_truth {truth!r:.80} holds no answer: give a number or a non-empty string (or a list of them)"
    )


def make_finance_reward(*, rel_tol: float = DEFAULT_REL_TOL) -> RewardFn:
    """A ``finance_number`` reward with relative tolerance ``rel_tol`` (see the module docstring)."""
    if not 0.0 <= rel_tol < 1.0:
        raise ValueError(f"rel_tol must be in [0, 1), got {rel_tol}")

    def finance_number_reward(task: dict[str, Any], response: str) -> Outcome:
        references = _references(task)
        text = strip_thinking(response)
        if text is None:
            return Outcome(reward=0.0, is_correct=False, info={"reason": "unclosed_think"})
        boxed = _last_boxed(text)
        answer = (boxed if boxed is not None else extract_answer(text)).strip()
        predicted = parse_number(answer)
        correct = False
        for reference in references:
            truth = parse_number(reference) if _NUMBER.fullmatch(reference.strip()) else None
            if truth is None:
                correct = bool(normalize_answer(answer)) and normalize_answer(answer) == normalize_answer(
                    reference
                )
            elif predicted is not None:
                correct = numbers_match(predicted, truth, rel_tol)
            if correct:
                break
        info = {
            "answer": answer,
            "value": predicted[0] if predicted else None,
            "reason": "correct" if correct else "wrong",
        }
        return Outcome(reward=float(correct), is_correct=correct, info=info)

    return finance_number_reward


finance_number_reward: RewardFn = make_finance_reward()
"""The registered ``finance_number`` reward (``make_finance_reward()``: 1 % relative tolerance)."""
