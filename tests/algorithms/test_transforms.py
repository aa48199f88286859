"""Episodes -> groups -> filters -> advantages -> TrainBatch."""

import numpy as np
import pytest

from rllm.algorithms.transforms import (
    FilterConfig,
    build_train_batch,
    compute_advantages,
    filter_groups,
    group_episodes,
)
from rllm.types import Episode, Step, TerminationReason, Trajectory


def _step(finish_reason: str = "stop", n_prompt: int = 2, n_response: int = 3) -> Step:
    return Step(
        prompt_ids=list(range(1, n_prompt + 1)),
        response_ids=list(range(10, 10 + n_response)),
        logprobs=[-0.1 * (i + 1) for i in range(n_response)],
        response_mask=[1, 0, 1][:n_response] if n_response == 3 else None,
        finish_reason=finish_reason,
    )


def _episode(task_id, reward, names=("default",), n_steps=1, traj_rewards=None, **kw) -> Episode:
    trajs = [
        Trajectory(
            name=name,
            steps=[_step() for _ in range(n_steps)],
            reward=None if traj_rewards is None else traj_rewards[i],
        )
        for i, name in enumerate(names)
    ]
    return Episode(task_id=task_id, reward=reward, trajectories=trajs, **kw)


def test_group_episodes_by_task_and_role_in_first_seen_order():
    eps = [
        _episode("a", 1.0, names=("solver", "judge"), traj_rewards=[1.0, 0.5]),
        _episode("b", 0.0),
        _episode("a", 0.0, names=("solver", "judge"), traj_rewards=[None, 0.25]),
    ]
    groups = group_episodes(eps)
    assert [g.group_id for g in groups] == ["a/solver", "a/judge", "b/default"]
    # solver: trajectory reward 1.0, then falls back to the episode reward 0.0
    np.testing.assert_allclose(groups[0].rewards, [1.0, 0.0])
    np.testing.assert_allclose(groups[1].rewards, [0.5, 0.25])
    assert groups[0].members[1][0] is eps[2]


def test_reward_defaults_to_zero_and_failed_episode_without_trajectories_is_grouped():
    crashed = Episode(task_id="a", termination_reason=TerminationReason.ERROR, error="boom")
    eps = [_episode("a", None, names=("solver", "judge")), crashed, Episode(task_id="z")]
    groups = group_episodes(eps)
    assert [g.group_id for g in groups] == ["a/solver", "a/judge", "z/default"]
    assert [len(g.members) for g in groups] == [2, 2, 1]
    np.testing.assert_allclose(groups[0].rewards, [0.0, 0.0])
    assert groups[1].members[1][0] is crashed and groups[1].members[1][1].steps == []


def test_filter_drops_failed_members_but_keeps_the_rest_of_the_group():
    failed = _episode("a", 0.0, termination_reason=TerminationReason.TIMEOUT)
    groups = group_episodes([_episode("a", 1.0), failed, _episode("a", 0.0)])
    kept, metrics = filter_groups(groups, FilterConfig())
    assert len(kept) == 1 and len(kept[0].members) == 2
    assert all(ep is not failed for ep, _ in kept[0].members)
    assert len(groups[0].members) == 3  # input untouched
    assert metrics["filter/failed_dropped"] == 1.0
    # keeping failed attempts keeps them in the baseline
    kept, metrics = filter_groups(groups, FilterConfig(drop_failed=False))
    assert len(kept[0].members) == 3 and metrics["filter/failed_dropped"] == 0.0


def test_filter_truncated_only_when_asked():
    long = _episode("a", 1.0)
    long.trajectories[0].steps[0].finish_reason = "length"
    groups = group_episodes([long, _episode("a", 0.0), _episode("a", 0.5)])
    kept, metrics = filter_groups(groups, FilterConfig())
    assert len(kept[0].members) == 3 and metrics["filter/truncated_dropped"] == 0.0
    kept, metrics = filter_groups(groups, FilterConfig(drop_truncated=True))
    assert [ep.reward for ep, _ in kept[0].members] == [0.0, 0.5]
    assert metrics["filter/truncated_dropped"] == 1.0


def test_filter_zero_variance_and_empty_groups():
    eps = [
        _episode("same", 1.0),
        _episode("same", 1.0),  # all equal -> no signal
        _episode("mixed", 1.0),
        _episode("mixed", 0.0),
        _episode("dead", 1.0, termination_reason=TerminationReason.ERROR),  # empties after drop_failed
        _episode("dead", 0.0, termination_reason=TerminationReason.ERROR),
    ]
    kept, metrics = filter_groups(group_episodes(eps), FilterConfig())
    assert [g.group_id for g in kept] == ["mixed/default"]
    assert metrics == {
        "filter/groups_in": 3.0,
        "filter/groups_kept": 1.0,
        "filter/zero_variance_groups": 1.0,
        "filter/empty_groups": 1.0,
        "filter/failed_dropped": 2.0,
        "filter/truncated_dropped": 0.0,
        # the rows the "same" group would have made: 2 steps of 2 trained tokens ([1, 0, 1] masks)
        "filter/zero_variance_sequences": 2.0,
        "filter/zero_variance_response_tokens": 4.0,
    }
    kept, _ = filter_groups(group_episodes(eps), FilterConfig(drop_zero_variance=False))
    assert [g.group_id for g in kept] == ["same/default", "mixed/default"]


