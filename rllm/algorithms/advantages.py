"""Advantage estimators: turn the rewards of each group of attempts into per-trajectory advantages.

A *group* is every trajectory of one role across the attempts at one task (see
``rllm.algorithms.transforms.group_episodes``). Each estimator is a pure function that takes the rewards of
all groups of one role, ``rewards_by_group`` (one 1-D float array ``rewards_G`` per group), and returns
the advantages in the same layout: one scalar advantage per trajectory, which the transform pipeline
broadcasts to every token the trajectory produced.

Estimators are named in config (``algorithm.advantage``), so they live in ``ADVANTAGE_ESTIMATORS``, a
:class:`rllm.utils.registry.Registry` (docs/plugins.md); look one up with ``get_advantage_estimator(name)``.
An estimator declares what the start-up checks need to know of it in :class:`EstimatorCapabilities`
(whether it compares attempts within a group); the options it takes are read from its signature
(``norm_std``, ``std``). One defined elsewhere registers with ``ADVANTAGE_ESTIMATORS.register(name, fn,
capabilities=EstimatorCapabilities(...))``, or through the ``rllm.advantage_estimators`` entry-point group.

Every estimator that divides by a standard deviation (``grpo`` per group, ``reinforce_pp`` per batch) takes
``std``: ``"sample"`` (the default) is the Bessel-corrected std, ``sqrt(sum((x - mean)^2) / (n - 1))``, as
TRL's ``GRPOTrainer`` (``nanstd``) and verl's ``compute_grpo_outcome_advantage`` (``torch.std``) use, so
"grpo" means here what it means there; ``"population"`` divides by ``n`` instead, a smaller std, which
makes the advantages ``sqrt(n / (n - 1))`` times larger (7 % at a group of 8). ``rloo``, ``dr_grpo`` and
``reinforce`` use no std.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from rllm.utils.config import did_you_mean
from rllm.utils.registry import Registry

AdvantageEstimator = Callable[..., list[np.ndarray]]


@dataclass(frozen=True)
class EstimatorCapabilities:
    """What an advantage estimator declares about itself, for the start-up checks."""

    group_relative: bool = False
    """It compares the attempts of a group with each other: a run needs ``rollout.group_size >= 2``."""


StdKind = Literal["sample", "population"]
"""Which standard deviation an estimator divides by: ``"sample"`` (ddof=1) or ``"population"`` (ddof=0)."""
STD_KINDS: tuple[str, ...] = get_args(StdKind)


def _as_float_arrays(rewards_by_group: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(rewards_G, dtype=np.float64).reshape(-1) for rewards_G in rewards_by_group]


def _ddof(std: StdKind) -> int:
    """The delta degrees of freedom of ``std`` (the divisor is ``n - ddof``); a clear error for anything else."""
    if std not in STD_KINDS:
        raise ValueError(
            f"std must be one of {', '.join(STD_KINDS)}, not {std!r}{did_you_mean(std, STD_KINDS)}"
        )
    return 1 if std == "sample" else 0


def grpo(
    rewards_by_group: list[np.ndarray], *, norm_std: bool = True, std: StdKind = "sample", eps: float = 1e-6
) -> list[np.ndarray]:
    """Group-relative advantages (GRPO, Shao et al. 2024).

        A_i = (r_i - mean_G(r)) / (std_G(r) + eps)     if norm_std
        A_i =  r_i - mean_G(r)                          otherwise

    ``std_G`` is the group's sample standard deviation, ``sqrt(sum_i (r_i - mean_G(r))^2 / (G - 1))``
    (Bessel-corrected, ddof=1), the convention of TRL's ``GRPOTrainer`` and verl's GRPO; ``std="population"``
    divides by ``G`` instead (ddof=0). ``eps = 1e-6`` is verl's (TRL adds 1e-4); it only matters for groups
    whose std is near 0, and a group whose rewards are all equal gets advantage 0 either way.

    A group of size 1 has no baseline to compare against (and no sample std) and gets advantage 0, under
    either ``std``. (verl instead passes a singleton's raw reward through; TRL requires groups of >= 2.)
    """
    ddof = _ddof(std)
    advantages_by_group = []
    for rewards_G in _as_float_arrays(rewards_by_group):
        if rewards_G.size <= 1:
            advantages_by_group.append(np.zeros_like(rewards_G))
            continue
        advantages_G = rewards_G - rewards_G.mean()
        if norm_std:
            advantages_G = advantages_G / (rewards_G.std(ddof=ddof) + eps)
        advantages_by_group.append(advantages_G)
    return advantages_by_group


def dr_grpo(rewards_by_group: list[np.ndarray]) -> list[np.ndarray]:
    """Dr. GRPO advantages (Liu et al. 2025, "Understanding R1-Zero-like training"): GRPO without the std.

        A_i = r_i - mean_G(r)

    Dr. GRPO's other half, dropping the per-sequence length normalisation, is a loss-aggregation choice,
    not an advantage one: pair this with ``LossConfig(agg="seq-mean-token-sum-norm")``.
    A group of size 1 gets advantage 0.
    """
    return grpo(rewards_by_group, norm_std=False)


def rloo(rewards_by_group: list[np.ndarray]) -> list[np.ndarray]:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): each attempt's baseline is the mean of the others.

        A_i = r_i - 1/(G-1) * sum_{j != i} r_j  =  G/(G-1) * (r_i - mean_G(r))

    A group of size 1 has no other attempt to use as a baseline and gets advantage 0.
    """
    advantages_by_group = []
    for rewards_G in _as_float_arrays(rewards_by_group):
        group_size = rewards_G.size
        if group_size <= 1:
            advantages_by_group.append(np.zeros_like(rewards_G))
            continue
        advantages_by_group.append(group_size / (group_size - 1) * (rewards_G - rewards_G.mean()))
    return advantages_by_group


def reinforce(rewards_by_group: list[np.ndarray]) -> list[np.ndarray]:
    """Plain REINFORCE: the raw reward, no baseline.

    A_i = r_i
    """
    return [rewards_G.copy() for rewards_G in _as_float_arrays(rewards_by_group)]


def reinforce_pp(
    rewards_by_group: list[np.ndarray], *, std: StdKind = "sample", eps: float = 1e-6
) -> list[np.ndarray]:
    """REINFORCE++ with a group baseline (Hu 2025; verl's ``reinforce_plus_plus_baseline``).

    Subtract each group's mean, then whiten across the whole batch (every group passed in together):

        a_i = r_i - mean_G(r)
        A_i = (a_i - mean_batch(a)) / (std_batch(a) + eps)

    ``std_batch`` is the sample standard deviation (ddof=1, as verl's ``masked_whiten``) over all N
    trajectories of all groups; ``std="population"`` divides by N instead. A batch of one trajectory has
    no sample std and gets advantage 0 (its centred reward is 0 anyway).
    Unlike verl, which whitens over tokens (so long responses weigh more), this whitens over trajectories,
    since advantages here are one scalar per trajectory; and a group of size 1 is centred to 0 like any
    other group (verl keeps a singleton's raw reward).
    """
    ddof = _ddof(std)
    centred_by_group = [
        rewards_G - rewards_G.mean() if rewards_G.size else rewards_G
        for rewards_G in _as_float_arrays(rewards_by_group)
    ]
    if not centred_by_group:
        return []
    centred_N = np.concatenate(centred_by_group)
    if centred_N.size == 0:
        return centred_by_group
    mean = centred_N.mean()
    std_batch = centred_N.std(ddof=ddof) if centred_N.size > ddof else 0.0
    return [(centred_G - mean) / (std_batch + eps) for centred_G in centred_by_group]


def _check_estimator(name: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"advantage estimator {name!r} must be a function (rewards_by_group) -> advantages")


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", key="algorithm.advantage", check=_check_estimator
)
"""Every estimator ``algorithm.advantage`` can name (entry-point group ``rllm.advantage_estimators``)."""

