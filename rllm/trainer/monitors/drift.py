"""The drift monitor: is the run's environment still the one it started in?

Each step contributes a :class:`StepSample` (its episodes' rewards, per-episode environment metrics and
task mix). Once two windows of ``monitor.drift.window`` steps exist, the recent window is compared with the
reference window (the one just before it, or the run's first) component by component:

- ``reward``: the Kolmogorov-Smirnov statistic D of the per-episode rewards (``stats.ks_statistic``);
- each per-episode metric the episodes report in both windows (``env/turns``, a flow's own ``signal/*``, ...;
  not timings, ``*_s``), under its own name: the same statistic of its values;
- ``task_mix``: the Jensen-Shannon divergence of the episodes' task-kind histograms (``data_source``).

A component alerts when its score reaches ``threshold`` (and, for a KS statistic, its p-value is at most
``alpha``); the step's drift score is the largest component score. With ``adapt_temperature`` the monitor
also says which rollout temperature the next step samples at (:meth:`DriftMonitor.next_temperature`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rllm.trainer.monitor_config import DriftConfig
from rllm.trainer.monitors.stats import js_divergence, ks_statistic
from rllm.types import Episode


@dataclass
class StepSample:
    """What the drift monitor keeps of one training step: made from its episodes after the rollout, dropped
    when it leaves both windows."""

    rewards_N: list[float]
    env_metrics: dict[str, list[float]] = field(default_factory=dict)  # metric -> one value per episode
    task_mix: Counter[str] = field(default_factory=Counter)  # task kind -> episodes

    def to_json(self) -> dict[str, Any]:
        return {"rewards_N": self.rewards_N, "env_metrics": self.env_metrics, "task_mix": dict(self.task_mix)}

    @classmethod
    def of(cls, episodes: Iterable[Episode]) -> StepSample:
        """The finished episodes' rewards, per-episode metrics (timings, keys ending in ``_s``, left out)
        and task kinds (``data_source``, else the task id's prefix before its last '-')."""
        sample = cls(rewards_N=[])
        for episode in episodes:
            if episode.failed:
                continue
            sample.rewards_N.append(float(episode.reward or 0.0))
            for key, value in episode.metrics.items():
                if not key.endswith("_s"):  # a timing measures the machine, not the environment
                    sample.env_metrics.setdefault(key, []).append(float(value))
            kind = episode.task.get("data_source") or episode.task_id.rsplit("-", 1)[0]
            sample.task_mix[str(kind)] += 1
        return sample


@dataclass(frozen=True)
class DriftReport:
    """One step's comparison: the component scores, which of them alert, and the metrics to log."""

    scores: dict[str, float]
    alerting: list[str]
    metrics: dict[str, float]

    @property
    def alert(self) -> bool:
        return bool(self.alerting)

    def describe(self) -> str:
        return ", ".join(f"{name} {self.scores[name]:.2f}" for name in self.alerting)


class DriftMonitor:
    """Windows of :class:`StepSample` and their comparison (see the module docstring)."""

    def __init__(self, cfg: DriftConfig, base_temperature: float) -> None:
        self.cfg = cfg
        self.base_temperature = base_temperature
        self.temperature = base_temperature
        self._start: list[StepSample] = []  # reference=start: the run's first window
        self._recent: deque[StepSample] = deque(maxlen=2 * cfg.window)
        self._seen = 0

    def state_dict(self) -> dict[str, Any]:
        """The windows and the temperature, for a resumed run (JSON)."""
        return {
            "start": [s.to_json() for s in self._start],
            "recent": [s.to_json() for s in self._recent],
            "seen": self._seen,
            "temperature": self.temperature,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        def sample(d: Mapping[str, Any]) -> StepSample:
            return StepSample(list(d["rewards_N"]), dict(d["env_metrics"]), Counter(d["task_mix"]))

        self._start = [sample(d) for d in state["start"]]
        self._recent = deque((sample(d) for d in state["recent"]), maxlen=2 * self.cfg.window)
        self._seen = int(state["seen"])
        self.temperature = float(state["temperature"])

    def update(self, sample: StepSample) -> DriftReport | None:
        """Add a step; its comparison once both windows are full, else None."""
        w = self.cfg.window
        self._seen += 1
        if len(self._start) < w:
            self._start.append(sample)
        self._recent.append(sample)
        if self._seen < 2 * w:
            return None
        recent = list(self._recent)[w:]
        reference = self._start if self.cfg.reference == "start" else list(self._recent)[:w]
        return self.compare(reference, recent)

    def compare(self, reference: list[StepSample], recent: list[StepSample]) -> DriftReport:
        """Score the recent window against the reference window (see the module docstring)."""
        scores: dict[str, float] = {}
        p_values: dict[str, float] = {}
        ref_rewards = [r for s in reference for r in s.rewards_N]
        new_rewards = [r for s in recent for r in s.rewards_N]
        if ref_rewards and new_rewards:
            scores["reward"], p_values["reward"] = ks_statistic(ref_rewards, new_rewards)
        for key in sorted(
            {k for s in reference for k in s.env_metrics} & {k for s in recent for k in s.env_metrics}
        ):
            a = [v for s in reference for v in s.env_metrics.get(key, [])]
            b = [v for s in recent for v in s.env_metrics.get(key, [])]
            scores[key], p_values[key] = ks_statistic(a, b)
        mix_ref: Counter[str] = sum((s.task_mix for s in reference), Counter())
        mix_new: Counter[str] = sum((s.task_mix for s in recent), Counter())
        scores["task_mix"] = js_divergence(mix_ref, mix_new)
        alerting = [
            name
            for name, score in scores.items()
            if score >= self.cfg.threshold and p_values.get(name, 0.0) <= self.cfg.alpha
        ]
        env_scores = [v for k, v in scores.items() if k not in ("reward", "task_mix")]
        metrics = {
            "monitor/drift/score": max(scores.values()),
            "monitor/drift/reward_ks": scores.get("reward", 0.0),
            "monitor/drift/env_ks": max(env_scores, default=0.0),
            "monitor/drift/task_mix_jsd": scores["task_mix"],
            "monitor/drift/alert": float(bool(alerting)),
        }
        return DriftReport(scores=scores, alerting=alerting, metrics=metrics)

    def next_temperature(self, alert: bool) -> float:
        """adapt_temperature: one ``temperature_step`` up (to ``max_temperature``) while drift is alerted, one
        step back down towards the configured rollout temperature once it is not."""
        c = self.cfg
        if alert:
            self.temperature = min(self.temperature + c.temperature_step, c.max_temperature)
        else:
            self.temperature = max(self.temperature - c.temperature_step, self.base_temperature)
        self.temperature = round(self.temperature, 6)  # no float drift in the recorded values
        return self.temperature
