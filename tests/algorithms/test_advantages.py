"""Advantage estimators against hand-computed numbers."""

import numpy as np
import pytest

from rllm.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo,
    get_advantage_estimator,
    grpo,
    reinforce,
    reinforce_pp,
    rloo,
)


def _arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def test_grpo_normalises_by_sample_std():
    # mean = 0.5, sample std = sqrt(4 * 0.25 / (4 - 1)) = 1/sqrt(3)  ->  ±0.5 * sqrt(3) = ±0.866
    (adv,) = grpo([_arr(1, 0, 0, 1)])
    np.testing.assert_allclose(
        adv, [0.5 * np.sqrt(3), -0.5 * np.sqrt(3), -0.5 * np.sqrt(3), 0.5 * np.sqrt(3)], rtol=1e-5
    )


def test_grpo_can_normalise_by_population_std():
    # mean = 0.5, population std = sqrt(mean((±0.5)^2)) = 0.5  ->  ±0.5 / 0.5 = ±1
    (adv,) = grpo([_arr(1, 0, 0, 1)], std="population")
    np.testing.assert_allclose(adv, [1, -1, -1, 1], rtol=1e-5)


def test_grpo_without_std_is_mean_centred():
    # r - 0.5
    (adv,) = grpo([_arr(1, 0, 0, 1)], norm_std=False)
    np.testing.assert_allclose(adv, [0.5, -0.5, -0.5, 0.5])


def test_grpo_groups_are_independent_and_degenerate_groups_give_zero():
    # group 2: mean 2, sample std sqrt((1 + 1) / 1) = sqrt(2) -> ±1/sqrt(2); a singleton and a constant
    # group carry no signal -> 0
    adv = grpo([_arr(3.0), _arr(3, 1), _arr(2, 2)])
    np.testing.assert_allclose(adv[0], [0.0])
    np.testing.assert_allclose(adv[1], [1 / np.sqrt(2), -1 / np.sqrt(2)], rtol=1e-5)
    np.testing.assert_allclose(adv[2], [0, 0])


def test_dr_grpo_has_no_std():
    # mean 1 -> [1, -1]; with std it would still be [1,-1]; use an asymmetric case: [4, 0, 2] mean 2
    (adv,) = dr_grpo([_arr(4, 0, 2)])
    np.testing.assert_allclose(adv, [2, -2, 0])


def test_rloo_leave_one_out_baseline():
    # r_0: 1 - mean(0, 0) = 1;  r_1: 0 - mean(1, 0) = -0.5;  r_2 likewise -0.5
    (adv,) = rloo([_arr(1, 0, 0)])
    np.testing.assert_allclose(adv, [1, -0.5, -0.5])
    # G/(G-1) * (r - mean) form: 2/1 * (3 - 2) = 2 for [3, 1]
    np.testing.assert_allclose(rloo([_arr(3, 1)])[0], [2, -2])
    np.testing.assert_allclose(rloo([_arr(5.0)])[0], [0.0])


def test_reinforce_is_raw_reward():
    rewards = _arr(0.3, 0.7)
    (adv,) = reinforce([rewards])
    np.testing.assert_allclose(adv, [0.3, 0.7])
    adv[0] = 9.0
    assert rewards[0] == 0.3  # a copy, not a view


def test_reinforce_pp_whitens_across_all_groups():
    # centred: [0.5, -0.5] and [0, 0]; batch mean 0, sample var = (0.25 + 0.25 + 0 + 0) / 3 = 1/6
    # -> ±0.5 * sqrt(6) = ±1.225; per-group GRPO would have given ±1/sqrt(2)
    adv = reinforce_pp([_arr(1, 0), _arr(0, 0)])
    np.testing.assert_allclose(adv[0], [0.5 * np.sqrt(6), -0.5 * np.sqrt(6)], rtol=1e-5)
    np.testing.assert_allclose(adv[1], [0, 0], atol=1e-12)
    # population var = 0.5 / 4 = 0.125 -> ±0.5 / sqrt(0.125) = ±sqrt(2)
    adv = reinforce_pp([_arr(1, 0), _arr(0, 0)], std="population")
    np.testing.assert_allclose(adv[0], [np.sqrt(2), -np.sqrt(2)], rtol=1e-5)


def test_shapes_are_preserved_and_empty_input_is_fine():
    groups = [_arr(1, 2, 3), _arr(0.5), _arr(1, 1)]
    for fn in map(ADVANTAGE_ESTIMATORS.get, ADVANTAGE_ESTIMATORS):
        out = fn(groups)
        assert [a.shape for a in out] == [(3,), (1,), (2,)]
        assert fn([]) == []


def test_get_advantage_estimator_suggests_a_fix():
    assert get_advantage_estimator("rloo") is rloo
    with pytest.raises(ValueError, match=r"did you mean 'grpo'\? \(algorithm.advantage='grpoo'\)"):
        get_advantage_estimator("grpoo")
    with pytest.raises(ValueError, match=r"choose one of dr_grpo, grpo, reinforce, reinforce_pp, rloo"):
        get_advantage_estimator("xyz")
