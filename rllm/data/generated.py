"""rllm's own generated datasets, the built-in entries of ``rllm.data.plugins.DATASETS`` (imported the first
time one is looked up)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm.data.builtin import held_out_count, make_tasks
from rllm.data.code_problems import PROBLEMS, code_problem_tasks
from rllm.data.finance import SYSTEM_PROMPT as FINANCE_SYSTEM_PROMPT
from rllm.data.finance import finance_examples, finance_tasks, split_questions
from rllm.data.multi_part import multi_part_tasks
from rllm.data.plugins import BuiltinDataset
from rllm.rewards.countdown import countdown_tasks

_DEFAULT_TEST_SIZE = 200


def _arithmetic(name: str) -> Callable[[str, int, int], list[dict[str, Any]]]:
    def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
        return [{**task, "metadata": {}} for task in make_tasks(name, split, n, seed)]

    return generate


def _arithmetic_dataset(name: str, about: str) -> BuiltinDataset:
    """add and count_letter hold out fewer questions than the usual 200: all of them are their test split."""
    held_out = held_out_count(name)
    if held_out is not None and held_out < _DEFAULT_TEST_SIZE:
        return BuiltinDataset(
            name,
            "number",
            f"{about} (generated; {held_out} held out)",
            _arithmetic(name),
            {"train": 1000, "test": held_out},
        )
    return BuiltinDataset(name, "number", f"{about} (generated)", _arithmetic(name))


def _countdown(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return [{"metadata": {}, **task} for task in countdown_tasks(split, n, seed=seed)]


def _code_problems(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return code_problem_tasks(split)[:n]


LARGER = _arithmetic_dataset("larger", "which of two 2-digit numbers is larger")
SMALLER = _arithmetic_dataset("smaller", "which of two 2-digit numbers is smaller")
ADD = _arithmetic_dataset("add", "the sum of two single digits")
MULTIPLY = _arithmetic_dataset("multiply", "products of 2-3 digit numbers, for the calculator tool agent")
COUNT_LETTER = _arithmetic_dataset("count_letter", "how often a letter occurs in a word")
COUNTDOWN = BuiltinDataset(
    "countdown",
    "countdown",
    "reach a target number with + - * / over given numbers (generated)",
    _countdown,
)
CODE_PROBLEMS = BuiltinDataset(
    "code_problems",
    "code",
    "small Python problems with unit tests, written for rllm",
    _code_problems,
    {s: sum(p.split == s for p in PROBLEMS) for s in ("train", "test")},
    fixed=True,
)
FINANCE = BuiltinDataset(
    "finance",
    "finance_number",
    "FinQA-style questions over fictional companies' financial tables, for the table_lookup and "
    "calculator tools (generated; held out: other companies)",
    finance_tasks,
    {"train": 1000, "test": len(split_questions("test"))},
    system_prompt=FINANCE_SYSTEM_PROMPT,
    examples=tuple(finance_examples()),
)
MULTI_PART = BuiltinDataset(
    "multi_part",
    "number_list",
    "2-3 parts of different kinds (larger, add, count_letter) asked together, for the coordinator "
    "workflow (generated; parts in metadata.parts)",
    multi_part_tasks,
)