def test_compute_advantages_broadcasts_to_every_step():
    groups = group_episodes([_episode("a", 1.0, n_steps=2), _episode("a", 0.0, n_steps=2)])
    metrics = compute_advantages(groups, "grpo", norm_std=False)
    # r - mean = ±0.5
    assert [s.advantage for s in groups[0].members[0][1].steps] == [0.5, 0.5]
    assert [s.advantage for s in groups[0].members[1][1].steps] == [-0.5, -0.5]
    assert metrics == {
        "advantage/mean": 0.0,
        "advantage/std": 0.5,
        "advantage/min": -0.5,
        "advantage/max": 0.5,
    }


def test_per_role_estimators_with_default_fallback():
    eps = [
        _episode("a", None, names=("solver", "judge"), traj_rewards=[1.0, 0.3]),
        _episode("a", None, names=("solver", "judge"), traj_rewards=[0.0, 0.9]),
        _episode("a", None, names=("solver", "judge"), traj_rewards=[0.0, 0.6]),
    ]
    groups = group_episodes(eps)
    compute_advantages(groups, {"solver": "rloo", "default": "reinforce"})
    solver, judge = groups
    # rloo on [1, 0, 0] -> [1, -0.5, -0.5]; judge falls back to reinforce -> raw rewards
    assert [t.steps[0].advantage for _, t in solver.members] == pytest.approx([1.0, -0.5, -0.5])
    assert [t.steps[0].advantage for _, t in judge.members] == pytest.approx([0.3, 0.9, 0.6])
    # an option goes only to the estimators that take it: norm_std to grpo, not to rloo
    compute_advantages(groups, {"solver": "grpo", "judge": "rloo"}, norm_std=False)
    # grpo without std on [1, 0, 0]: r - 1/3; rloo on [0.3, 0.9, 0.6] (mean 0.6): 3/2 * (r - 0.6)
    assert [t.steps[0].advantage for _, t in solver.members] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert [t.steps[0].advantage for _, t in judge.members] == pytest.approx([-0.45, 0.45, 0.0], abs=1e-12)
    # a batch holding only the rloo role's groups (the grpo role's all filtered out) still takes grpo's option
    compute_advantages([judge], {"solver": "grpo", "judge": "rloo"}, norm_std=False)
    assert [t.steps[0].advantage for _, t in judge.members] == pytest.approx([-0.45, 0.45, 0.0], abs=1e-12)


def test_estimator_errors():
    groups = group_episodes([_episode("a", 1.0, names=("judge",)), _episode("a", 0.0, names=("judge",))])
    with pytest.raises(ValueError, match="'judge'"):
        compute_advantages(groups, {"solver": "grpo"})
    with pytest.raises(ValueError, match="norm_std"):
        compute_advantages(groups, "rloo", norm_std=False)
    assert groups[0].members[0][1].steps[0].advantage is None  # a rejected call changes nothing
    with pytest.raises(ValueError, match="did you mean"):
        compute_advantages(groups, "rlooo")


def test_reinforce_pp_whitens_within_a_role_across_groups():
    eps = [_episode("a", 1.0), _episode("a", 0.0), _episode("b", 0.0), _episode("b", 0.0)]
    groups = group_episodes(eps)
    compute_advantages(groups, "reinforce_pp")
    # centred [0.5, -0.5], [0, 0]; batch sample std sqrt((0.25 + 0.25) / 3) = 1/sqrt(6) -> ±0.5 * sqrt(6), 0
    advs = [t.steps[0].advantage for g in groups for _, t in g.members]
    assert advs == pytest.approx([0.5 * np.sqrt(6), -0.5 * np.sqrt(6), 0.0, 0.0], rel=1e-5)


def test_build_train_batch_aligns_tokens_masks_and_advantages():
    first, second = _episode("a", 1.0, n_steps=2), _episode("a", 0.0)
    first.trajectories[0].steps.append(Step(prompt_ids=[1], response_ids=[], logprobs=[]))  # skipped
    second.trajectories[0].steps[0].weight_version = 7
    groups = group_episodes([first, second])
    compute_advantages(groups, "grpo", norm_std=False)
    batch = build_train_batch(groups)
    assert len(batch) == 3
    seq = batch.sequences[0]
    # prompt [1, 2] + response [10, 11, 12]; response_mask [1, 0, 1]; advantage +0.5
    assert seq.input_ids == [1, 2, 10, 11, 12]
    assert seq.loss_mask == [0, 0, 1, 0, 1]
    assert seq.rollout_logprobs == pytest.approx([0.0, 0.0, -0.1, -0.2, -0.3])
    assert seq.advantages == [0.0, 0.0, 0.5, 0.0, 0.5]
    assert (seq.group_id, seq.episode_id, seq.trajectory_name) == ("a/default", first.id, "default")
    last = batch.sequences[2]
    assert last.advantages == [0.0, 0.0, -0.5, 0.0, -0.5] and last.weight_version == 7
    assert batch.metrics["batch/skipped_empty_steps"] == 1.0
    assert batch.metrics["batch/num_response_tokens"] == 6.0 == batch.num_response_tokens
    assert batch.metrics["batch/max_row_tokens"] == max(len(s.input_ids) for s in batch.sequences)


def test_build_train_batch_requires_advantages():
    groups = group_episodes([_episode("a", 1.0)])
    with pytest.raises(ValueError, match="compute_advantages"):
        build_train_batch(groups)
