"""The built-in code problems: well-formed, and every test passes with the problem's reference solution.

Checked twice: with the plain subprocess runner of conftest.py (our data on its own), and through the
``code`` reward that grades them in training and eval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from rllm.data.code_problems import PROBLEMS, code_problem_tasks
from rllm.data.registry import validate_tasks
from rllm.rewards.code import acode_reward

BY_SLUG = {problem.slug: problem for problem in PROBLEMS}


def test_problem_set_shape() -> None:
    assert len(PROBLEMS) == len(BY_SLUG) >= 20
    kinds = [p.entry_point is None for p in PROBLEMS]
    assert sum(kinds) >= 6 and len(kinds) - sum(kinds) >= 10  # stdin/stdout programs and functions
    for problem in PROBLEMS:
        assert 4 <= len(problem.tests) <= 8, problem.slug
        expected = "stdio" if problem.entry_point is None else "call"
        assert {t["type"] for t in problem.tests} == {expected}, problem.slug
    train, test = code_problem_tasks("train"), code_problem_tasks("test")
    assert len(test) >= 5 and len(train) + len(test) == len(PROBLEMS)
    validate_tasks(train + test)  # schema-valid, unique ids
    truth = test[0]["ground_truth"]
    assert set(truth) == {"tests", "entry_point"}
    with pytest.raises(ValueError, match="split must be"):
        code_problem_tasks("dev")


@pytest.mark.parametrize("slug", sorted(BY_SLUG))
def test_reference_solution_passes(slug: str, code_runner: Callable) -> None:
    problem = BY_SLUG[slug]
    truth = {"tests": list(problem.tests), "entry_point": problem.entry_point}
    assert code_runner(problem.solution, truth) == [True] * len(problem.tests)


def test_wrong_solutions_fail(code_runner: Callable) -> None:
    problem = BY_SLUG["roman_to_int"]
    truth = {"tests": list(problem.tests), "entry_point": problem.entry_point}
    naive = (
        "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    return sum(v[c] for c in s)\n"
    )
    assert code_runner(naive, truth) == [True, False, False, True, False, False]
    problem = BY_SLUG["collatz_steps"]
    truth = {"tests": list(problem.tests), "entry_point": None}
    assert not any(code_runner("print(0)\n", truth)[2:])


def test_reference_solutions_pass_the_code_reward() -> None:
    tasks = code_problem_tasks("train") + code_problem_tasks("test")
    replies = [f"Here you go:\n```python\n{task['metadata']['reference_solution']}```" for task in tasks]
    wrong = [(task, "```python\nprint('no')\n```") for task in tasks[::8]]

    async def grade_all() -> list:
        return await asyncio.gather(*(acode_reward(t, r) for t, r in [*zip(tasks, replies), *wrong]))

    results = asyncio.run(grade_all())
    for task, result in zip(tasks, results):
        assert result.is_correct, (task["task_id"], result.info)
    assert not any(result.is_correct for result in results[len(tasks) :])
