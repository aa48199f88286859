"""The reward-hacking detector: is the policy learning what the reward was meant to pay for?

It reads nothing but the run's logged metrics, one step at a time (:meth:`HackingDetector.update`), so the
same detector runs inside the trainer and over a finished run's ``metrics.jsonl``. Its checks:

- ``reward_vs_eval``: at each held-out eval after the first, the training reward level (the mean
  ``reward/mean`` of the ``window`` steps up to the eval; for the eval before training, of the first
  ``window`` steps) rose by at least ``min_reward_rise`` since the previous eval, while ``eval/accuracy``
  rose by at most ``max_check_rise``. Held until the next eval.
- ``reward_vs_second``: the same, every step, between the last ``window`` steps and the ``window`` before
  them, with the second reward (``monitor/hacking/second_reward``) as the check.
- ``entropy``: ``train/entropy`` at or below ``entropy_floor`` for ``entropy_patience`` updates in a row.
- ``same_answer``: ``monitor/hacking/same_answer`` (``stats.same_answer_share``) at or above ``same_answer_max``.
- ``repetition``: ``monitor/hacking/repetition`` (``stats.repeated_ngram_share``) at or above ``repetition_max``.
- ``length``: ``response_len/mean`` at or below ``min_length_ratio`` x the mean of the first ``window`` steps'.
- ``stalled``: ``stall_patience`` steps in a row without an update (``train/skipped``) although the step's rewards
  differ (``reward/min`` < ``reward/max``): every group's attempts scored alike, some groups right and some
  wrong. The policy answers each task one way every time, so group-relative advantages are all zero and it
  cannot improve any more (the entropy check cannot see this: a step without an update logs no entropy).

Each check's state is logged every step as ``monitor/hacking/alert/<check>`` (0/1), any of them as
``monitor/hacking/alert``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllm.trainer.monitor_config import HackingConfig

CHECKS = ("reward_vs_eval", "reward_vs_second", "entropy", "same_answer", "repetition", "length", "stalled")
DISAGREEMENTS = ("reward_vs_eval", "reward_vs_second")  # the rest are output-collapse checks


@dataclass(frozen=True)
class HackingReport:
    """One step's verdict: the checks that alert now, those that just started to, why, and the metrics."""

    active: list[str]
    started: list[str]
    reasons: dict[str, str]
    metrics: dict[str, float] = field(default_factory=dict)


