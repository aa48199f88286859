"""Credit assignment over multi-turn trajectories (per-step discounted returns), merging turns into one
training row, and reward shaping — against hand-computed values."""

import numpy as np
import pytest

from rllm.algorithms.transforms import (
    FilterConfig,
    build_train_batch,
    compute_advantages,
    discounted_returns,
    filter_groups,
    group_episodes,
    state_groups,
    state_signal,
    step_returns,
)
from rllm.rewards.shaping import apply_shaping, format_bonus, overlong_penalty
from rllm.types import Episode, Step, TerminationReason, Trajectory


def _turns(rewards: list[float], *, extend: bool = True) -> list[Step]:
    """A conversation: turn t's prompt = turn t-1's prompt + response + 2 env tokens (when ``extend``)."""
    steps, tokens = [], [1, 2, 3]
    for t, r in enumerate(rewards):
        prompt = tokens if extend or t == 0 else [9, 9, t]
        response = [100 + 10 * t, 101 + 10 * t]
        steps.append(Step(prompt_ids=list(prompt), response_ids=response, logprobs=[-0.5, -0.25], reward=r))
        tokens = list(prompt) + response + [50 + t, 60 + t]
    return steps


def _ep(task: str, rewards: list[float], **kw) -> Episode:
    traj = Trajectory(steps=_turns(rewards, **kw), reward=sum(rewards))
    return Episode(task_id=task, reward=sum(rewards), trajectories=[traj])


def test_discounted_returns() -> None:
    assert discounted_returns([0, 0, 1], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([1, 0, 1], 1.0) == [2.0, 1.0, 1.0]
    assert discounted_returns([], 0.9) == []


def test_per_step_credit_pools_the_steps_of_a_group() -> None:
    # Two attempts: a win in 2 turns, a win in 3 turns; gamma 0.5 makes the faster win worth more.
    fast, slow = _ep("t", [0, 1]), _ep("t", [0, 0, 1])
    groups = group_episodes([fast, slow])
    assert list(step_returns(groups[0], 0.5)) == [0.5, 1.0, 0.25, 0.5, 1.0]
    compute_advantages(groups, "grpo", credit="per_step", gamma=0.5, norm_std=False)
    returns = np.array([0.5, 1.0, 0.25, 0.5, 1.0])
    expected = returns - returns.mean()
    got = [s.advantage for e in (fast, slow) for s in e.trajectories[0].steps]
    assert got == pytest.approx(expected.tolist())
    # Trajectory credit would see two equal rewards: no signal at all.
    compute_advantages(groups, "grpo", credit="trajectory", norm_std=False)
    assert all(s.advantage == 0.0 for e in (fast, slow) for s in e.trajectories[0].steps)


def test_filter_keeps_groups_whose_step_returns_differ() -> None:
    groups = group_episodes([_ep("t", [0, 1]), _ep("t", [0, 0, 1])])
    kept, _ = filter_groups(groups, FilterConfig())
    assert kept == []  # equal trajectory rewards
    kept, _ = filter_groups(groups, FilterConfig(), signal=lambda g: step_returns(g, 0.5))
    assert len(kept) == 1


def test_bad_credit_settings_are_refused() -> None:
    groups = group_episodes([_ep("t", [1]), _ep("t", [0])])
    with pytest.raises(ValueError, match="credit"):
        compute_advantages(groups, "grpo", credit="per_token")
    with pytest.raises(ValueError, match="gamma"):
        compute_advantages(groups, "grpo", credit="per_step", gamma=1.5)


def test_turns_that_extend_each_other_train_as_one_row_with_env_tokens_masked() -> None:
    win, loss = _ep("t", [0, 1]), _ep("t", [0, 0])
    groups = group_episodes([win, loss])
    compute_advantages(groups, "grpo", credit="per_step", gamma=0.5, norm_std=False)
    batch = build_train_batch(groups)
    assert len(batch) == 2 and batch.metrics["batch/merged_steps"] == 2.0
    row = batch.sequences[0]
    a0, a1 = (s.advantage for s in win.trajectories[0].steps)
    assert row.input_ids == [1, 2, 3, 100, 101, 50, 60, 110, 111]
    assert row.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert row.rollout_logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, 0.0, -0.5, -0.25]
    assert row.advantages == [0.0, 0.0, 0.0, a0, a0, 0.0, 0.0, a1, a1]
    # Unmerged: one row per turn, same trained tokens and advantages.
    rows = build_train_batch(groups, merge=False).sequences
    assert len(rows) == 4
    assert rows[1].input_ids == row.input_ids and rows[1].loss_mask == [0] * 7 + [1, 1]
    assert sum(r.num_response_tokens for r in rows) == batch.num_response_tokens


def test_turns_that_do_not_extend_stay_separate_rows() -> None:
    ep = _ep("t", [0, 1], extend=False)
    groups = group_episodes([ep, _ep("t", [0, 0])])
    compute_advantages(groups, "grpo", norm_std=False)
    batch = build_train_batch(groups)
    assert batch.metrics["batch/merged_steps"] == 1.0  # only the second episode's turns merged
    assert [len(s.input_ids) for s in batch.sequences[:2]] == [5, 5]