_GROUP_RELATIVE = EstimatorCapabilities(group_relative=True)
ADVANTAGE_ESTIMATORS.register("grpo", grpo, capabilities=_GROUP_RELATIVE)
ADVANTAGE_ESTIMATORS.register("dr_grpo", dr_grpo, capabilities=_GROUP_RELATIVE)
ADVANTAGE_ESTIMATORS.register("rloo", rloo, capabilities=_GROUP_RELATIVE)
ADVANTAGE_ESTIMATORS.register("reinforce", reinforce, capabilities=EstimatorCapabilities())
ADVANTAGE_ESTIMATORS.register("reinforce_pp", reinforce_pp, capabilities=EstimatorCapabilities())


def _takes(name: str, option: str) -> bool:
    """Whether the estimator registered as ``name`` has keyword ``option``; False for an unknown name."""
    if name not in ADVANTAGE_ESTIMATORS:
        return False
    return option in inspect.signature(ADVANTAGE_ESTIMATORS.get(name)).parameters


def takes_std(name: str) -> bool:
    """Whether the estimator registered as ``name`` divides by a standard deviation, i.e. takes ``std``
    (grpo does so only with ``norm_std``); False for a name that is not registered."""
    return _takes(name, "std")


def takes_norm_std(name: str) -> bool:
    """Whether the estimator registered as ``name`` takes ``norm_std`` (dividing by the std is optional)."""
    return _takes(name, "norm_std")


def is_group_relative(name: str) -> bool:
    """Whether the estimator registered as ``name`` declares that it compares attempts within a group."""
    capabilities = ADVANTAGE_ESTIMATORS.plugin(name).capabilities
    return bool(getattr(capabilities, "group_relative", False))


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """Look up an estimator by its config name; the error names the key, the nearest match or the choices."""
    return ADVANTAGE_ESTIMATORS.get(name)
