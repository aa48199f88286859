"""From episodes to a TrainBatch: group, filter, compute advantages, assemble token rows.

    groups = group_episodes(episodes)
    groups, filter_metrics = filter_groups(groups, FilterConfig())
    adv_metrics = compute_advantages(groups, "grpo")
    batch = build_train_batch(groups)

A **TrajectoryGroup** is every trajectory of one role across the attempts at one task; group-relative
estimators compare its members' rewards. Groups live only between the rollout and the optimizer step.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from rllm.algorithms.advantages import get_advantage_estimator
from rllm.types import Episode, TrainBatch, TrainSequence, Trajectory

# A group whose reward std is below this carries no learning signal for group-relative estimators.
_ZERO_VARIANCE_STD = 1e-8


@dataclass
class TrajectoryGroup:
    """The trajectories one role produced across all attempts at one task, with the episode of each."""

    task_id: str
    trajectory_name: str
    members: list[tuple[Episode, Trajectory]] = field(default_factory=list)

    @property
    def group_id(self) -> str:
        return f"{self.task_id}/{self.trajectory_name}"

    @property
    def rewards(self) -> np.ndarray:
        """``rewards_G``: each member's ``trajectory.reward``, else its ``episode.reward``, else 0.0."""
        return np.array([_member_reward(episode, traj) for episode, traj in self.members], dtype=np.float64)


def _member_reward(episode: Episode, trajectory: Trajectory) -> float:
    if trajectory.reward is not None:
        return float(trajectory.reward)
    if episode.reward is not None:
        return float(episode.reward)
    return 0.0


def group_episodes(episodes: list[Episode]) -> list[TrajectoryGroup]:
    """Group trajectories by ``(task_id, trajectory.name)``, in order of first appearance.

    An episode with no trajectories at all (typically one that failed before its first LLM call) still
    counts as an attempt: it joins every group of its task with an empty placeholder trajectory (or a
    ``"default"`` group when no other attempt at the task has trajectories), so ``filter_groups`` can
    decide whether it stays in the baseline.
    """
    names_by_task: dict[str, list[str]] = {}
    for episode in episodes:
        names = names_by_task.setdefault(episode.task_id, [])
        for traj in episode.trajectories:
            if traj.name not in names:
                names.append(traj.name)

    groups: dict[tuple[str, str], TrajectoryGroup] = {}
    for episode in episodes:
        trajectories = episode.trajectories or [
            Trajectory(name=name) for name in (names_by_task[episode.task_id] or ["default"])
        ]
        for traj in trajectories:
            key = (episode.task_id, traj.name)
            if key not in groups:
                groups[key] = TrajectoryGroup(task_id=episode.task_id, trajectory_name=traj.name)
            groups[key].members.append((episode, traj))
    return list(groups.values())


@dataclass
class FilterConfig:
    """Which attempts and groups to leave out of the optimizer step."""

    drop_zero_variance: bool = True  # drop groups whose rewards are all equal: no group-relative signal
    drop_truncated: bool = False  # drop attempts whose episode was cut at max length (Episode.truncated)
    drop_failed: bool = True  # drop attempts whose episode errored or timed out (Episode.failed)


def filter_groups(
    groups: list[TrajectoryGroup], cfg: FilterConfig
) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """Return new groups without the dropped members and groups, and counts of what was dropped.

    Member filters run first (failed, then truncated); then groups left empty are dropped, and with
    ``drop_zero_variance`` so are groups whose remaining rewards have std < 1e-8 (this includes every
    group of one member). The input groups are not modified.

    Metrics: ``filter/groups_in``, ``filter/groups_kept``, ``filter/zero_variance_groups``,
    ``filter/empty_groups``, ``filter/failed_dropped`` and ``filter/truncated_dropped`` (members), and
    ``filter/zero_variance_sequences`` / ``filter/zero_variance_response_tokens``: the training rows the
    zero-variance groups would have made. Their advantage is 0, so they add nothing to the gradient, but
    a mean over the batch counts them: pass these to the loss normalisers (``TrainBatch.loss_norm_*``) and
    the filter saves compute without changing the update.
    """
    kept: list[TrajectoryGroup] = []
    failed_dropped = truncated_dropped = zero_variance = empty = 0
    zv_sequences = zv_tokens = 0
    for group in groups:
        members = []
        for episode, traj in group.members:
            if cfg.drop_failed and episode.failed:
                failed_dropped += 1
            elif cfg.drop_truncated and episode.truncated:
                truncated_dropped += 1
            else:
                members.append((episode, traj))
        filtered = TrajectoryGroup(group.task_id, group.trajectory_name, members)
        if not members:
            empty += 1
        elif cfg.drop_zero_variance and filtered.rewards.std() < _ZERO_VARIANCE_STD:
            zero_variance += 1
            for _, traj in members:
                for step in traj.steps:
                    n = sum(step.response_mask or [])
                    zv_sequences += n > 0
                    zv_tokens += n
        else:
            kept.append(filtered)
    metrics = {
        "filter/groups_in": float(len(groups)),
        "filter/groups_kept": float(len(kept)),
        "filter/zero_variance_groups": float(zero_variance),
        "filter/empty_groups": float(empty),
        "filter/failed_dropped": float(failed_dropped),
        "filter/truncated_dropped": float(truncated_dropped),
        "filter/zero_variance_sequences": float(zv_sequences),
        "filter/zero_variance_response_tokens": float(zv_tokens),
    }
    return kept, metrics


