"""Dynamic sampling with refill (DAPO): keep sampling until the step has enough tasks with signal.

A group whose attempts all scored the same carries no advantage, and ``filter_groups`` drops it. When most
groups are like that (a task set too easy or too hard for the policy), a step trains on a handful of groups
or none. DAPO's answer (Yu et al. 2025, "dynamic sampling") is to sample more tasks until the batch holds
the configured number of groups with signal. ``refill_batch`` does that, bounded by a number of extra rounds
(``algorithm.filters.refill_rounds``):

- The step's own episodes (round 0) all stay in the batch, signal or not, as without refill, so the loss
  normalisers see what they always saw.
- Each extra round samples a fresh set of tasks (the caller's ``sample_round``: never a task the step has
  already sampled, so no group mixes attempts of two rounds) and adds the episodes of those of its tasks
  that have signal, in order, until ``target`` tasks with signal are reached; the surplus is left out of
  the batch (as DAPO truncates to the batch size) but counted.
- A task has signal when at least one of its groups (one per role) survives ``filter_groups``.

The episodes must already be shaped (``apply_shaping``): shaping changes rewards, so it decides signal.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm.algorithms.transforms import FilterConfig, TrajectoryGroup, filter_groups, group_episodes
from rllm.types import Episode


@dataclass
class RefillResult:
    """What one step's refill produced: the episodes to train on (``batch``), every episode it sampled
    (``sampled``: the batch plus the refill rounds' episodes without signal and the surplus), and its
    ``refill/*`` metrics."""

    batch: list[Episode]
    sampled: list[Episode]
    metrics: dict[str, float]


def signal_task_ids(
    episodes: list[Episode],
    filters: FilterConfig,
    signal: Callable[[TrajectoryGroup], np.ndarray] | None = None,
) -> list[str]:
    """The ids of the tasks among ``episodes`` with at least one group ``filter_groups`` keeps, in order."""
    kept, _ = filter_groups(group_episodes(episodes), filters, signal=signal)
    return list(dict.fromkeys(group.task_id for group in kept))


def refill_batch(
    episodes: list[Episode],
    *,
    target: int,
    max_rounds: int,
    sample_round: Callable[[int], list[Episode]],
    filters: FilterConfig,
    signal: Callable[[TrajectoryGroup], np.ndarray] | None = None,
) -> RefillResult:
    """Add refill rounds to a step's shaped ``episodes`` until ``target`` tasks have signal or
    ``max_rounds`` extra rounds have run (``sample_round(r)`` samples round ``r`` = 1, 2, ...; an empty
    list means no task is left to sample, and ends the refill).

    Metrics: ``refill/rounds`` (extra rounds run), ``refill/tasks_sampled`` (all rounds),
    ``refill/signal_tasks_sampled`` (tasks with signal found, surplus included), ``refill/signal_tasks``
    (tasks with signal in the batch), ``refill/surplus_tasks`` (signal left out past ``target``) and
    ``refill/short`` (1 when the batch still has fewer than ``target`` tasks with signal)."""
    batch, sampled = list(episodes), list(episodes)
    have = signal_task_ids(episodes, filters, signal)
    found, rounds, tasks_sampled = len(have), 0, len({e.task_id for e in episodes})
    while len(have) < target and rounds < max_rounds:
        new = sample_round(rounds + 1)
        if not new:
            break
        rounds += 1
        sampled += new
        tasks_sampled += len({e.task_id for e in new})
        with_signal = signal_task_ids(new, filters, signal)
        found += len(with_signal)
        taken = with_signal[: target - len(have)]
        have += taken
        keep = set(taken)
        batch += [e for e in new if e.task_id in keep]
    metrics = {
        "refill/rounds": float(rounds),
        "refill/tasks_sampled": float(tasks_sampled),
        "refill/signal_tasks_sampled": float(found),
        "refill/signal_tasks": float(len(have)),
        "refill/surplus_tasks": float(found - len(have)),
        "refill/short": float(len(have) < target),
    }
    return RefillResult(batch, sampled, metrics)


def fresh_tasks(
    tasks: list[dict[str, Any]],
    n: int,
    *,
    key: str,
    used: set[str],
    task_id: Callable[[dict[str, Any]], str],
) -> list[dict[str, Any]]:
    """Up to ``n`` of ``tasks`` whose ids (``task_id(task)``) are not in ``used``, in an order seeded by
    ``key`` (the same key gives the same tasks); their ids are added to ``used``."""
    out: list[dict[str, Any]] = []
    for i in random.Random(key).sample(range(len(tasks)), len(tasks)):
        task_id_i = task_id(tasks[i])
        if task_id_i not in used:
            used.add(task_id_i)
            out.append(tasks[i])
            if len(out) == n:
                break
    return out
