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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rllm.algorithms.advantages import AdvantageEstimator, get_advantage_estimator
from rllm.types import Episode, Step, TrainBatch, TrainSequence, Trajectory

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


class FilterConfig(BaseModel):
    """Which attempts and groups to leave out of the optimizer step (the config's ``algorithm.filters``)."""

    model_config = ConfigDict(extra="forbid")

    drop_zero_variance: bool = Field(True, description="Skip groups whose rewards are all equal (no signal).")
    drop_truncated: bool = Field(False, description="Skip episodes whose response hit max_tokens.")
    drop_failed: bool = Field(
        True, description="Skip episodes that errored or timed out (they are still logged)."
    )
    refill_rounds: int = Field(
        0,
        ge=0,
        description="DAPO dynamic sampling: up to this many extra rounds of fresh tasks per step, until "
        "rollout.batch_size tasks have signal (rllm.algorithms.refill); 0 = off. Needs drop_zero_variance.",
    )

    @model_validator(mode="after")
    def _refill_needs_the_filter(self) -> FilterConfig:
        if self.refill_rounds and not self.drop_zero_variance:
            raise ValueError(
                "algorithm.filters.refill_rounds samples until enough groups pass drop_zero_variance: "
                "set algorithm.filters.drop_zero_variance=true, or refill_rounds=0"
            )
        return self


