"""GRPO's std convention: ours against TRL's and verl's formulas, written out here on identical rewards.

Neither library is installed; their few lines are reimplemented below with torch, named after the
functions they come from, so a change in our convention (ddof, eps, degenerate groups) fails here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rllm.algorithms.advantages import ADVANTAGE_ESTIMATORS, grpo, reinforce_pp, takes_std
from rllm.algorithms.transforms import TrajectoryGroup, compute_advantages, group_episodes
from rllm.trainer.agent_trainer import check_config
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.types import Episode, Step, Trajectory
from rllm.utils.config import ConfigError, load_config

# Several groups as a trainer sees them: binary rewards at G=8 (1, 3 and 7 right), an all-equal group
# (no signal: every formula must give exactly 0), continuous rewards, G=4 and G=2.
GROUPS = [
    [1, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 1, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 1, 1, 1],
    [0.0, 0.25, 0.5, 0.75, 1.0, 0.3, 0.9, 0.1],
    [2.0, -1.0, 0.5, 0.5],
    [3.0, 1.0],
]


def trl_nanstd(tensor: torch.Tensor) -> torch.Tensor:
    """``trl.trainer.utils.nanstd``: the std of the non-NaN values, with Bessel's correction."""
    variance = torch.nanmean((tensor - torch.nanmean(tensor, keepdim=True)) ** 2)
    count = torch.sum(~torch.isnan(tensor))
    variance *= count / (count - 1)  # Bessel's correction
    return torch.sqrt(variance)


def trl_grpo_advantages(groups: list[list[float]]) -> list[torch.Tensor]:
    """``GRPOTrainer._generate_and_score_completions`` (scale_rewards="group"): per group,
    ``advantages = rewards - mean_grouped_rewards``, divided by ``std_grouped_rewards + 1e-4``."""
    out = []
    for rewards in groups:
        rewards_G = torch.tensor(rewards, dtype=torch.float64)
        mean_grouped_rewards = rewards_G.mean()
        std_grouped_rewards = trl_nanstd(rewards_G)
        out.append((rewards_G - mean_grouped_rewards) / (std_grouped_rewards + 1e-4))
    return out


def verl_grpo_advantages(groups: list[list[float]], epsilon: float = 1e-6) -> list[torch.Tensor]:
    """``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage`` (norm_adv_by_std_in_grpo=True):
    ``id2std[idx] = torch.std(scores_tensor)`` (unbiased), ``scores = (scores - mean) / (std + epsilon)``;
    a group of one gets mean 0, std 1."""
    out = []
    for rewards in groups:
        scores = torch.tensor(rewards, dtype=torch.float64)
        if len(scores) == 1:
            mean, std = torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
        else:
            mean, std = torch.mean(scores), torch.std(scores)
        out.append((scores - mean) / (std + epsilon))
    return out


def _ours(std: str = "sample") -> list[np.ndarray]:
    return grpo([np.array(g, dtype=np.float64) for g in GROUPS], std=std)  # type: ignore[arg-type]


def test_grpo_matches_verl_exactly_and_trl_within_its_eps():
    ours = _ours()
    for mine, verl, trl, rewards in zip(
        ours, verl_grpo_advantages(GROUPS), trl_grpo_advantages(GROUPS), GROUPS
    ):
        # verl: same ddof, same eps -> the same numbers up to float64 rounding
        np.testing.assert_allclose(mine, verl.numpy(), rtol=1e-12, atol=1e-12)
        # TRL adds 1e-4 instead of 1e-6: |A_ours - A_trl| = |A_ours| * (1e-4 - 1e-6) / (std + 1e-4), which is
        # below 4e-4 * |A| for every group here (smallest non-zero std: the 1-of-8 group's, 0.354); 1e-7 more
        # for nanstd's Bessel factor count / (count - 1), which torch computes in float32
        s = np.std(rewards, ddof=1)
        bound = np.abs(mine) * (1e-4 - 1e-6) / (s + 1e-4) + 1e-7
        assert np.all(np.abs(mine - trl.numpy()) <= bound), (rewards, mine, trl)
        np.testing.assert_allclose(mine, trl.numpy(), rtol=4e-4, atol=1e-12)
    # the all-equal group carries no signal under all three
    np.testing.assert_array_equal(ours[3], np.zeros(8))


def test_population_std_is_what_the_field_does_not_use():
    ours_pop, ours_sample = _ours("population"), _ours("sample")
    verl = verl_grpo_advantages(GROUPS)
    # at G=8 the population std makes advantages sqrt(8/7) = 1.069 times larger: far outside the tolerance
    # the comparison above uses, so that comparison would catch a slip back to ddof=0
    assert not np.allclose(ours_pop[0], verl[0].numpy(), rtol=1e-2)
    for pop, sample, rewards in zip(ours_pop, ours_sample, GROUPS):
        g = len(rewards)
        if np.std(rewards) == 0:
            np.testing.assert_array_equal(pop, sample)
            continue
        s_pop, s_sample = np.std(rewards), np.std(rewards, ddof=1)
        np.testing.assert_allclose(pop * (s_pop + 1e-6), sample * (s_sample + 1e-6), rtol=1e-12)
        assert s_sample / s_pop == pytest.approx(math.sqrt(g / (g - 1)), rel=1e-12)


