"""batch_digests / PreparedBatch.digest: a fingerprint of what an update trains on, field by field."""

from __future__ import annotations

import math

from rllm.algorithms.prepare import (
    DIGEST_FIELDS,
    PreparedBatch,
    batch_digests,
    combined_digest,
    prepare_batch,
)
from rllm.trainer.config import AlgorithmConfig
from rllm.types import Episode, Step, TrainBatch, TrainSequence, Trajectory


def _episode(task_id: str, reward: float, logprob: float = -0.1) -> Episode:
    step = Step(prompt_ids=[1, 2], response_ids=[10, 11], logprobs=[logprob, -0.2], reward=reward)
    return Episode(task_id=task_id, reward=reward, trajectories=[Trajectory(steps=[step], reward=reward)])


def _prepared(logprob: float = -0.1) -> PreparedBatch:
    episodes = [_episode("a", 1.0, logprob), _episode("a", 0.0), _episode("b", 0.0), _episode("b", 1.0)]
    return prepare_batch(episodes, AlgorithmConfig())


def test_the_same_tokens_give_the_same_digest_whatever_the_episode_ids() -> None:
    a, b = _prepared(), _prepared()  # new episode ids (uuid4) each time
    assert [s.episode_id for s in a.batch.sequences] != [s.episode_id for s in b.batch.sequences]
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64 and set(batch_digests(a.batch)) == set(DIGEST_FIELDS)


def test_a_change_in_the_last_bit_of_one_logprob_names_that_field() -> None:
    a = _prepared(-0.1)
    b = _prepared(math.nextafter(-0.1, 0.0))
    da, db = batch_digests(a.batch), batch_digests(b.batch)
    assert [k for k in DIGEST_FIELDS if da[k] != db[k]] == ["rollout_logprobs"]
    assert a.digest() != b.digest()


def test_each_field_is_covered() -> None:
    row = TrainSequence(
        input_ids=[1, 2, 3], loss_mask=[0, 1, 1], rollout_logprobs=[0.0, -1.0, -2.0], advantages=[0, 1, 1]
    )
    base = batch_digests(TrainBatch(sequences=[row]))
    changes = {
        "input_ids": {"input_ids": [1, 2, 4]},
        "loss_mask": {"loss_mask": [0, 0, 1]},
        "rollout_logprobs": {"rollout_logprobs": [0.0, -1.0, float("-inf")]},
        "advantages": {"advantages": [0.0, 1.0, 0.5]},
        "group_id": {"group_id": "t/default"},
        "trajectory_name": {"trajectory_name": "judge"},
        "weight_version": {"weight_version": 1},
    }
    for field, update in changes.items():
        other = batch_digests(TrainBatch(sequences=[row.model_copy(update=update)]))
        assert [k for k in DIGEST_FIELDS if other[k] != base[k]] == [field], field
    normed = batch_digests(TrainBatch(sequences=[row], loss_norm_tokens=4.0))
    assert [k for k in DIGEST_FIELDS if normed[k] != base[k]] == ["loss_norm"]
    # Row boundaries count: the same tokens split into two rows are another batch.
    split = TrainBatch(
        sequences=[
            TrainSequence(input_ids=[1], loss_mask=[0], rollout_logprobs=[0.0], advantages=[0.0]),
            TrainSequence(
                input_ids=[2, 3], loss_mask=[1, 1], rollout_logprobs=[-1.0, -2.0], advantages=[1, 1]
            ),
        ]
    )
    assert batch_digests(split)["input_ids"] != base["input_ids"]


def test_an_empty_step_has_a_digest_too() -> None:
    episodes = [_episode("a", 1.0), _episode("a", 1.0)]  # no signal: every group filtered out
    prepared = prepare_batch(episodes, AlgorithmConfig())
    assert prepared.batch is None
    assert prepared.digest() == combined_digest(batch_digests(TrainBatch()))