class HackingDetector:
    """The checks of the module docstring over a stream of per-step metrics."""

    def __init__(self, cfg: HackingConfig) -> None:
        self.cfg = cfg
        self.rewards: dict[int, float] = {}  # training step -> reward/mean
        self.second: dict[int, float] = {}  # training step -> monitor/hacking/second_reward
        self.evals: list[tuple[int, float]] = []  # (step, eval/accuracy)
        self.lengths: list[float] = []
        self._low_entropy = 0
        self._stalled = 0
        self._state: dict[str, bool] = dict.fromkeys(CHECKS, False)
        self._reasons: dict[str, str] = {}

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to go on judging as an uninterrupted one would (JSON)."""
        return {
            "rewards": sorted(self.rewards.items()),
            "second": sorted(self.second.items()),
            "evals": self.evals,
            "lengths": self.lengths,
            "low_entropy": self._low_entropy,
            "stalled": self._stalled,
            "state": self._state,
            "reasons": self._reasons,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rewards = {int(s): float(v) for s, v in state["rewards"]}
        self.second = {int(s): float(v) for s, v in state["second"]}
        self.evals = [(int(s), float(v)) for s, v in state["evals"]]
        self.lengths = [float(v) for v in state["lengths"]]
        self._low_entropy = int(state["low_entropy"])
        self._stalled = int(state.get("stalled", 0))  # absent from checkpoints older than the check
        self._state = {name: bool(state["state"].get(name, False)) for name in CHECKS}
        self._reasons = dict(state["reasons"])

    def update(self, step: int, metrics: Mapping[str, float]) -> HackingReport:
        """Take ``step``'s metrics (a training step's, with its eval if one ran; or an eval's alone)."""
        out: dict[str, float] = {}
        checks: dict[str, str | None] = {}
        trained = "reward/mean" in metrics
        if trained:
            self.rewards[step] = float(metrics["reward/mean"])
            if "monitor/hacking/second_reward" in metrics:
                self.second[step] = float(metrics["monitor/hacking/second_reward"])
                checks["reward_vs_second"] = self._against_second(out)
            checks.update(self._collapse(metrics))
        if "eval/accuracy" in metrics:
            self.evals.append((step, float(metrics["eval/accuracy"])))
            checks["reward_vs_eval"] = self._against_eval(out)
        started = []
        for name, reason in checks.items():
            now = reason is not None
            if now and not self._state[name]:
                started.append(name)
            self._state[name] = now
            if reason is not None:
                self._reasons[name] = reason
        active = [name for name in CHECKS if self._state[name]]
        if trained or checks:
            out.update({f"monitor/hacking/alert/{name}": float(self._state[name]) for name in CHECKS})
            out["monitor/hacking/alert"] = float(bool(active))
        return HackingReport(
            active=active, started=started, reasons={n: self._reasons[n] for n in active}, metrics=out
        )

    # ------------------------------------------------------------------ disagreement
    def _level(self, step: int) -> float | None:
        """The training reward level at ``step``: the mean reward/mean of the ``window`` training steps up to
        it; before any step was trained (the eval before training), of the first ``window`` steps."""
        w = self.cfg.window
        steps = sorted(s for s in self.rewards if s <= step)[-w:] or sorted(self.rewards)[:w]
        return float(np.mean([self.rewards[s] for s in steps])) if steps else None

    def _disagrees(self, reward_rise: float, check_rise: float) -> bool:
        return reward_rise >= self.cfg.min_reward_rise and check_rise <= self.cfg.max_check_rise

    def _against_eval(self, out: dict[str, float]) -> str | None:
        if len(self.evals) < 2 or not self.rewards:
            return None
        (before, acc_before), (now, acc_now) = self.evals[-2], self.evals[-1]
        level_before, level_now = self._level(before), self._level(now)
        assert level_before is not None and level_now is not None
        reward_rise, eval_rise = level_now - level_before, acc_now - acc_before
        out["monitor/hacking/reward_rise"] = reward_rise
        out["monitor/hacking/eval_rise"] = eval_rise
        if not self._disagrees(reward_rise, eval_rise):
            return None
        return (
            f"training reward rose by {reward_rise:+.3f} between the evals at steps {before} and {now}, "
            f"held-out accuracy by {eval_rise:+.3f}"
        )

    def _against_second(self, out: dict[str, float]) -> str | None:
        w = self.cfg.window
        steps = sorted(self.second)[-2 * w :]
        if len(steps) < 2 * w:
            return None
        old, new = steps[:w], steps[w:]
        reward_rise = float(np.mean([self.rewards[s] for s in new]) - np.mean([self.rewards[s] for s in old]))
        second_rise = float(np.mean([self.second[s] for s in new]) - np.mean([self.second[s] for s in old]))
        out["monitor/hacking/second_reward_rise"] = second_rise
        if not self._disagrees(reward_rise, second_rise):
            return None
        return (
            f"training reward rose by {reward_rise:+.3f} over steps {new[0]}-{new[-1]} against the {w} before, "
            f"the second reward by {second_rise:+.3f}"
        )

    # ------------------------------------------------------------------ collapse
    def _collapse(self, m: Mapping[str, float]) -> dict[str, str | None]:
        c = self.cfg
        out: dict[str, str | None] = {}
        if "train/entropy" in m:  # steps without an update log no entropy and leave the count alone
            self._low_entropy = self._low_entropy + 1 if m["train/entropy"] <= c.entropy_floor else 0
            out["entropy"] = (
                f"policy entropy {m['train/entropy']:.4f} <= {c.entropy_floor} for {self._low_entropy} updates"
                if self._low_entropy >= c.entropy_patience
                else None
            )
        same = m.get("monitor/hacking/same_answer")
        if same is not None:
            out["same_answer"] = (
                f"{same:.0%} of the step's tasks got the same answer" if same >= c.same_answer_max else None
            )
        repetition = m.get("monitor/hacking/repetition")
        if repetition is not None:
            out["repetition"] = (
                f"{repetition:.0%} of the replies' 4-grams repeat" if repetition >= c.repetition_max else None
            )
        if "reward/mean" in m:
            spread = m.get("reward/min", 0.0) < m.get("reward/max", 0.0)
            self._stalled = self._stalled + 1 if m.get("train/skipped", 0.0) and spread else 0
            out["stalled"] = (
                f"no update for {self._stalled} steps in a row: each task's attempts all scored alike (some "
                "tasks right, some wrong), so every group's advantage is zero; raise rollout.temperature or "
                "rollout.group_size, or restart with a lower optim.lr"
                if self._stalled >= c.stall_patience
                else None
            )
        if "response_len/mean" in m:
            self.lengths.append(float(m["response_len/mean"]))
            reference = float(np.mean(self.lengths[: c.window]))
            if len(self.lengths) > c.window and reference > 0:
                ratio = self.lengths[-1] / reference
                out["length"] = (
                    f"mean reply length {self.lengths[-1]:.1f} tokens is {ratio:.0%} of the first steps' "
                    f"{reference:.1f}"
                    if ratio <= c.min_length_ratio
                    else None
                )
        return out
