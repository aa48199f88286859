"""The ``monitor.*`` section of a training config: the drift monitor and the reward-hacking detector
(``rllm.trainer.monitors``; docs/monitoring.md defines every score and threshold).

Pydantic only, so ``rllm.trainer.config`` stays light; what a key means for the run is in the monitors'
module, and the combinations a run cannot honour are refused by ``check_monitor_config`` at start-up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DriftConfig(_Section):
    """The drift monitor: a recent window of steps against a reference window (docs/monitoring.md)."""

    enabled: bool = Field(
        False,
        description="Compare the recent window's rewards, env metrics and task mix with a reference window.",
    )
    window: int = Field(4, ge=1, description="Training steps in each window (recent and reference).")
    reference: Literal["previous", "start"] = Field(
        "previous",
        description="The reference window: previous = the window just before the recent one (alerts while the "
        "distributions are moving); start = the run's first window (alerts while they differ from the start).",
    )
    threshold: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Alert when a component's score (KS statistic of rewards or of an env metric, "
        "Jensen-Shannon divergence of the task mix; each in [0, 1]) reaches this.",
    )
    alpha: float = Field(
        0.01,
        gt=0,
        le=1,
        description="A KS component alerts only when its two-sample p-value is at most this (guards small windows).",
    )
    adapt_temperature: bool = Field(
        False,
        description="While drift is alerted, raise the rollout temperature by temperature_step per step (up to "
        "max_temperature); after it, lower it back by the same step to rollout.temperature. Every change is logged "
        "and recorded as monitor/drift/temperature. Local backend, synchronous runs only.",
    )
    max_temperature: float = Field(
        1.5, gt=0, le=2, description="adapt_temperature: the highest temperature it raises to."
    )
    temperature_step: float = Field(0.1, gt=0, le=1, description="adapt_temperature: the change per step.")


class HackingConfig(_Section):
    """The reward-hacking detector: reward rising while an independent check does not, and output collapse
    (docs/monitoring.md)."""

    enabled: bool = Field(
        True, description="Watch for reward hacking (disagreeing checks, output collapse) and alert on it."
    )
    window: int = Field(
        4, ge=1, description="Training steps whose mean training reward is the reward level at a step."
    )
    min_reward_rise: float = Field(
        0.15,
        gt=0,
        description="A disagreement needs the training reward level to rise by at least this (reward units).",
    )
    max_check_rise: float = Field(
        0.0,
        description="A disagreement needs the independent check (held-out eval accuracy, the second reward) to rise "
        "by at most this while the training reward rose by min_reward_rise.",
    )
    second_reward: str | None = Field(
        None,
        description="A second reward (a registered name, docs/rewards.md) scored on each training episode's final "
        "reply beside the training reward: an independent verifier the disagreement check compares with.",
    )
    entropy_floor: float = Field(
        0.005,
        ge=0,
        description="Collapse: alert when train/entropy (nats per token) stays at or below this for "
        "entropy_patience updates in a row.",
    )
    entropy_patience: int = Field(
        3, ge=1, description="Collapse: updates in a row at or below entropy_floor before the entropy alert."
    )
    same_answer_max: float = Field(
        0.75,
        gt=0,
        le=1,
        description="Collapse: alert when this share of a step's distinct tasks (at least 4) have the same most "
        "common answer.",
    )
    repetition_max: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Collapse: alert when the mean share of repeated 4-grams within a reply's tokens reaches this.",
    )
    min_length_ratio: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Collapse: alert when the mean reply length falls to this share of the first window's mean.",
    )
    stall_patience: int = Field(
        3,
        ge=1,
        description="Collapse: alert when this many steps in a row made no update although the tasks' rewards "
        "differ (each task's attempts all scored alike: a policy that answers every task one way, right or "
        "wrong, gives GRPO no signal and can no longer improve).",
    )


class MonitorConfig(_Section):
    """What watches a run as it trains: ``monitor.drift.*`` and ``monitor.hacking.*``."""

    drift: DriftConfig = Field(default_factory=DriftConfig)
    hacking: HackingConfig = Field(default_factory=HackingConfig)

    @model_validator(mode="after")
    def _no_settings_for_a_monitor_that_is_off(self) -> MonitorConfig:
        """A key of a monitor that is off, set to anything but its default, would do nothing: refused."""
        d = self.drift
        if d.adapt_temperature and not d.enabled:
            raise ValueError(
                "monitor.drift.adapt_temperature=true needs the drift monitor: set monitor.drift.enabled=true"
            )
        for name, section in (("drift", self.drift), ("hacking", self.hacking)):
            # Compared with the defaults, not with the keys given: a run's config.yaml spells out every key.
            unused = sorted(
                key
                for key, field in type(section).model_fields.items()
                if key != "enabled" and getattr(section, key) != field.default
            )
            if not section.enabled and unused:
                keys = ", ".join(f"monitor.{name}.{key}" for key in unused)
                raise ValueError(
                    f"{keys} set, but monitor.{name}.enabled=false: set monitor.{name}.enabled=true or drop "
                    f"{'it' if len(unused) == 1 else 'them'}"
                )
        return self
