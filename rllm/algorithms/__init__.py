"""The RL algorithms, as pure functions over arrays: advantage estimators, policy losses, and the
transforms from episodes to a ``TrainBatch`` (group, filter, credit, build rows).

Names resolve on first use: the losses import torch, the estimators and transforms only numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ADVANTAGE_ESTIMATORS": "rllm.algorithms.advantages",
    "AdvantageEstimator": "rllm.algorithms.advantages",
    "EstimatorCapabilities": "rllm.algorithms.advantages",
    "get_advantage_estimator": "rllm.algorithms.advantages",
    "LossConfig": "rllm.algorithms.losses",
    "POLICY_LOSSES": "rllm.algorithms.losses",
    "PolicyLossFn": "rllm.algorithms.losses",
    "compute_policy_loss": "rllm.algorithms.losses",
    "Credit": "rllm.algorithms.transforms",
    "FilterConfig": "rllm.algorithms.transforms",
    "TrajectoryGroup": "rllm.algorithms.transforms",
    "build_train_batch": "rllm.algorithms.transforms",
    "compute_advantages": "rllm.algorithms.transforms",
    "filter_groups": "rllm.algorithms.transforms",
    "group_episodes": "rllm.algorithms.transforms",
}

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageEstimator",
    "Credit",
    "EstimatorCapabilities",
    "FilterConfig",
    "LossConfig",
    "PolicyLossFn",
    "TrajectoryGroup",
    "build_train_batch",
    "compute_advantages",
    "compute_policy_loss",
    "filter_groups",
    "get_advantage_estimator",
    "group_episodes",
]

if TYPE_CHECKING:
    from rllm.algorithms.advantages import (
        ADVANTAGE_ESTIMATORS,
        AdvantageEstimator,
        EstimatorCapabilities,
        get_advantage_estimator,
    )
    from rllm.algorithms.losses import POLICY_LOSSES, LossConfig, PolicyLossFn, compute_policy_loss
    from rllm.algorithms.transforms import (
        Credit,
        FilterConfig,
        TrajectoryGroup,
        build_train_batch,
        compute_advantages,
        filter_groups,
        group_episodes,
    )

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