def test_format_bonus_and_overlong_penalty() -> None:
    ok = Episode(
        task_id="t",
        reward=1.0,
        trajectories=[
            Trajectory(
                reward=1.0,
                steps=[
                    Step(
                        prompt_ids=[1],
                        response_ids=[5] * 10,
                        logprobs=[0.0] * 10,
                        response_text=" 42 ",
                        reward=1.0,
                    )
                ],
            )
        ],
    )
    bad = Episode(
        task_id="t",
        reward=0.0,
        trajectories=[
            Trajectory(
                reward=0.0,
                steps=[
                    Step(prompt_ids=[1], response_ids=[5] * 14, logprobs=[0.0] * 14, response_text="It is 42")
                ],
            )
        ],
    )
    failed = Episode(
        task_id="t", termination_reason=TerminationReason.ERROR, trajectories=[Trajectory(reward=0.0)]
    )
    apply_shaping(
        [ok, bad, failed],
        [format_bonus(r"\d+", bonus=0.2, penalty=0.1), overlong_penalty(max_tokens=16, buffer=8, coef=0.5)],
    )
    # ok: +0.2 format, length 10 is 2 past 16-8 -> -0.5 * 2/8
    assert ok.trajectories[0].reward == pytest.approx(1.0 + 0.2 - 0.125)
    assert ok.trajectories[0].steps[-1].reward == pytest.approx(1.0 + 0.2 - 0.125)
    assert bad.trajectories[0].reward == pytest.approx(0.0 - 0.1 - 0.5 * 6 / 8)
    assert ok.reward == 1.0 and bad.reward == 0.0  # the task's own score is unchanged
    assert ok.metrics == {"shaping/format_ok": 1.0, "shaping/overlong_penalty": 0.125}
    assert failed.trajectories[0].reward == 0.0 and failed.metrics == {}
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(max_tokens=8, buffer=9)


def _move(prompt: list[int], reward: float) -> Step:
    return Step(prompt_ids=prompt, response_ids=[7], logprobs=[-0.1], reward=reward)


def test_per_state_credit_compares_steps_that_saw_the_same_state() -> None:
    # Three attempts from the same start board [1]: a 1-move win, a hole, and a detour through board [2]
    # that wins on its second move. A fourth reaches board [2] too and then falls in.
    win = Episode(task_id="t", reward=1.0, trajectories=[Trajectory(steps=[_move([1], 1.0)], reward=1.0)])
    hole = Episode(task_id="t", reward=0.0, trajectories=[Trajectory(steps=[_move([1], 0.0)], reward=0.0)])
    detour = Episode(
        task_id="t",
        reward=1.0,
        trajectories=[Trajectory(steps=[_move([1], 0.0), _move([2], 1.0)], reward=1.0)],
    )
    lost = Episode(
        task_id="t",
        reward=0.0,
        trajectories=[Trajectory(steps=[_move([1], 0.0), _move([2], 0.0)], reward=0.0)],
    )
    groups = group_episodes([win, hole, detour, lost])
    assert state_groups(groups[0]) == [[0, 1, 2, 4], [3, 5]]
    compute_advantages(groups, "grpo", credit="per_state", gamma=0.3, step_weight=0.5, norm_std=False)

    episode_adv = np.array([1.0, 0.0, 1.0, 0.0]) - 0.5
    start_returns = np.array([1.0, 0.0, 0.3, 0.0])  # G at board [1]: the detour's win is one move away
    start_adv = start_returns - start_returns.mean()
    board2_adv = np.array([1.0, 0.0]) - 0.5
    got = [[s.advantage for s in e.trajectories[0].steps] for e in (win, hole, detour, lost)]
    assert got[0] == pytest.approx([episode_adv[0] + 0.5 * start_adv[0]])
    assert got[1] == pytest.approx([episode_adv[1] + 0.5 * start_adv[1]])
    assert got[2] == pytest.approx(
        [episode_adv[2] + 0.5 * start_adv[2], episode_adv[2] + 0.5 * board2_adv[0]]
    )
    assert got[3] == pytest.approx(
        [episode_adv[3] + 0.5 * start_adv[3], episode_adv[3] + 0.5 * board2_adv[1]]
    )
    # The detour's first move beats the hole at the same board, though its return is below the group's mean
    # step return (per_step credit would have called it a bad move).
    assert got[2][0] > got[1][0]
    compute_advantages(groups, "grpo", credit="per_step", gamma=0.3, norm_std=False)
    assert detour.trajectories[0].steps[0].advantage < 0


def test_per_state_credit_gives_a_state_seen_once_only_the_episode_level() -> None:
    a = Episode(task_id="t", reward=1.0, trajectories=[Trajectory(steps=[_move([1], 1.0)], reward=1.0)])
    b = Episode(task_id="t", reward=0.0, trajectories=[Trajectory(steps=[_move([3], 0.0)], reward=0.0)])
    groups = group_episodes([a, b])
    assert state_groups(groups[0]) == []
    compute_advantages(groups, "grpo", credit="per_state", norm_std=False)
    assert [a.trajectories[0].steps[0].advantage, b.trajectories[0].steps[0].advantage] == [0.5, -0.5]


def test_per_state_filter_signal_is_zero_only_when_neither_level_learns() -> None:
    same = [
        Episode(task_id="t", reward=1.0, trajectories=[Trajectory(steps=[_move([1], 1.0)], reward=1.0)])
        for _ in range(3)
    ]
    kept, _ = filter_groups(group_episodes(same), FilterConfig(), signal=lambda g: state_signal(g, 0.9))
    assert kept == []
    # Equal outcomes, but at the same start one attempt won at once and one took two moves: step-level signal.
    fast = Episode(task_id="t", reward=1.0, trajectories=[Trajectory(steps=[_move([1], 1.0)], reward=1.0)])
    slow = Episode(
        task_id="t",
        reward=1.0,
        trajectories=[Trajectory(steps=[_move([1], 0.0), _move([2], 1.0)], reward=1.0)],
    )
    kept, _ = filter_groups(
        group_episodes([fast, slow]), FilterConfig(), signal=lambda g: state_signal(g, 0.9)
    )
    assert len(kept) == 1
    with pytest.raises(ValueError, match="step_weight"):
        compute_advantages(kept, "grpo", credit="per_state", step_weight=-1.0)
