"""Built-in procedurally generated tasks: verifiable, need no network, with a held-out split.

Each task is a dict in the common task schema: ``task_id``, ``question``, ``ground_truth``, ``data_source``.

Held out means held out at any size and any seed: a problem's split is a hash of the problem itself (its
operands, not its wording or their order), and one problem in four is a test problem, the same rule as the
countdown generator and the environments' task families. The train split is drawn only from train problems, so no train set,
whatever its size or seed, contains a question of any test set, and held-out accuracy measures
generalisation, not memorisation. ``seed`` only picks which problems are drawn and in what order.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

SUFFIX = "Answer with just the number."


class Problem(NamedTuple):
    """One generated question with its answer. ``key`` names the underlying problem: every wording of it
    ("What is 3 * 4?", "Multiply 4 by 3.") shares the key, and so the split."""

    question: str
    answer: str
    key: str


def _pair_key(a: int, b: int) -> str:
    return f"{min(a, b)},{max(a, b)}"


def _larger(a: int, b: int) -> Problem:
    return Problem(f"Which number is larger, {a} or {b}? {SUFFIX}", str(max(a, b)), _pair_key(a, b))


def _smaller(a: int, b: int) -> Problem:
    return Problem(f"Which number is smaller, {a} or {b}? {SUFFIX}", str(min(a, b)), _pair_key(a, b))


def _add(a: int, b: int) -> Problem:
    return Problem(f"What is {a} + {b}? {SUFFIX}", str(a + b), _pair_key(a, b))


PRODUCT_QUESTIONS = (
    "What is {a} * {b}?",
    "Compute {a} times {b}.",
    "Multiply {a} by {b}.",
    "What is the product of {a} and {b}?",
)


def _multiply(rng: random.Random) -> Problem:
    # A tool task (workflow.name=tool_agent): products of 2-3 digit numbers, asked in several ways, with no
    # "answer with just the number" (which talks a small model out of calling the calculator).
    a, b = rng.randint(10, 999), rng.randint(10, 999)
    return Problem(rng.choice(PRODUCT_QUESTIONS).format(a=a, b=b), str(a * b), _pair_key(a, b))


_PRODUCT_OPERANDS = range(10, 1000)
_PRODUCT_PAIRS = len(_PRODUCT_OPERANDS) * (len(_PRODUCT_OPERANDS) + 1) // 2  # unordered, a == b included


def product_tasks(
    n_train: int, n_test: int, seed: int = 0, questions: Sequence[str] = PRODUCT_QUESTIONS
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The framework cookbooks' calculator task: products ``a * b`` of 2-3 digit numbers, each asked in one
    of ``questions`` (``{a}`` and ``{b}`` filled in), as ``(train, test)`` splits of the given sizes.

    Beyond a 135M model's mental arithmetic and easy with a calculator tool, so reward goes up only if the
    model learns to call the tool and copy its result. The two splits share no pair of operands, in either
    order: the first ``n_test`` distinct pairs ``seed`` draws are the test split, the next ``n_train`` the
    train split. Unlike :func:`make_tasks`, that split holds for one call's sizes and seed only, not across
    them, and the wordings are drawn after all the pairs, so the test split's operands depend on ``seed``
    alone but its wording also on ``n_train``. Kept as it is so the cookbooks' measured runs
    (examples/*/README.md) replay the same tasks.
    """
    if n_train < 0 or n_test < 0:
        raise ValueError(f"split sizes must be >= 0, got n_train={n_train}, n_test={n_test}")
    if n_train + n_test > _PRODUCT_PAIRS:
        raise ValueError(
            f"there are only {_PRODUCT_PAIRS} distinct pairs of 2-3 digit operands: ask for fewer than "
            f"n_train + n_test = {n_train + n_test} tasks"
        )
    if not questions or any("{a}" not in q or "{b}" not in q for q in questions):
        raise ValueError(
            f"questions must be a non-empty list of templates naming {{a}} and {{b}}: {questions!r}"
        )
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    seen: set[str] = set()
    while len(pairs) < n_train + n_test:
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        if _pair_key(a, b) not in seen:
            seen.add(_pair_key(a, b))
            pairs.append((a, b))

    def task(split: str, i: int, a: int, b: int) -> dict[str, Any]:
        question = rng.choice(questions).format(a=a, b=b)
        return {"task_id": f"mul-{split}-{i}", "question": question, "ground_truth": str(a * b)}

    test = [task("test", i, a, b) for i, (a, b) in enumerate(pairs[:n_test])]
    train = [task("train", i, a, b) for i, (a, b) in enumerate(pairs[n_test:])]
    return train, test


_WORDS = (
    "banana",
    "strawberry",
    "committee",
    "mississippi",
    "balloon",
    "letter",
    "address",
    "assessment",
    "bookkeeper",
    "coffee",
    "success",
    "parallel",
    "raccoon",
    "pepper",
)


def _count_letter(word: str, letter: str) -> Problem:
    return Problem(
        f"How many times does the letter '{letter}' appear in the word '{word}'? {SUFFIX}",
        str(word.count(letter)),
        f"{word}:{letter}",
    )