def _estimator_for_role(estimator: str | dict[str, str], role: str) -> str:
    if isinstance(estimator, str):
        return estimator
    if role in estimator:
        return estimator[role]
    if "default" in estimator:
        return estimator["default"]
    raise ValueError(
        f"No advantage estimator for trajectory {role!r}: add {role!r} or 'default' to the estimator "
        f"mapping (it has {sorted(estimator)})."
    )


def _accepted_kwargs(fn: object, kwargs: dict[str, object]) -> dict[str, object]:
    params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    return {k: v for k, v in kwargs.items() if k in params}


def compute_advantages(
    groups: list[TrajectoryGroup], estimator: str | dict[str, str], **estimator_kwargs: object
) -> dict[str, float]:
    """Set ``step.advantage`` on every step of every member trajectory; return advantage metrics.

    ``estimator`` is an estimator name (see ``ADVANTAGE_ESTIMATORS``) or a mapping from trajectory name
    to estimator name, with key ``"default"`` as the fallback for roles not listed. All groups of one
    role go to their estimator in one call, so batch-level steps (reinforce_pp's whitening) span that
    role's groups. A trajectory's scalar advantage is broadcast to all of its steps.

    ``estimator_kwargs`` go to each estimator that accepts them (e.g. ``norm_std`` only to grpo); a
    keyword no estimator in use accepts raises ValueError rather than being silently ignored.

    Metrics: ``advantage/mean``, ``advantage/std``, ``advantage/min``, ``advantage/max`` over trajectories.
    """
    groups_by_role: dict[str, list[TrajectoryGroup]] = {}
    for group in groups:
        groups_by_role.setdefault(group.trajectory_name, []).append(group)

    # resolve every role's estimator and options before touching any step, so a bad option changes nothing
    plans = []
    used_kwargs: set[str] = set()
    for role, role_groups in groups_by_role.items():
        fn = get_advantage_estimator(_estimator_for_role(estimator, role))
        kwargs = _accepted_kwargs(fn, estimator_kwargs)
        used_kwargs.update(kwargs)
        plans.append((fn, kwargs, role_groups))
    unused = sorted(set(estimator_kwargs) - used_kwargs)
    if unused and groups:
        raise ValueError(
            f"Advantage option(s) {unused} are not accepted by the estimator(s) in use ({estimator!r}); "
            "remove them or pick an estimator that takes them."
        )

    all_advantages: list[np.ndarray] = []
    for fn, kwargs, role_groups in plans:
        advantages_by_group = fn([g.rewards for g in role_groups], **kwargs)
        for group, advantages_G in zip(role_groups, advantages_by_group):
            for (_, traj), advantage in zip(group.members, advantages_G):
                for step in traj.steps:
                    step.advantage = float(advantage)
            all_advantages.append(np.asarray(advantages_G, dtype=np.float64))

    advantages_N = np.concatenate(all_advantages) if all_advantages else np.zeros(0)
    if advantages_N.size == 0:
        return {}
    return {
        "advantage/mean": float(advantages_N.mean()),
        "advantage/std": float(advantages_N.std()),
        "advantage/min": float(advantages_N.min()),
        "advantage/max": float(advantages_N.max()),
    }


def build_train_batch(groups: list[TrajectoryGroup]) -> TrainBatch:
    """One ``TrainSequence`` per step with a non-empty response, in group/member/step order.

        input_ids        = prompt_ids + response_ids
        loss_mask        = [0] * len(prompt) + response_mask
        rollout_logprobs = [0.0] * len(prompt) + logprobs
        advantages       = [0.0] * len(prompt) + [step.advantage if mask else 0.0 for each response token]

    Raises ValueError if a step has no advantage yet (call ``compute_advantages`` first).
    """
    sequences: list[TrainSequence] = []
    skipped_empty = 0
    for group in groups:
        for episode, traj in group.members:
            for step in traj.steps:
                if not step.response_ids:
                    skipped_empty += 1
                    continue
                if step.advantage is None:
                    raise ValueError(
                        f"A step of trajectory {traj.name!r} in episode {episode.id} has no advantage: "
                        "call compute_advantages(groups, ...) before build_train_batch."
                    )
                n_prompt = len(step.prompt_ids)
                response_mask = step.response_mask or [1] * len(step.response_ids)
                sequences.append(
                    TrainSequence(
                        input_ids=list(step.prompt_ids) + list(step.response_ids),
                        loss_mask=[0] * n_prompt + list(response_mask),
                        rollout_logprobs=[0.0] * n_prompt + [float(lp) for lp in step.logprobs],
                        advantages=[0.0] * n_prompt + [step.advantage if m else 0.0 for m in response_mask],
                        group_id=group.group_id,
                        episode_id=episode.id,
                        trajectory_name=traj.name,
                        weight_version=step.weight_version,
                    )
                )
    batch = TrainBatch(sequences=sequences)
    batch.metrics = {
        "batch/num_sequences": float(len(sequences)),
        "batch/num_response_tokens": float(batch.num_response_tokens),
        "batch/skipped_empty_steps": float(skipped_empty),
    }
    return batch