def test_grpo_by_hand_with_the_sample_std():
    # [1, 0, 0, 0, 0, 0, 0, 0]: mean 1/8, sum of squares 7/64 + 49/64 = 56/64 = 7/8,
    # sample var (7/8) / 7 = 1/8 -> std 1/sqrt(8); A = (7/8) * sqrt(8) = 2.4749 and (-1/8) * sqrt(8) = -0.3536
    (adv,) = grpo([np.array(GROUPS[0], dtype=np.float64)])
    np.testing.assert_allclose(adv, [7 / 8 * math.sqrt(8)] + [-1 / 8 * math.sqrt(8)] * 7, rtol=1e-5)


def test_a_group_of_one_gets_zero_under_either_std():
    # ddof=1 is undefined for one value; we give 0 (verl would pass the raw reward 5.0 through)
    for std in ("sample", "population"):
        np.testing.assert_array_equal(grpo([np.array([5.0])], std=std)[0], [0.0])  # type: ignore[arg-type]
    assert verl_grpo_advantages([[5.0]])[0].item() == pytest.approx(5.0)


def test_reinforce_pp_whitens_with_the_sample_std_of_the_batch():
    # centred [0.5, -0.5] and [0, 0]: batch mean 0, sample var (0.25 + 0.25) / 3 = 1/6 -> ±0.5 * sqrt(6)
    adv = reinforce_pp([np.array([1.0, 0.0]), np.array([0.0, 0.0])])
    np.testing.assert_allclose(adv[0], [0.5 * math.sqrt(6), -0.5 * math.sqrt(6)], rtol=1e-5)
    # a batch of one trajectory has no sample std: its advantage is 0, not NaN
    np.testing.assert_array_equal(reinforce_pp([np.array([4.0])])[0], [0.0])


def test_a_misspelt_std_names_the_choices():
    with pytest.raises(
        ValueError, match=r"std must be one of sample, population, not 'sampel' — did you mean 'sample'"
    ):
        grpo([np.array([1.0, 0.0])], std="sampel")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="did you mean 'population'"):
        reinforce_pp([np.array([1.0, 0.0])], std="populaton")  # type: ignore[arg-type]


def _group_of(rewards: list[float]) -> list[TrajectoryGroup]:
    episodes = [
        Episode(
            task_id="t",
            reward=r,
            trajectories=[Trajectory(steps=[Step(prompt_ids=[1], response_ids=[2], logprobs=[-0.1])])],
        )
        for r in rewards
    ]
    return group_episodes(episodes)


def test_the_option_reaches_grpo_through_compute_advantages():
    groups = _group_of([1.0, 0.0, 0.0, 0.0])
    compute_advantages(groups, "grpo", std="population")
    # mean 1/4, population std sqrt(3)/4 -> A_0 = (3/4) / (sqrt(3)/4) = sqrt(3)
    assert groups[0].members[0][1].steps[0].advantage == pytest.approx(math.sqrt(3), rel=1e-5)
    compute_advantages(groups, "grpo")
    # sample std sqrt(3/4 * 1/4 * 4/3) = 1/2 -> A_0 = (3/4) / (1/2) = 3/2
    assert groups[0].members[0][1].steps[0].advantage == pytest.approx(1.5, rel=1e-5)


def test_config_default_is_sample_and_a_bad_value_is_refused():
    assert TrainConfig().algorithm.std == "sample"
    assert load_config(TrainConfig, None, ["algorithm.std=population"]).algorithm.std == "population"
    with pytest.raises(ConfigError, match="algorithm.std.*'sample' or 'population'"):
        load_config(TrainConfig, None, ["algorithm.std=bessel"])


@pytest.mark.parametrize(
    "overrides",
    [["algorithm.advantage=rloo"], ["algorithm.norm_std=false"], ["algorithm.advantage={solver: dr_grpo}"]],
)
def test_std_without_an_estimator_that_uses_it_is_refused(overrides: list[str]):
    cfg = load_config(TrainConfig, None, ["algorithm.std=population", *overrides])
    with pytest.raises(UnsupportedConfigError, match="drop algorithm.std"):
        check_config(cfg, LocalBackend.capabilities)


def test_std_with_an_estimator_that_uses_it_is_accepted():
    for overrides in (
        ["algorithm.advantage=reinforce_pp"],
        ["algorithm.advantage={solver: grpo, judge: rloo}"],
        [],
    ):
        check_config(
            load_config(TrainConfig, None, ["algorithm.std=population", *overrides]),
            LocalBackend.capabilities,
        )


def test_the_estimators_that_take_std_are_the_ones_that_divide_by_one() -> None:
    # Read from the signatures, so the trainer (which passes algorithm.std) and the start-up check (which
    # refuses algorithm.std where nothing uses it) agree with the estimators themselves.
    assert {name for name in ADVANTAGE_ESTIMATORS if takes_std(name)} == {"grpo", "reinforce_pp"}
    assert not takes_std("grop")
