"""Small exact rewards for procedurally generated tasks."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rllm.types import Outcome

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def extract_last_number(text: str) -> str | None:
    """The last number written in ``text`` (commas inside numbers ignored), or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return found[-1] if found else None


def number_match(text: str, answer: str | float) -> bool:
    """True when the last number in ``text`` equals ``answer`` numerically."""
    got = extract_last_number(text)
    if got is None:
        return False
    try:
        return float(got) == float(answer)
    except ValueError:
        return False


def single_number_match(text: str, answer: str | float) -> bool:
    """True when ``text`` contains exactly one number and it equals ``answer``.

    For prompts that ask for "just the number": "52", "52." and "The larger number is 52." pass;
    "37 is smaller than 52" and degenerate repetition ("52 or 52 or 52") do not, so a policy cannot
    collect reward by listing candidates or by padding its answer with numbers.
    """
    found = _NUMBER.findall(text.replace(",", ""))
    if len(found) != 1:
        return False
    try:
        return float(found[0]) == float(answer)
    except ValueError:
        return False


def _one_number_reward(
    task: dict[str, Any], response: str, match: Callable[[str, str | float], bool]
) -> Outcome:
    """1 when ``match(response, task["ground_truth"])``; the reply's last number in ``info``."""
    if "ground_truth" not in task:
        raise ValueError(f"task {task.get('task_id', '?')!r} has no ground_truth")
    correct = match(response, task["ground_truth"])
    return Outcome(reward=float(correct), is_correct=correct, info={"answer": extract_last_number(response)})


def number_reward(task: dict[str, Any], response: str) -> Outcome:
    """Reward of the built-in arithmetic tasks: 1 when the reply states exactly one number and it is
    ``task["ground_truth"]`` (see ``single_number_match``)."""
    return _one_number_reward(task, response, single_number_match)


def last_number_reward(task: dict[str, Any], response: str) -> Outcome:
    """1 when the last number written in the reply is ``task["ground_truth"]`` (``number_match``), however it
    is worded ("3 + 2 = 5" passes). For a reply another step reads by its last number, as the coordinator
    workflow reads its workers' (``extract_last_number``): it grades what is passed on, not the wording."""
    return _one_number_reward(task, response, number_match)


def number_list(text: str) -> list[str]:
    """Every number written in ``text``, in order (commas between numbers separate them)."""
    return _NUMBER.findall(text.replace(", ", " ").replace(",", " "))


def number_list_reward(task: dict[str, Any], response: str) -> Outcome:
    """Reward of answers that are several numbers in order (``task["ground_truth"]`` "82, 7, 3"): the
    fraction of positions whose number is right, when the reply states exactly as many numbers as the
    ground truth (0 otherwise, so listing extra numbers earns nothing); correct when all are right."""
    if "ground_truth" not in task:
        raise ValueError(f"task {task.get('task_id', '?')!r} has no ground_truth")
    want, got = number_list(str(task["ground_truth"])), number_list(response)
    right = sum(float(g) == float(w) for g, w in zip(got, want, strict=False)) if len(got) == len(want) else 0
    reward = right / len(want) if want else 0.0
    return Outcome(reward=reward, is_correct=bool(want) and right == len(want), info={"answers": got})
