"""On-policy distillation's advantage arithmetic (rllm.algorithms.distill) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from rllm.algorithms.distill import distill_advantages
from rllm.types import TrainBatch, TrainSequence


def _batch() -> TrainBatch:
    # Row 0: a 2-token prompt, 3 sampled tokens. Row 1: a 1-token prompt, 2 sampled tokens.
    return TrainBatch(
        sequences=[
            TrainSequence(
                input_ids=[5, 6, 7, 8, 9],
                loss_mask=[0, 0, 1, 1, 1],
                rollout_logprobs=[0.0, 0.0, -1.0, -2.0, -0.5],
                advantages=[0.0, 0.0, 0.5, 0.5, 0.5],
            ),
            TrainSequence(
                input_ids=[5, 10, 11],
                loss_mask=[0, 1, 1],
                rollout_logprobs=[0.0, -3.0, -0.25],
                advantages=[0.0, -1.0, -1.0],
            ),
        ]
    )


# The teacher's logprobs; prompt positions carry junk that must not be read.
TEACHER = [[9.0, 9.0, -1.5, -1.0, -0.5], [9.0, -1.0, -0.75]]
# k_t = student - teacher on trained tokens: row 0: 0.5, -1.0, 0.0; row 1: -2.0, 0.5.
K = [[0.0, 0.0, 0.5, -1.0, 0.0], [0.0, -2.0, 0.5]]


def test_alone_replaces_the_task_advantage_with_minus_coef_times_k() -> None:
    batch = _batch()
    metrics = distill_advantages(batch, TEACHER, coef=2.0, mode="alone")
    assert batch.sequences[0].advantages == [0.0, 0.0, -1.0, 2.0, 0.0]
    assert batch.sequences[1].advantages == [0.0, 4.0, -1.0]
    assert metrics["distill/reverse_kl"] == pytest.approx((0.5 - 1.0 + 0.0 - 2.0 + 0.5) / 5)
    assert metrics["distill/reverse_kl_seq"] == pytest.approx(((-0.5) + (-1.5)) / 2)
    assert metrics["distill/teacher_logprob"] == pytest.approx((-1.5 - 1.0 - 0.5 - 1.0 - 0.75) / 5)
    assert metrics["distill/student_logprob"] == pytest.approx((-1.0 - 2.0 - 0.5 - 3.0 - 0.25) / 5)


def test_add_adds_to_the_task_advantage() -> None:
    batch = _batch()
    distill_advantages(batch, TEACHER, coef=0.5, mode="add")
    assert batch.sequences[0].advantages == [0.0, 0.0, 0.25, 1.0, 0.5]
    assert batch.sequences[1].advantages == [0.0, 0.0, -1.25]


def test_a_teacher_equal_to_the_student_gives_zero() -> None:
    batch = _batch()
    same = [list(s.rollout_logprobs) for s in batch.sequences]
    metrics = distill_advantages(batch, same, coef=1.0, mode="alone")
    assert all(a == 0.0 for s in batch.sequences for a in s.advantages)
    assert metrics["distill/reverse_kl"] == 0.0


def test_mismatched_rows_and_non_finite_scores_are_refused() -> None:
    with pytest.raises(ValueError, match="scored 1 rows"):
        distill_advantages(_batch(), TEACHER[:1], coef=1.0, mode="alone")
    with pytest.raises(ValueError, match="3 logprobs for a row of 5"):
        distill_advantages(_batch(), [TEACHER[1], TEACHER[1]], coef=1.0, mode="alone")
    with pytest.raises(ValueError, match="not finite"):
        distill_advantages(_batch(), [TEACHER[0], [0.0, -math.inf, -1.0]], coef=1.0, mode="alone")
