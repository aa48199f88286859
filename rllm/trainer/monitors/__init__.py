"""What watches a run as it trains: the drift monitor and the reward-hacking detector (docs/monitoring.md).

The trainer makes one :class:`Monitors` per run and calls it twice per step:

    metrics.update(monitors.observe(episodes))     # after the rollout: the episodes' statistics
    metrics.update(monitors.check(step, metrics))  # after the eval: the verdicts, alerts and their metrics

An alert is a warning log line, a ``monitor/<name>/alert`` metric (1 while it holds; the run store keeps
it, and ``rllm ui`` shows a badge on the run's page), and, for drift with ``adapt_temperature``, a change of
the rollout temperature, itself logged and recorded as ``monitor/drift/temperature``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rllm.rewards.registry import get_reward, reward_names
from rllm.trainer.monitor_config import DriftConfig, HackingConfig, MonitorConfig
from rllm.trainer.monitors.drift import DriftMonitor, DriftReport, StepSample
from rllm.trainer.monitors.hacking import CHECKS, DISAGREEMENTS, HackingDetector, HackingReport
from rllm.trainer.monitors.stats import collapse_stats, final_reply
from rllm.types import Episode
from rllm.utils.config import did_you_mean

__all__ = [
    "CHECKS",
    "DriftConfig",
    "DriftMonitor",
    "DriftReport",
    "HackingConfig",
    "HackingDetector",
    "HackingReport",
    "MonitorConfig",
    "Monitors",
    "StepSample",
    "check_monitor_config",
    "replay_hacking",
]

logger = logging.getLogger(__name__)

# The only backend whose loss logprobs follow a changed rollout temperature: it reads
# cfg.rollout.temperature at every forward pass, in this process (see Monitors._retemper).
ADAPTS_TEMPERATURE = ("local",)


def check_monitor_config(cfg: Any) -> None:
    """Refuse, at start-up, the ``monitor.*`` settings this run cannot honour. One line per problem."""
    from rllm.trainer.backends.base import UnsupportedConfigError  # it loads torch; this package must not

    d, h, r = cfg.monitor.drift, cfg.monitor.hacking, cfg.rollout
    if h.enabled and h.second_reward is not None and h.second_reward not in reward_names():
        raise UnsupportedConfigError(
            f"monitor.hacking.second_reward={h.second_reward!r} is not a reward"
            + (
                did_you_mean(h.second_reward, reward_names())
                or f": choose one of {', '.join(reward_names())}"
            )
        )
    if not d.adapt_temperature:
        return
    # The PPO ratio divides the trainer's logprobs by the sampler's: both must be of the same tempered
    # distribution, so the trainer's temperature has to follow every change the monitor makes.
    if cfg.backend.name not in ADAPTS_TEMPERATURE:
        raise UnsupportedConfigError(
            f"monitor.drift.adapt_temperature=true needs backend.name=local: the {cfg.backend.name} backend computes "
            "the loss's logprobs at the configured rollout.temperature, so the ratio to the rollout's would be off-"
            "policy after a change; set monitor.drift.adapt_temperature=false"
        )
    if r.max_staleness > 0:
        raise UnsupportedConfigError(
            "monitor.drift.adapt_temperature=true with rollout.max_staleness > 0 would train one batch on episodes "
            "sampled at several temperatures: set rollout.max_staleness=0 or monitor.drift.adapt_temperature=false"
        )
    if cfg.algorithm.distill.enabled:
        raise UnsupportedConfigError(
            "algorithm.distill compares the untempered student with the teacher: set "
            "monitor.drift.adapt_temperature=false"
        )
    if d.max_temperature <= r.temperature:
        raise UnsupportedConfigError(
            f"monitor.drift.max_temperature={d.max_temperature:g} leaves no room above "
            f"rollout.temperature={r.temperature:g}: raise it or set monitor.drift.adapt_temperature=false"
        )


class Monitors:
    """The run's monitors (those ``cfg.monitor`` turns on). ``set_temperature(t)`` is called when drift
    adaptation changes the rollout temperature; it must make the sampler and the loss use ``t``."""

    def __init__(
        self, cfg: MonitorConfig, *, temperature: float, set_temperature: Callable[[float], None]
    ) -> None:
        self.cfg = cfg
        self.drift = DriftMonitor(cfg.drift, temperature) if cfg.drift.enabled else None
        self.hacking = HackingDetector(cfg.hacking) if cfg.hacking.enabled else None
        self.second_reward = (
            get_reward(cfg.hacking.second_reward) if self.hacking and cfg.hacking.second_reward else None
        )
        self._set_temperature = set_temperature
        self._sample: StepSample | None = None
        self._drift_alert = False

    def state_dict(self) -> dict[str, Any]:
        """What the checkpoint keeps, so a resumed run's monitors carry on where they were (JSON)."""
        return {
            "drift": self.drift.state_dict() if self.drift is not None else None,
            "hacking": self.hacking.state_dict() if self.hacking is not None else None,
            "drift_alert": self._drift_alert,
        }

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Take back a checkpoint's state (a checkpoint from before the monitors, or from a run that had one
        of them off, leaves that one starting afresh); a raised temperature is applied again."""
        state = state or {}
        if self.drift is not None and state.get("drift"):
            self.drift.load_state_dict(state["drift"])
            self._drift_alert = bool(state.get("drift_alert"))
            if self.cfg.drift.adapt_temperature and self.drift.temperature != self.drift.base_temperature:
                self._set_temperature(self.drift.temperature)
        if self.hacking is not None and state.get("hacking"):
            self.hacking.load_state_dict(state["hacking"])

    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """The statistics of a step's episodes the checks read (collapse, the second reward); the drift
        monitor's sample of them is kept for :meth:`check`."""
        out: dict[str, float] = {}
        if self.drift is not None:
            self._sample = StepSample.of(episodes)
        if self.hacking is not None:
            out.update(collapse_stats(episodes))
            if self.second_reward is not None:
                second = self._score_second(episodes)
                if second:
                    out["monitor/hacking/second_reward"] = float(np.mean(second))
        return out

    def check(self, step: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """The verdicts at ``step`` (``metrics``: the step's, its eval's included), as metrics; alerts and
        temperature changes are logged here."""
        out: dict[str, float] = {}
        if self.drift is not None and self._sample is not None:
            out.update(self._check_drift(step, self._sample))
            self._sample = None
        if self.hacking is not None:
            report = self.hacking.update(step, {**metrics, **out})
            out.update(report.metrics)
            for name in report.started:
                what = "possible reward hacking" if name in DISAGREEMENTS else "output collapse"
                logger.warning("%s at step %d (%s): %s", what, step, name, report.reasons[name])
        return out

    def _check_drift(self, step: int, sample: StepSample) -> dict[str, float]:
        assert self.drift is not None
        report = self.drift.update(sample)
        out = dict(report.metrics) if report is not None else {}
        alert = report is not None and report.alert
        if report is not None and alert != self._drift_alert:
            if alert:
                logger.warning(
                    "drift at step %d: %s (monitor.drift.threshold=%g)",
                    step,
                    report.describe(),
                    self.cfg.drift.threshold,
                )
            else:
                logger.info(
                    "drift ended at step %d (score %.2f)", step, report.metrics["monitor/drift/score"]
                )
        self._drift_alert = alert
        if self.cfg.drift.adapt_temperature:
            before = self.drift.temperature
            after = self.drift.next_temperature(alert)
            if after != before:
                logger.warning(
                    "drift: rollout temperature %.2f -> %.2f from step %d on", before, after, step + 1
                )
                self._set_temperature(after)
            out["monitor/drift/temperature"] = after
            out["monitor/drift/temperature_change"] = after - before
        return out

    def _score_second(self, episodes: Sequence[Episode]) -> list[float]:
        """The second reward of each finished episode's final reply; a reply it cannot score is left out
        (with a warning), never a reason to stop training."""
        assert self.second_reward is not None
        scores, failures = [], []
        for episode in episodes:
            if episode.failed:
                continue
            try:
                scores.append(float(self.second_reward(episode.task, final_reply(episode)).reward))
            except Exception as exc:  # noqa: BLE001 - a verifier's own failure loses one point, not the run
                failures.append(f"task {episode.task_id}: {exc}")
        if failures:  # one line per step, not one per reply
            logger.warning(
                "monitor.hacking.second_reward could not score %d of %d replies (first: %s)",
                len(failures),
                len(failures) + len(scores),
                failures[0],
            )
        return scores


def replay_hacking(cfg: HackingConfig, records: Sequence[Mapping[str, Any]]) -> list[HackingReport]:
    """Run the detector over a finished run's metric records (``metrics.jsonl`` lines, with ``step``),
    in order: what it would have said at each step."""
    detector = HackingDetector(cfg)
    return [detector.update(int(r["step"]), r) for r in records]
