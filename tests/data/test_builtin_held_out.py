"""The built-in arithmetic tasks keep their test split out of training at any sizes and seeds."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rllm.data.builtin import GENERATORS, Problem, held_out_count, is_held_out, make_tasks
from rllm.data.registry import DatasetRegistry
from rllm.trainer.config import TrainConfig


def _questions(tasks: list[dict]) -> set[str]:
    return {t["question"] for t in tasks}


@pytest.mark.parametrize("name", sorted(GENERATORS))
@pytest.mark.parametrize(
    ("train_size", "test_size"), [(400, 1000), (20_000, 6000), (1000, 200), (50, 20_000)]
)
def test_no_test_question_is_ever_trained_on(name: str, train_size: int, test_size: int) -> None:
    # Before the fix, train excluded only the first max(train_size // 4, 200) test questions: 37 of 1,000
    # test questions were in training at 400/1,000 and 998 at 20,000/6,000 (larger).
    train = make_tasks(name, "train", train_size)
    test = make_tasks(name, "test", test_size)
    assert len(train) == train_size
    assert len(test) == min(test_size, held_out_count(name) or test_size) == len(_questions(test))
    assert not _questions(train) & _questions(test)


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(sorted(GENERATORS)),
    train_size=st.integers(1, 3000),
    test_size=st.integers(1, 3000),
    train_seed=st.integers(0, 2**31),
    test_seed=st.integers(0, 2**31),
)
def test_train_and_test_are_disjoint_at_any_sizes_and_seeds(
    name: str, train_size: int, test_size: int, train_seed: int, test_seed: int
) -> None:
    # Seeds differ too: a model trained with trainer.seed=3 and evaluated with `rllm eval` (seed 0) never
    # sees a training question in its held-out set.
    train = make_tasks(name, "train", train_size, seed=train_seed)
    test = make_tasks(name, "test", test_size, seed=test_seed)
    assert not _questions(train) & _questions(test)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_splits_are_deterministic_and_the_seed_picks_the_sample(name: str) -> None:
    assert make_tasks(name, "train", 300, seed=1) == make_tasks(name, "train", 300, seed=1)
    assert make_tasks(name, "test", 100, seed=1) == make_tasks(name, "test", 100, seed=1)
    assert make_tasks(name, "train", 300, seed=1) != make_tasks(name, "train", 300, seed=2)


def _operands(tasks: list[dict]) -> set[frozenset[int]]:
    return {frozenset(map(int, re.findall(r"\d+", t["question"]))) for t in tasks}


@pytest.mark.parametrize("name", ["larger", "smaller", "add", "multiply"])
def test_every_wording_and_order_of_a_problem_is_on_one_side(name: str) -> None:
    # "12 or 34" and "34 or 12", "What is 12 * 34?" and "Multiply 34 by 12.": one problem, one split.
    train, test = make_tasks(name, "train", 20_000), make_tasks(name, "test", 2000)
    assert not _operands(train) & _operands(test)


@pytest.mark.parametrize(
    ("name", "held_out"), [("add", 16), ("count_letter", 15), ("larger", 1960), ("smaller", 1974)]
)
def test_a_test_split_larger_than_the_held_out_questions_is_all_of_them_with_a_warning(
    name: str, held_out: int, caplog: pytest.LogCaptureFixture
) -> None:
    assert held_out_count(name) == held_out
    with caplog.at_level(logging.WARNING, logger="rllm.data.builtin"):
        test = make_tasks(name, "test", held_out + 1)
    assert len(test) == held_out
    assert f"holds out only {held_out} distinct questions" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rllm.data.builtin"):
        assert len(make_tasks(name, "test", held_out)) == held_out
    assert not caplog.text


def test_a_generator_with_no_train_questions_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # One problem only, and it hashes to the test side: there is nothing to train on without overlap.
    problem = next(p for p in (Problem(f"q{i}", "1", str(i)) for i in range(100)) if is_held_out("tiny", p))
    monkeypatch.setitem(GENERATORS, "tiny", lambda rng: problem)
    with pytest.raises(ValueError, match="too small to hold a test quarter out"):
        make_tasks("tiny", "train", 10)
    assert [t["question"] for t in make_tasks("tiny", "test", 1)] == [problem.question]


def test_the_default_training_run_loads_disjoint_splits() -> None:
    d, seed = TrainConfig().data, TrainConfig().trainer.seed
    registry = DatasetRegistry()
    train = registry.load(d.task, d.train_split, limit=d.train_size, seed=seed)
    test = registry.load(d.task, d.test_split, limit=d.test_size, seed=seed)
    assert (len(train), len(test)) == (d.train_size, d.test_size) == (20_000, 200)
    assert not _questions(train) & _questions(test)
