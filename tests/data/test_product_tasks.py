"""The cookbooks' calculator task family (rllm.data.builtin.product_tasks): products of 2-3 digit numbers
in a train and a held-out split that share no pair of operands, reproducible per seed."""

from __future__ import annotations

import re

import pytest

from rllm.data.builtin import PRODUCT_QUESTIONS, product_tasks


def _operands(task: dict) -> frozenset[int]:
    a, b = (int(x) for x in re.findall(r"\d+", task["question"]))
    assert int(task["ground_truth"]) == a * b and 10 <= a <= 999 and 10 <= b <= 999
    return frozenset((a, b))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_splits_have_their_sizes_and_share_no_operand_pair(seed: int) -> None:
    train, test = product_tasks(2000, 32, seed=seed)
    assert len(train) == 2000 and len(test) == 32
    assert [t["task_id"] for t in test] == [f"mul-test-{i}" for i in range(32)]
    assert [t["task_id"] for t in train] == [f"mul-train-{i}" for i in range(2000)]
    train_pairs, test_pairs = {_operands(t) for t in train}, {_operands(t) for t in test}
    # distinct within each split, and 23 * 45 held out means 45 * 23 is not trained on either
    assert len(train_pairs) == 2000 and len(test_pairs) == 32 and not train_pairs & test_pairs


def test_same_seed_same_tasks_and_the_cookbooks_questions_are_pinned() -> None:
    assert product_tasks(50, 8, seed=3) == product_tasks(50, 8, seed=3)
    assert product_tasks(50, 8, seed=3) != product_tasks(50, 8, seed=4)
    # The measured runs in examples/*/README.md were made on these tasks (seed 0, 32 held out).
    train, test = product_tasks(2000, 32, seed=0)
    assert test[0] == {"task_id": "mul-test-0", "question": "Multiply 874 by 404.", "ground_truth": "353096"}
    assert test[1]["question"] == "Compute 786 times 921."
    # The held-out operands of a seed do not depend on n_train (their wording does: see the docstring).
    small_train, small_test = product_tasks(10, 32, seed=0)
    assert [_operands(t) for t in small_test] == [_operands(t) for t in test]
    assert [_operands(t) for t in small_train] == [_operands(t) for t in train[:10]]


def test_questions_are_worded_only_from_the_templates_given() -> None:
    only_times = ["Compute {a} times {b}."]
    train, test = product_tasks(40, 10, seed=0, questions=only_times)
    assert all(re.fullmatch(r"Compute \d+ times \d+\.", t["question"]) for t in train + test)
    wordings = {re.sub(r"\d+", "N", t["question"]) for t in product_tasks(200, 0)[0]}
    assert wordings == {q.format(a="N", b="N") for q in PRODUCT_QUESTIONS}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_train": -1, "n_test": 2}, "must be >= 0"),
        ({"n_train": 490_000, "n_test": 1000}, "only 490545 distinct pairs"),
        ({"n_train": 2, "n_test": 2, "questions": []}, "non-empty"),
        ({"n_train": 2, "n_test": 2, "questions": ["What is {a} squared?"]}, "naming {a} and {b}"),
    ],
)
def test_bad_arguments_say_what_to_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        product_tasks(**kwargs)
