"""Reward shaping: adjust trajectory rewards after scoring, before advantages are computed.

A *shaper* is a callable ``shaper(episode) -> dict[str, float]`` that changes the rewards of the
episode's trajectories in place and returns metrics (averaged over the step, prefixed ``shaping/``).
Shapers adjust ``trajectory.reward`` and the last step's ``reward`` by the same amount, so both
trajectory-level and per-step credit see the change. ``episode.reward`` (what ``reward/mean`` and
accuracy report) stays the task's own score: shaping steers training, it does not redefine success.

    trainer = AgentTrainer(cfg, workflow=..., reward_shaping=[format_bonus(r"^\\d+$", bonus=0.1),
                                                              overlong_penalty(max_tokens=64, buffer=16)])

or in config: ``algorithm.shaping.format_regex``, ``.format_bonus``, ``.overlong_buffer`` (see ``--help-config``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rllm.types import Episode, Trajectory

Shaper = Callable[[Episode], dict[str, float]]


def _adjust(traj: Trajectory, delta: float) -> None:
    traj.reward = (traj.reward or 0.0) + delta
    if traj.steps:
        traj.steps[-1].reward += delta


def format_bonus(
    check: str | Callable[[str], bool],
    *,
    bonus: float = 0.1,
    penalty: float = 0.0,
    roles: set[str] | None = None,
) -> Shaper:
    """Add ``bonus`` to a trajectory whose every response matches ``check``, else add ``-penalty``.

    ``check`` is a regular expression (``re.fullmatch`` on the stripped response text) or a predicate.
    ``roles`` limits it to those trajectory names. Metric: ``shaping/format_ok`` (share of trajectories
    that matched).
    """
    if isinstance(check, str):
        pattern = re.compile(check, re.DOTALL)

        def matches(text: str) -> bool:
            return pattern.fullmatch(text.strip()) is not None
    else:
        matches = check

    def shape(episode: Episode) -> dict[str, float]:
        ok = n = 0
        for traj in episode.trajectories:
            if (roles is not None and traj.name not in roles) or not traj.steps:
                continue
            n += 1
            if all(matches(step.response_text) for step in traj.steps):
                ok += 1
                _adjust(traj, bonus)
            elif penalty:
                _adjust(traj, -penalty)
        return {"shaping/format_ok": ok / n} if n else {}

    return shape


def overlong_penalty(
    *, max_tokens: int, buffer: int, coef: float = 1.0, roles: set[str] | None = None
) -> Shaper:
    """DAPO's soft overlong punishment (Yu et al. 2025), per response.

    A response of ``L`` generated tokens loses nothing while ``L <= max_tokens - buffer``, then
    ``coef * (L - (max_tokens - buffer)) / buffer``, growing linearly to ``coef`` at ``max_tokens``. A
    trajectory gets the mean over its responses. Metric: ``shaping/overlong_penalty`` (mean subtracted).
    """
    if not 0 < buffer <= max_tokens:
        raise ValueError(
            f"overlong_penalty needs 0 < buffer <= max_tokens, got buffer={buffer}, max_tokens={max_tokens}"
        )
    start = max_tokens - buffer

    def shape(episode: Episode) -> dict[str, float]:
        total, n = 0.0, 0
        for traj in episode.trajectories:
            if (roles is not None and traj.name not in roles) or not traj.steps:
                continue
            lengths = [sum(step.response_mask or []) for step in traj.steps]
            penalty = coef * sum(min(max(L - start, 0) / buffer, 1.0) for L in lengths) / len(lengths)
            _adjust(traj, -penalty)
            total += penalty
            n += 1
        return {"shaping/overlong_penalty": total / n} if n else {}

    return shape


def apply_shaping(episodes: list[Episode], shapers: list[Shaper]) -> None:
    """Run every shaper on every episode that did not fail; their metrics land in ``episode.metrics``."""
    for episode in episodes:
        if episode.failed:
            continue
        for shaper in shapers:
            episode.metrics.update(shaper(episode))
