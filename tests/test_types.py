"""The data model: validation at construction, JSON round trips, derived properties."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from rllm.types import (
    Episode,
    Outcome,
    Step,
    TerminationReason,
    TrainBatch,
    TrainSequence,
    Trajectory,
    as_outcome,
)


def _step(**overrides) -> Step:
    return Step(**{"prompt_ids": [1, 2, 3], "response_ids": [4, 5], "logprobs": [-0.5, -1.0], **overrides})


# --- Step ------------------------------------------------------------------------------------------


def test_step_default_mask_is_all_ones() -> None:
    assert _step().response_mask == [1, 1]
    assert Step(prompt_ids=[1], response_ids=[], logprobs=[]).response_mask == []


def test_step_needs_one_logprob_per_response_token() -> None:
    with pytest.raises(ValidationError, match="one logprob per response token"):
        _step(logprobs=[-0.5])
    with pytest.raises(ValidationError, match="one logprob per response token"):
        _step(logprobs=[-0.5, -1.0, -2.0])


def test_step_mask_length_and_values() -> None:
    assert _step(response_mask=[0, 1]).response_mask == [0, 1]
    with pytest.raises(ValidationError, match="must match response_ids in length"):
        _step(response_mask=[1])
    with pytest.raises(ValidationError, match="only 0 and 1"):
        _step(response_mask=[1, 2])


def test_step_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        _step(respones_ids=[1])


def test_step_truncated_follows_finish_reason() -> None:
    assert _step(finish_reason="length").truncated
    assert not _step(finish_reason="stop").truncated
    assert not _step().truncated


# --- Episode / Trajectory --------------------------------------------------------------------------


def _episode() -> Episode:
    solver = Trajectory(
        name="solver",
        steps=[
            _step(
                messages=[{"role": "user", "content": "2+2?"}],
                response_text="4",
                finish_reason="stop",
                reward=1.0,
                advantage=0.5,
                weight_version=3,
                info={"k": [1, 2]},
            ),
            _step(response_mask=[0, 1], finish_reason="length"),
        ],
        reward=1.0,
    )
    judge = Trajectory(name="judge", steps=[_step()], reward=0.0, info={"verdict": "ok"})
    return Episode(
        task_id="t1",
        task={"question": "2+2?", "ground_truth": "4"},
        trajectories=[solver, judge],
        reward=1.0,
        is_correct=True,
        termination_reason=TerminationReason.MAX_RESPONSE_LENGTH,
        attempt=2,
        metrics={"episode_time_s": 0.25},
        info={"note": "x"},
    )


def test_episode_json_round_trip() -> None:
    episode = _episode()
    again = Episode.model_validate_json(episode.model_dump_json())
    assert again == episode
    assert again.termination_reason is TerminationReason.MAX_RESPONSE_LENGTH
    assert again.trajectories[0].steps[1].response_mask == [0, 1]


def test_trajectory_json_round_trip() -> None:
    traj = _episode().trajectories[0]
    assert Trajectory.model_validate_json(traj.model_dump_json()) == traj


def test_episode_ids_are_unique() -> None:
    assert Episode(task_id="a").id != Episode(task_id="a").id


def test_termination_reasons() -> None:
    assert {r.value for r in TerminationReason} == {
        "env_done",
        "max_turns",
        "max_response_length",
        "timeout",
        "error",
    }
    ep = Episode(task_id="t")
    assert ep.termination_reason is TerminationReason.ENV_DONE
    assert not ep.failed and not ep.truncated
    for reason in (TerminationReason.ERROR, TerminationReason.TIMEOUT):
        assert Episode(task_id="t", termination_reason=reason).failed
    assert Episode(task_id="t", termination_reason="max_response_length").truncated
    # A truncated step makes the episode truncated even when the flow reported a normal end.
    cut = Episode(task_id="t", trajectories=[Trajectory(steps=[_step(finish_reason="length")])])
    assert cut.truncated and not cut.failed
    with pytest.raises(ValidationError):
        Episode(task_id="t", termination_reason="crashed")


# --- TrainSequence / TrainBatch --------------------------------------------------------------------


def _sequence(**overrides) -> TrainSequence:
    fields = {
        "input_ids": [1, 2, 3, 4],
        "loss_mask": [0, 0, 1, 1],
        "rollout_logprobs": [0.0, 0.0, -0.1, -0.2],
        "advantages": [0.0, 0.0, 1.0, 1.0],
    }
    return TrainSequence(**{**fields, **overrides})


@pytest.mark.parametrize("field", ["loss_mask", "rollout_logprobs", "advantages"])
def test_train_sequence_needs_one_entry_per_token(field: str) -> None:
    good = getattr(_sequence(), field)
    with pytest.raises(ValidationError, match=f"TrainSequence.{field} must have one entry per token"):
        _sequence(**{field: good[:-1]})


def test_train_batch_counts() -> None:
    batch = TrainBatch(
        sequences=[
            _sequence(),
            _sequence(
                input_ids=[1, 2], loss_mask=[0, 1], rollout_logprobs=[0.0, -1.0], advantages=[0.0, -1.0]
            ),
        ]
    )
    assert len(batch) == 2
    assert batch.num_tokens == 6
    assert batch.num_response_tokens == 3
    assert TrainBatch.model_validate_json(batch.model_dump_json()) == batch
    with pytest.raises(ValidationError):
        TrainBatch(sequences=[], extra_field=1)


# --- Outcome -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reward", "is_correct"),
    [
        (True, 1.0, True),
        (False, 0.0, False),
        (2, 2.0, None),
        (np.float32(0.5), 0.5, None),  # a numpy scalar, as graders built on numpy return
        ({"reward": 0.25, "signals": {"format": 1.0}}, 0.25, None),
    ],
)
def test_what_a_reward_evaluator_or_workflow_returns_reads_as_an_outcome(value, reward, is_correct) -> None:
    outcome = as_outcome(value)
    assert (outcome.reward, outcome.is_correct) == (reward, is_correct)
    assert outcome.termination_reason is TerminationReason.ENV_DONE
    same = Outcome(reward=1.0, role_rewards={"judge": 0.0})
    assert as_outcome(same) is same


def test_anything_else_is_refused_naming_who_returned_it() -> None:
    with pytest.raises(TypeError, match=r"^an evaluator must return an Outcome, a float or a bool, not str$"):
        as_outcome("1.0", source="an evaluator")
    with pytest.raises(
        TypeError, match="not dict"
    ):  # a dict without a reward is the flow's output, not a verdict
        as_outcome({"answer": 4})
    with pytest.raises(
        ValidationError, match="trajectory_rewards"
    ):  # a misspelt field is an error, not ignored
        Outcome(reward=1.0, trajectory_rewards={"judge": 0.0})