def _two_digit_pair(rng: random.Random) -> tuple[int, int]:
    a, b = rng.sample(range(10, 100), 2)
    return a, b


def _word_and_letter(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(_WORDS)
    return word, rng.choice(sorted(set(word)))


GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "larger": lambda rng: _larger(*_two_digit_pair(rng)),
    "smaller": lambda rng: _smaller(*_two_digit_pair(rng)),
    "add": lambda rng: _add(rng.randint(0, 9), rng.randint(0, 9)),
    "multiply": _multiply,
    "count_letter": lambda rng: _count_letter(*_word_and_letter(rng)),
}
"""Each task's sampler: one random problem from ``rng``."""

_SPACES: dict[str, Callable[[], list[Problem]]] = {
    "larger": lambda: [_larger(a, b) for a in range(10, 100) for b in range(10, 100) if a != b],
    "smaller": lambda: [_smaller(a, b) for a in range(10, 100) for b in range(10, 100) if a != b],
    "add": lambda: [_add(a, b) for a in range(10) for b in range(10)],
    "count_letter": lambda: [_count_letter(w, ch) for w in _WORDS for ch in sorted(set(w))],
}
"""Every question of the tasks small enough to list (all but multiply's millions), in a fixed order."""

_TEST_SEED_OFFSET = 1_000_003
_HELD_OUT_ONE_IN = 4


def is_held_out(name: str, problem: Problem) -> bool:
    """Whether ``problem`` of task ``name`` belongs to the test split: one problem in four, by a hash of its
    key, so the answer never depends on the seed or on the sizes asked for."""
    digest = hashlib.sha256(f"{name}:{problem.key}".encode()).digest()
    return digest[0] % _HELD_OUT_ONE_IN == 0


@functools.cache
def _held_out_questions(name: str) -> tuple[Problem, ...] | None:
    """Every test question of a task whose questions can be listed, in a fixed order; None for multiply."""
    space = _SPACES.get(name)
    return None if space is None else tuple(p for p in space() if is_held_out(name, p))


def held_out_count(name: str) -> int | None:
    """How many distinct test questions task ``name`` has (``add`` 16, ``larger`` 1,960), the most its test
    split can hold; None for ``multiply``, which has hundreds of thousands."""
    questions = _held_out_questions(name)
    return None if questions is None else len(questions)


def _max_draws(size: int) -> int:
    # Rejection sampling keeps about one draw in four (test) or three in four (train): the bound is far
    # above what that needs, and only stops a generator whose problems all hash to one side.
    return 50 * size + 10_000


def _test_items(name: str, size: int, seed: int) -> list[tuple[str, str]]:
    """``size`` distinct held-out questions, picked by ``seed`` (all of them, with a warning, when the task
    has fewer)."""
    rng = random.Random(seed + _TEST_SEED_OFFSET)
    listed = _held_out_questions(name)
    test: dict[str, str] = {}
    if listed is not None:
        for problem in rng.sample(listed, min(size, len(listed))):
            test[problem.question] = problem.answer
    else:  # too many to list: the first `size` distinct held-out questions of the test stream
        gen = GENERATORS[name]
        for _ in range(_max_draws(size)):
            if len(test) >= size:
                break
            problem = gen(rng)
            if is_held_out(name, problem):
                test.setdefault(problem.question, problem.answer)
    if len(test) < size:
        logger.warning(
            "built-in task %r holds out only %d distinct questions: its test split has %d rows, not the %d "
            "asked for",
            name,
            len(test),
            len(test),
            size,
        )
    return list(test.items())


def _train_items(name: str, size: int, seed: int) -> list[tuple[str, str]]:
    """``size`` questions of the train stream of ``seed`` that are not held out (repeats allowed: a small
    task has fewer distinct train questions than a run draws)."""
    gen, rng = GENERATORS[name], random.Random(seed)
    items: list[tuple[str, str]] = []
    for _ in range(_max_draws(size)):
        if len(items) >= size:
            break
        problem = gen(rng)
        if not is_held_out(name, problem):
            items.append((problem.question, problem.answer))
    if len(items) < size:  # every problem hashed to the test side: a generator too small to split
        raise ValueError(
            f"built-in task {name!r} found only {len(items)} train questions in {_max_draws(size)} draws: its "
            "question space is too small to hold a test quarter out; use another task"
        )
    return items


def make_tasks(name: str, split: str, size: int, seed: int = 0) -> list[dict[str, Any]]:
    """Generate ``size`` tasks of kind ``name`` for ``split`` ("train" or "test"); see the module docstring
    for why the two never share a question."""
    if name not in GENERATORS:
        raise ValueError(f"unknown built-in task {name!r}: choose one of {', '.join(GENERATORS)}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    items = _test_items(name, size, seed) if split == "test" else _train_items(name, size, seed)
    return [
        {"task_id": f"{name}-{split}-{i}", "question": q, "ground_truth": a, "data_source": f"builtin/{name}"}
        for i, (q, a) in enumerate(items)
    ]
