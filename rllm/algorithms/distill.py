"""On-policy distillation's advantage: a teacher's per-token verdict on the tokens the student sampled.

The student samples (the rollout), a teacher scores every sampled token given the same prefix, and each
trained token t gets the one-sample estimate of the reverse KL at that position:

    k_t = log pi_student(x_t | x_<t) - log pi_teacher(x_t | x_<t),   x_t ~ pi_student

Its advantage becomes

    A_t = -coef * k_t                  mode "alone" (the task reward is ignored)
    A_t = A_task_t - coef * k_t        mode "add"

With the policy-gradient loss this follows the gradient of -coef * KL(pi_student || pi_teacher) along the
student's own samples: tokens the teacher finds likelier than the student did are pushed up, the others
down, with a dense per-token signal instead of one reward per episode (Agarwal et al. 2024, "On-policy
distillation of language models" (GKD); Thinking Machines 2025, "On-policy distillation"; the
tinker-cookbook recipe computes the same advantage with an importance-sampling loss).

log pi_student is the behaviour logprob the rollout recorded (``TrainSequence.rollout_logprobs``): the
policy that sampled the tokens, which is also what the loss's importance ratio divides by.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from rllm.types import TrainBatch

DistillMode = Literal["alone", "add"]


def reverse_kl_per_token(
    student_logprobs_T: np.ndarray, teacher_logprobs_T: np.ndarray, mask_T: np.ndarray
) -> np.ndarray:
    """``k_t = student_t - teacher_t`` where ``mask_T`` is 1, 0 elsewhere (prompt and environment tokens)."""
    return np.where(mask_T > 0, student_logprobs_T - teacher_logprobs_T, 0.0)


def distill_advantages(
    batch: TrainBatch, teacher_logprobs: list[list[float]], *, coef: float, mode: DistillMode
) -> dict[str, float]:
    """Set each row's advantages from the teacher's logprobs (one list per row of ``batch``, aligned with its
    ``input_ids``; only loss-masked positions are read), in place; return the step's distill/* metrics.

    ``mode="alone"``: ``A_t = -coef * k_t``; ``mode="add"``: ``A_t += -coef * k_t`` (module docstring).
    Masked-out positions get advantage 0 (alone) or keep theirs (add: they are masked out of the loss anyway).

    Metrics: ``distill/reverse_kl`` (mean k_t per trained token), ``distill/reverse_kl_seq`` (mean over rows
    of each row's summed k_t), ``distill/teacher_logprob`` and ``distill/student_logprob`` (means per trained
    token).
    """
    if len(teacher_logprobs) != len(batch.sequences):
        raise ValueError(
            f"the teacher scored {len(teacher_logprobs)} rows, but the batch has {len(batch.sequences)}"
        )
    kl_sum = teacher_sum = student_sum = 0.0
    tokens = 0
    row_kls: list[float] = []
    for seq, teacher in zip(batch.sequences, teacher_logprobs):
        if len(teacher) != len(seq.input_ids):
            raise ValueError(
                f"the teacher gave {len(teacher)} logprobs for a row of {len(seq.input_ids)} tokens"
            )
        mask_T = np.asarray(seq.loss_mask, dtype=np.float64)
        student_T = np.asarray(seq.rollout_logprobs, dtype=np.float64)
        teacher_T = np.asarray(teacher, dtype=np.float64)
        if not np.all(np.isfinite(teacher_T[mask_T > 0])):
            raise ValueError("the teacher's logprob of a sampled token is not finite (-inf or nan)")
        k_T = reverse_kl_per_token(student_T, teacher_T, mask_T)
        base_T = np.zeros_like(k_T) if mode == "alone" else np.asarray(seq.advantages, dtype=np.float64)
        seq.advantages = (base_T - coef * k_T).tolist()
        kl_sum += float(k_T.sum())
        teacher_sum += float((teacher_T * mask_T).sum())
        student_sum += float((student_T * mask_T).sum())
        tokens += int(mask_T.sum())
        row_kls.append(float(k_T.sum()))
    n = max(tokens, 1)
    return {
        "distill/reverse_kl": kl_sum / n,
        "distill/reverse_kl_seq": float(np.mean(row_kls)) if row_kls else 0.0,
        "distill/teacher_logprob": teacher_sum / n,
        "distill/student_logprob": student_sum / n,
    }
