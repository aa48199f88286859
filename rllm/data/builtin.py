"""Built-in procedurally generated tasks: verifiable, need no network, with a held-out split.

Each task is a dict in the common task schema: ``task_id``, ``question``, ``ground_truth``, ``data_source``.
The test split is generated from its own seed and the train split never contains a test question, so
held-out accuracy measures generalisation, not memorisation.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

SUFFIX = "Answer with just the number."


def _larger(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(range(10, 100), 2)
    return f"Which number is larger, {a} or {b}? {SUFFIX}", str(max(a, b))


def _smaller(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(range(10, 100), 2)
    return f"Which number is smaller, {a} or {b}? {SUFFIX}", str(min(a, b))


def _add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"What is {a} + {b}? {SUFFIX}", str(a + b)


_PRODUCT_QUESTIONS = ("What is {a} * {b}?", "Compute {a} times {b}.", "Multiply {a} by {b}.",
                      "What is the product of {a} and {b}?")


def _multiply(rng: random.Random) -> tuple[str, str]:
    # A tool task (workflow.name=tool_agent): products of 2-3 digit numbers, asked in several ways, with no
    # "answer with just the number" (which talks a small model out of calling the calculator).
    a, b = rng.randint(10, 999), rng.randint(10, 999)
    return rng.choice(_PRODUCT_QUESTIONS).format(a=a, b=b), str(a * b)


def _count_letter(rng: random.Random) -> tuple[str, str]:
    words = ["banana", "strawberry", "committee", "mississippi", "balloon", "letter", "address",
             "assessment", "bookkeeper", "coffee", "success", "parallel", "raccoon", "pepper"]
    w = rng.choice(words)
    ch = rng.choice(sorted(set(w)))
    return f"How many times does the letter '{ch}' appear in the word '{w}'? {SUFFIX}", str(w.count(ch))


GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "larger": _larger,
    "smaller": _smaller,
    "add": _add,
    "multiply": _multiply,
    "count_letter": _count_letter,
}

_TEST_SEED_OFFSET = 1_000_003


@functools.cache
def _held_out_cap(name: str) -> int | None:
    """A quarter of the distinct questions of a generator with few of them (``add`` has 100), else None.

    Without a cap the held-out set of such a task would take every question, leaving none to train on.
    The probe uses a fixed seed, so the cap (and with it the split) is the same in every call."""
    rng = random.Random(20_241_130)
    distinct = len({GENERATORS[name](rng)[0] for _ in range(4000)})
    return distinct // 4 if distinct < 2000 else None


def make_tasks(name: str, split: str, size: int, seed: int = 0) -> list[dict[str, Any]]:
    """Generate ``size`` tasks of kind ``name`` for ``split`` ("train" or "test")."""
    if name == "frozenlake":
        from rllm.envs.frozenlake import frozenlake_tasks

        return frozenlake_tasks(split, size, seed=seed)
    if name not in GENERATORS:
        raise ValueError(f"unknown built-in task {name!r}: choose one of {', '.join([*GENERATORS, 'frozenlake'])}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    gen = GENERATORS[name]
    test_rng = random.Random(seed + _TEST_SEED_OFFSET)
    # Held-out questions are unique; the test set is the first `size` distinct questions of its stream.
    test: dict[str, str] = {}
    n_test = size if split == "test" else max(size // 4, 200)
    cap = _held_out_cap(name)
    if cap is not None:  # a small question space: hold out a quarter of it, whatever the sizes asked for
        n_test = min(n_test, cap)
    attempts = 0
    while len(test) < n_test and attempts < 50 * n_test:
        q, a = gen(test_rng)
        test.setdefault(q, a)
        attempts += 1
    if split == "test":
        items = list(test.items())
    else:
        rng = random.Random(seed)
        items = []
        while len(items) < size:
            q, a = gen(rng)
            if q not in test:
                items.append((q, a))
    return [
        {"task_id": f"{name}-{split}-{i}", "question": q, "ground_truth": a, "data_source": f"builtin/{name}"}
        for i, (q, a) in enumerate(items)
    ]
