"""prepare_batch: scored episodes + the algorithm config -> the advantage-annotated batch of one step."""

from __future__ import annotations

import math

import pytest

from rllm.algorithms.prepare import estimator_options, prepare_batch, reward_shapers
from rllm.trainer.config import AlgorithmConfig, ShapingConfig
from rllm.types import Episode, Step, Trajectory


def _step(text: str = "42", reward: float = 0.0, prompt: tuple[int, ...] = (1, 2)) -> Step:
    return Step(
        prompt_ids=list(prompt),
        response_ids=[10, 11, 12],
        logprobs=[-0.1, -0.2, -0.3],
        response_mask=[1, 1, 1],
        response_text=text,
        reward=reward,
    )


def _episode(task_id: str, reward: float, text: str = "42", name: str = "solver") -> Episode:
    traj = Trajectory(name=name, steps=[_step(text, reward)], reward=reward)
    return Episode(task_id=task_id, reward=reward, trajectories=[traj])


def test_grpo_advantages_land_on_the_response_tokens_of_the_kept_groups() -> None:
    # Task a: rewards 1, 0 (signal); task b: 1, 1 (zero variance, filtered out).
    episodes = [_episode("a", 1.0), _episode("a", 0.0), _episode("b", 1.0), _episode("b", 1.0)]
    prepared = prepare_batch(episodes, AlgorithmConfig())
    assert not prepared.empty and [g.task_id for g in prepared.groups] == ["a"]
    # mean 0.5, sample std sqrt(0.5): A = +-0.5 / (sqrt(0.5) + 1e-6)
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    rows = prepared.batch.sequences
    assert [row.advantages for row in rows] == [
        pytest.approx([0.0, 0.0, expected, expected, expected]),
        pytest.approx([0.0, 0.0, -expected, -expected, -expected]),
    ]
    assert [row.loss_mask for row in rows] == [[0, 0, 1, 1, 1]] * 2
    m = prepared.metrics
    assert m["filter/groups_in"] == 2.0 and m["filter/groups_kept"] == 1.0
    assert m["filter/zero_variance_sequences"] == 2.0 and m["filter/zero_variance_response_tokens"] == 6.0
    assert m["advantage/max"] == pytest.approx(expected) and m["batch/num_sequences"] == 2.0
    assert prepared.batch.loss_norm_tokens is None and prepared.batch.loss_norm_sequences is None


def test_sampled_loss_norm_counts_the_skipped_zero_variance_rows() -> None:
    episodes = [_episode("a", 1.0), _episode("a", 0.0), _episode("b", 1.0), _episode("b", 1.0)]
    prepared = prepare_batch(episodes, AlgorithmConfig(loss_norm="sampled"))
    assert prepared.batch.loss_norm_tokens == 6 + 6  # 2 kept rows + 2 skipped rows, 3 response tokens each
    assert prepared.batch.loss_norm_sequences == 2 + 2


def test_nothing_to_learn_from_gives_an_empty_batch_with_the_filter_counts() -> None:
    episodes = [_episode("a", 1.0), _episode("a", 1.0)]
    prepared = prepare_batch(episodes, AlgorithmConfig())
    assert prepared.empty and prepared.batch is None and prepared.groups == []
    assert prepared.metrics["filter/zero_variance_groups"] == 1.0
    assert not any(k.startswith(("advantage/", "batch/")) for k in prepared.metrics)


def test_shaping_runs_before_the_filter_so_a_bonus_can_create_signal() -> None:
    # Equal task rewards, but only one reply has the format: the bonus alone separates them.
    episodes = [_episode("a", 1.0, text="42"), _episode("a", 1.0, text="forty-two")]
    shapers = reward_shapers(ShapingConfig(format_regex=r"\d+", format_bonus=0.5), max_tokens=8)
    prepared = prepare_batch(episodes, AlgorithmConfig(), shapers=shapers)
    assert not prepared.empty
    assert [e.trajectories[0].reward for e in episodes] == [1.5, 1.0]
    assert [e.reward for e in episodes] == [1.0, 1.0]  # shaping steers training, not the task's score
    assert [e.metrics["shaping/format_ok"] for e in episodes] == [1.0, 0.0]
    assert episodes[0].trajectories[0].steps[0].advantage > 0 > episodes[1].trajectories[0].steps[0].advantage


def test_per_step_credit_keeps_a_group_whose_attempts_differ_only_in_how_fast_they_won() -> None:
    def won(turns: int) -> Episode:
        steps = [_step(reward=0.0) for _ in range(turns - 1)] + [_step(reward=1.0)]
        return Episode(
            task_id="a", reward=1.0, trajectories=[Trajectory(name="solver", steps=steps, reward=1.0)]
        )

    by_trajectory = prepare_batch([won(1), won(2)], AlgorithmConfig())
    per_step = prepare_batch([won(1), won(2)], AlgorithmConfig(credit="per_step", gamma=0.5))
    assert by_trajectory.empty  # the same reward per attempt: no signal at the trajectory level
    assert not per_step.empty and per_step.metrics["filter/groups_kept"] == 1.0


def test_the_estimator_options_go_only_to_the_estimators_that_take_them() -> None:
    assert estimator_options(AlgorithmConfig(advantage="grpo", norm_std=False)) == {
        "norm_std": False,
        "std": "sample",
    }
    assert estimator_options(AlgorithmConfig(advantage="rloo")) == {}
    assert estimator_options(AlgorithmConfig(advantage="reinforce_pp", std="population")) == {
        "std": "population"
    }
    assert estimator_options(AlgorithmConfig(advantage={"judge": "grpo", "default": "rloo"})) == {
        "norm_std": True,
        "std": "sample",
    }
    # rloo takes no option, and none is passed: prepare_batch runs with it.
    episodes = [_episode("a", 1.0), _episode("a", 0.0)]
    prepared = prepare_batch(episodes, AlgorithmConfig(advantage="rloo"))
    assert [s.advantages[-1] for s in prepared.batch.sequences] == pytest.approx([1.0, -1.0])


def test_reward_shapers_turns_on_only_what_the_config_asks_for() -> None:
    assert reward_shapers(ShapingConfig(), max_tokens=8) == []
    both = reward_shapers(ShapingConfig(format_regex=r"\d+", overlong_buffer=2), max_tokens=3)
    episode = _episode("a", 1.0, text="42")  # 3 response tokens: at max_tokens, the full penalty
    metrics = {k: v for shaper in both for k, v in shaper(episode).items()}
    assert metrics == {"shaping/format_ok": 1.0, "shaping/overlong_penalty": 1.0}
    assert episode.trajectories[0].reward == pytest.approx(1.0 + 0.1 - 1.0)


def test_recorded_trainer_logprobs_land_on_each_steps_response() -> None:
    episodes = [_episode("a", 1.0), _episode("a", 0.0)]
    prepared = prepare_batch(episodes, AlgorithmConfig())
    prepared.record_trainer_logprobs([[0.0, 0.0, -1.0, -2.0, -3.0], [0.0, 0.0, -4.0, -5.0, -6.0]])
    assert [e.trajectories[0].steps[0].info["trainer_logprobs"] for e in episodes] == [
        [-1.0, -2.0, -3.0],
        [-4.0, -5.0, -6.0],
    ]