def filter_groups(
    groups: list[TrajectoryGroup],
    cfg: FilterConfig,
    *,
    signal: Callable[[TrajectoryGroup], np.ndarray] | None = None,
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

    ``signal`` gives the values whose spread decides "zero variance" (default: ``group.rewards``); with
    per-step credit pass ``step_returns`` so groups that differ only in how fast they won are kept.
    """
    signal = signal or (lambda g: g.rewards)
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
        elif cfg.drop_zero_variance and np.std(signal(filtered)) < _ZERO_VARIANCE_STD:
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


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}`` for each step of one trajectory (``G`` past the end is 0)."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def step_returns(group: TrajectoryGroup, gamma: float = 1.0) -> np.ndarray:
    """The discounted return of every step of every member, members in order: per-step credit's values."""
    values = [
        g for _, traj in group.members for g in discounted_returns([s.reward for s in traj.steps], gamma)
    ]
    return np.array(values, dtype=np.float64)


Credit = Literal["trajectory", "per_step", "per_state"]
CREDITS: tuple[str, ...] = get_args(Credit)


def state_groups(group: TrajectoryGroup) -> list[list[int]]:
    """Indices (into the group's steps, members in order) of the steps that saw the same state, for each
    state at least two steps saw. A step's state is its prompt: the same token ids mean the same board,
    page or conversation so far, whichever attempt it came from."""
    by_state: dict[tuple[int, ...], list[int]] = {}
    steps = (step for _, traj in group.members for step in traj.steps)
    for i, step in enumerate(steps):
        by_state.setdefault(tuple(step.prompt_ids), []).append(i)
    return [indices for indices in by_state.values() if len(indices) > 1]


def state_signal(group: TrajectoryGroup, gamma: float = 1.0) -> np.ndarray:
    """``filter_groups``'s signal for ``credit="per_state"``: the deviations both levels see (each reward from
    the group's mean, each same-state return from its set's mean); all zero exactly when neither level has
    anything to learn."""
    returns = step_returns(group, gamma)
    parts = [group.rewards - group.rewards.mean()] + [
        returns[ix] - returns[ix].mean() for ix in state_groups(group)
    ]
    return np.concatenate(parts)


def compute_advantages(
    groups: list[TrajectoryGroup],
    estimator: str | dict[str, str],
    *,
    credit: Credit = "trajectory",
    gamma: float = 1.0,
    step_weight: float = 1.0,
    **estimator_kwargs: object,
) -> dict[str, float]:
    """Set ``step.advantage`` on every step of every member trajectory; return advantage metrics.

    ``estimator`` is an estimator name (see ``ADVANTAGE_ESTIMATORS``) or a mapping from trajectory name
    to estimator name, with key ``"default"`` as the fallback for roles not listed. All groups of one
    role go to their estimator in one call, so batch-level steps (reinforce_pp's whitening) span that
    role's groups.

    ``credit="trajectory"``: the estimator sees one reward per trajectory and the trajectory's scalar
    advantage is broadcast to all of its steps. ``credit="per_step"``: every step gets its discounted
    return ``G_t = r_t + gamma * G_{t+1}`` from the steps' own rewards (``step.reward``: an environment's
    per-step rewards, or the outcome reward on the last step), and the estimator sees all steps of the
    group as its members, so a step is compared with every step of the task's attempts (with GRPO:
    ``A_t = (G_t - mean) / std`` over those steps). With ``gamma < 1`` a win reached in fewer turns earns
    more, and early steps of a long episode less.

    ``credit="per_state"`` (GiGPO, Feng et al. 2025): each step gets its trajectory's advantage (as with
    ``"trajectory"``) plus ``step_weight`` times a step-level advantage: the estimator compares its
    discounted return only with the returns of the group's other steps that saw the same state (the same
    prompt tokens, see ``state_groups``). Two attempts at one map that reach the same board compare what
    they did there, and a good first move of a long detour is no longer measured against the last moves
    of short wins. A state only one step saw gets no step-level part.

    ``estimator_kwargs`` go to each estimator that accepts them (e.g. ``norm_std`` only to grpo); a
    keyword no estimator in use accepts raises ValueError rather than being silently ignored.

    Metrics: ``advantage/mean``, ``advantage/std``, ``advantage/min``, ``advantage/max`` over trajectories.
    """
    groups_by_role: dict[str, list[TrajectoryGroup]] = {}
    for group in groups:
        groups_by_role.setdefault(group.trajectory_name, []).append(group)

    # resolve every role's estimator and options before touching any step, so a bad option changes nothing
    plans = _plan_estimators(groups_by_role, estimator, estimator_kwargs, any_groups=bool(groups))

    if credit not in CREDITS:
        raise ValueError(f"credit must be one of {', '.join(CREDITS)}; not {credit!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if step_weight < 0:
        raise ValueError(f"step_weight must be >= 0, got {step_weight}")
    all_advantages: list[np.ndarray] = []
    for fn, kwargs, role_groups in plans:
        if credit == "per_state":
            all_advantages += _per_state_advantages(fn, kwargs, role_groups, gamma, step_weight)
        elif credit == "trajectory":
            advantages_by_group = fn([g.rewards for g in role_groups], **kwargs)
            all_advantages += _set_advantages(role_groups, advantages_by_group, per_step=False)
        else:  # per_step: each step's discounted return, compared with every step of its group
            advantages_by_group = fn([step_returns(g, gamma) for g in role_groups], **kwargs)
            all_advantages += _set_advantages(role_groups, advantages_by_group, per_step=True)

    advantages_N = np.concatenate(all_advantages) if all_advantages else np.zeros(0)
    if advantages_N.size == 0:
        return {}
    return {
        "advantage/mean": float(advantages_N.mean()),
        "advantage/std": float(advantages_N.std()),
        "advantage/min": float(advantages_N.min()),
        "advantage/max": float(advantages_N.max()),
    }


def _plan_estimators(
    groups_by_role: dict[str, list[TrajectoryGroup]],
    estimator: str | dict[str, str],
    estimator_kwargs: dict[str, object],
    *,
    any_groups: bool,
) -> list[tuple[AdvantageEstimator, dict[str, object], list[TrajectoryGroup]]]:
    """(estimator, the options it accepts, its groups) per role; ValueError for an option none accepts."""
    plans = []
    for role, role_groups in groups_by_role.items():
        fn = get_advantage_estimator(_estimator_for_role(estimator, role))
        plans.append((fn, _accepted_kwargs(fn, estimator_kwargs), role_groups))
    # Judged against every estimator the config names, not only those with groups in this batch: a batch
    # whose grpo role's groups were all filtered out still runs with grpo's options.
    configured = set(estimator.values()) if isinstance(estimator, dict) else {estimator}
    used_kwargs: set[str] = set()
    for name in configured:
        used_kwargs.update(_accepted_kwargs(get_advantage_estimator(name), estimator_kwargs))
    unused = sorted(set(estimator_kwargs) - used_kwargs)
    if unused and any_groups:
        raise ValueError(
            f"Advantage option(s) {unused} are not accepted by the estimator(s) in use ({estimator!r}); "
            "remove them or pick an estimator that takes them."
        )
    return plans


def _set_advantages(
    role_groups: list[TrajectoryGroup], advantages_by_group: list[np.ndarray], *, per_step: bool
) -> list[np.ndarray]:
    """Write each group's advantages onto its steps: one per trajectory, broadcast to all of its steps
    (``credit="trajectory"``), or one per step in order (``credit="per_step"``)."""
    for group, advantages in zip(role_groups, advantages_by_group):
        targets = (
            [[step] for _, traj in group.members for step in traj.steps]
            if per_step
            else [traj.steps for _, traj in group.members]
        )
        for steps, advantage in zip(targets, advantages):
            for step in steps:
                step.advantage = float(advantage)
    return [np.asarray(advantages, dtype=np.float64) for advantages in advantages_by_group]


def _per_state_advantages(
    fn: AdvantageEstimator,
    kwargs: dict[str, object],
    groups: list[TrajectoryGroup],
    gamma: float,
    step_weight: float,
) -> list[np.ndarray]:
    """``credit="per_state"`` for one role's groups: set every step's advantage, return them per group."""
    episode_level = fn([g.rewards for g in groups], **kwargs)
    anchors = [state_groups(g) for g in groups]
    returns = [step_returns(g, gamma) for g in groups]
    # every same-state set of every group goes to the estimator in one call, each set as its own "group"
    sets = [returns_S[indices] for returns_S, sets_of_g in zip(returns, anchors) for indices in sets_of_g]
    step_level = iter(fn(sets, **kwargs) if sets else [])
    out = []
    for group, advantages_G, sets_of_g in zip(groups, episode_level, anchors):
        per_step = [float(a) for (_, traj), a in zip(group.members, advantages_G) for _ in traj.steps]
        for indices in sets_of_g:
            for i, a in zip(indices, next(step_level)):
                per_step[i] += step_weight * float(a)
        steps = [step for _, traj in group.members for step in traj.steps]
        for step, advantage in zip(steps, per_step):
            step.advantage = advantage
        out.append(np.asarray(per_step, dtype=np.float64))
    return out


def _extends(step: Step, prev_tokens: list[int]) -> bool:
    """Whether ``step``'s prompt is ``prev_tokens`` followed by at least one more token."""
    n = len(prev_tokens)
    return len(step.prompt_ids) > n and step.prompt_ids[:n] == prev_tokens


def _merge_runs(steps: list[Step]) -> list[list[Step]]:
    """Split a trajectory's steps into runs where each step's prompt extends the previous step's tokens."""
    runs: list[list[Step]] = []
    tokens: list[int] = []
    for step in steps:
        if runs and _extends(step, tokens):
            runs[-1].append(step)
        else:
            runs.append([step])
        tokens = list(step.prompt_ids) + list(step.response_ids)
    return runs


def _sequence(run: list[Step]) -> tuple[list[int], list[int], list[float], list[float]]:
    """One training row from a run of steps: ids, loss mask, rollout logprobs, advantages.

    The first step's prompt is the row's prompt; each later step adds the tokens its prompt has beyond
    the row so far (the environment's reply, turn markers: mask 0) and then its own response.
    """
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    advs: list[float] = []
    for step in run:
        new = step.prompt_ids[len(ids) :]
        ids += new
        mask += [0] * len(new)
        lps += [0.0] * len(new)
        advs += [0.0] * len(new)
        response_mask = step.response_mask or [1] * len(step.response_ids)
        ids += step.response_ids
        mask += response_mask
        lps += [float(lp) for lp in step.logprobs]
        advs += [step.advantage if m else 0.0 for m in response_mask]  # type: ignore[misc]
    return ids, mask, lps, advs


def build_train_batch(groups: list[TrajectoryGroup], *, merge: bool = True) -> TrainBatch:
    """Training rows for the groups' steps, in group/member/step order.

    One step alone becomes one row::

        input_ids        = prompt_ids + response_ids
        loss_mask        = [0] * len(prompt) + response_mask
        rollout_logprobs = [0.0] * len(prompt) + logprobs
        advantages       = [0.0] * len(prompt) + [step.advantage if mask else 0.0 for each response token]

    With ``merge`` (default), consecutive steps of a trajectory whose prompt is exactly the previous
    step's prompt + response + more tokens (a multi-turn conversation rendered token-faithfully) share one
    row: the tokens in between (the environment's turn) have loss mask 0, and each step's response keeps
    its own advantage. The gradient is the same as with one row per step; the shared history is computed
    once. Steps with an empty response are skipped.

    Raises ValueError if a step has no advantage yet (call ``compute_advantages`` first).
    """
    sequences: list[TrainSequence] = []
    merged = 0
    for group, episode, traj, run in _row_runs(groups, merge):
        merged += len(run) - 1
        ids, mask, lps, advs = _sequence(run)
        sequences.append(
            TrainSequence(
                input_ids=ids,
                loss_mask=mask,
                rollout_logprobs=lps,
                advantages=advs,
                group_id=group.group_id,
                episode_id=episode.id,
                trajectory_name=traj.name,
                weight_version=run[0].weight_version,
            )
        )
    batch = TrainBatch(sequences=sequences)
    batch.metrics = {
        "batch/num_sequences": float(len(sequences)),
        "batch/num_response_tokens": float(batch.num_response_tokens),
        # what a micro-batch's activations grow with (docs/profiling.md)
        "batch/max_row_tokens": float(max((len(s.input_ids) for s in sequences), default=0)),
        "batch/skipped_empty_steps": float(
            sum(not s.response_ids for g in groups for _, t in g.members for s in t.steps)
        ),
        "batch/merged_steps": float(merged),
    }
    return batch


def _row_runs(
    groups: list[TrajectoryGroup], merge: bool
) -> Iterator[tuple[TrajectoryGroup, Episode, Trajectory, list[Step]]]:
    """The runs of steps that become training rows, in row order (steps with an empty response skipped)."""
    for group in groups:
        for episode, traj in group.members:
            steps = []
            for step in traj.steps:
                if not step.response_ids:
                    continue
                if step.advantage is None:
                    raise ValueError(
                        f"A step of trajectory {traj.name!r} in episode {episode.id} has no advantage: "
                        "call compute_advantages(groups, ...) before build_train_batch."
                    )
                steps.append(step)
            for run in _merge_runs(steps) if merge else [[step] for step in steps]:
                yield group, episode, traj, run


def attach_trainer_logprobs(
    groups: list[TrajectoryGroup], logprobs_per_row: list[list[float]], *, merge: bool = True
) -> None:
    """Record on each step, as ``step.info["trainer_logprobs"]``, the trainer's logprob of each of its
    response tokens, taken from ``logprobs_per_row`` (one list per row of ``build_train_batch(groups,
    merge=merge)``, aligned with the row's ``input_ids``, as a backend's ``compute_logprobs`` returns).

    In a row, each step's response starts at ``len(step.prompt_ids)``: the row so far is exactly that
    step's prompt. The run store shows these beside the sampler's ``step.logprobs``.
    """
    for (_, _, _, run), row in zip(_row_runs(groups, merge), logprobs_per_row, strict=True):
        for step in run:
            start = len(step.prompt_ids)
            step.info["trainer_logprobs"] = [float(x) for x in row[start : start + len(step.response_ids)]]
