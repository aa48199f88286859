"""The built-in multi-part task (``data.task=multi_part``): each task is 2-3 short questions of different
kinds (which number is larger, the sum of two digits, how often a letter occurs in a word), asked together,
answered as the parts' answers in order ("82, 7, 3").

Each row keeps its parts in ``metadata["parts"]``: ``{"kind", "question", "ground_truth"}`` each, in order,
so a workflow can hand them out one by one (the ``coordinator`` workflow does). ``ground_truth`` is the
parts' answers joined by ", ", graded by the ``number_list`` reward.

Held out as the single-kind tasks are (``rllm.data.builtin``): a part belongs to the test side when its
problem is one of its kind's held-out problems, and a test task is made of test parts only, a train task of
train parts only, so no train task at any size or seed shares a part with a test task.
"""

from __future__ import annotations

import random
from typing import Any

from rllm.data.builtin import GENERATORS, Problem, is_held_out

PART_KINDS: tuple[str, ...] = ("larger", "add", "count_letter")
"""The kinds a part can be, each a built-in single-kind task (``rllm.data.builtin.GENERATORS``)."""

_TEST_SEED_OFFSET = 2_000_003
_MAX_DRAWS_PER_PART = 1_000


def _part(kind: str, held_out: bool, rng: random.Random) -> Problem:
    """One problem of ``kind`` from the test side (``held_out``) or the train side."""
    gen = GENERATORS[kind]
    for _ in range(_MAX_DRAWS_PER_PART):
        problem = gen(rng)
        if is_held_out(kind, problem) == held_out:
            return problem
    side = "test" if held_out else "train"
    raise RuntimeError(f"no {side} problem of kind {kind!r} in {_MAX_DRAWS_PER_PART} draws")


def part_question(parts: list[dict[str, Any]]) -> str:
    """The whole task in words: every part on its own line, then the answer format."""
    lines = [f"Part {i + 1}: {p['question']}" for i, p in enumerate(parts)]
    return (
        "Answer each part of this task.\n"
        + "\n".join(lines)
        + "\nGive the answers of the parts in order, separated by commas."
    )


def multi_part_tasks(split: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` multi-part tasks of ``split`` ("train" or "test"), drawn by ``seed``: each has 2 or 3 parts of
    distinct kinds from ``PART_KINDS``, in a random order. The test split holds no question twice."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    held_out = split == "test"
    rng = random.Random(seed + (_TEST_SEED_OFFSET if held_out else 0))
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(50 * n + 1_000):
        if len(tasks) >= n:
            break
        kinds = rng.sample(PART_KINDS, rng.choice((2, 3)))
        parts = []
        for kind in kinds:
            problem = _part(kind, held_out, rng)
            parts.append({"kind": kind, "question": problem.question, "ground_truth": problem.answer})
        question = part_question(parts)
        if held_out and question in seen:
            continue
        seen.add(question)
        tasks.append(
            {
                "task_id": f"multi_part-{split}-{len(tasks)}",
                "question": question,
                "ground_truth": ", ".join(p["ground_truth"] for p in parts),
                "data_source": "builtin/multi_part",
                "metadata": {"parts": parts},
            }
        )
    if len(tasks) < n:  # cannot happen at any size a run asks for: the test side has millions of tasks
        raise ValueError(f"found only {len(tasks)} distinct {split} tasks; ask for fewer than {n}")
    return tasks
