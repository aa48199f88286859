"""The drift monitor and the reward-hacking detector on recorded sequences: the statistics they rest on,
when each check fires and when it must not (the real default run's metrics replayed: no alert), and the
configurations refused at start-up."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rllm.rewards.registry import register_reward, unregister_reward
from rllm.trainer.backends import backend_capabilities
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.checks import check_config
from rllm.trainer.config import TrainConfig
from rllm.trainer.monitor_config import DriftConfig, HackingConfig, MonitorConfig
from rllm.trainer.monitors import (
    DriftMonitor,
    HackingDetector,
    Monitors,
    StepSample,
    check_monitor_config,
    replay_hacking,
)
from rllm.trainer.monitors.stats import (
    js_divergence,
    ks_statistic,
    repeated_ngram_share,
    same_answer_share,
)
from rllm.types import Episode, Outcome, Step, Trajectory
from rllm.utils.config import ConfigError, load_config

DATA = Path(__file__).with_name("monitor_data")
sys.path.insert(0, str(DATA.parents[2] / "benchmarks"))
from bench_monitors import load_run

# ------------------------------------------------------------------------------------------ statistics


def test_ks_statistic_is_the_largest_cdf_gap() -> None:
    assert ks_statistic([0, 0, 1, 1], [0, 0, 1, 1])[0] == 0.0
    assert ks_statistic([0.0] * 8, [1.0] * 8)[0] == 1.0
    d, p = ks_statistic([0, 0, 0, 1], [0, 1, 1, 1])  # success rates 1/4 and 3/4
    assert d == pytest.approx(0.5) and 0 < p <= 1


def test_js_divergence_of_task_mixes() -> None:
    assert js_divergence({"a": 5, "b": 5}, {"a": 1, "b": 1}) == pytest.approx(0.0)
    assert js_divergence({"a": 3}, {"b": 7}) == pytest.approx(1.0)
    assert js_divergence({"a": 1, "b": 1}, {"a": 1}) == pytest.approx(0.311278, abs=1e-5)


def test_repetition_and_same_answer() -> None:
    assert repeated_ngram_share([1, 2, 3]) is None
    assert repeated_ngram_share([1, 2, 3, 4, 5, 6]) == 0.0
    assert repeated_ngram_share([7] * 12) == pytest.approx(1 - 1 / 9)
    distinct = {f"t{i}": [str(i), str(i)] for i in range(8)}
    assert same_answer_share(distinct) == pytest.approx(1 / 8)
    assert same_answer_share({f"t{i}": ["Paris ", "paris"] for i in range(5)}) == 1.0
    assert same_answer_share({"t0": ["x"], "t1": ["x"], "t2": ["x"]}) is None  # too few tasks to say


# ------------------------------------------------------------------------------------------------ drift


def _sample(
    rng: random.Random, p_success: float, *, kinds: dict[str, int] | None = None, turns: float = 2.0
) -> StepSample:
    rewards = [float(rng.random() < p_success) for _ in range(32)]
    return StepSample(
        rewards_N=rewards,
        env_metrics={"env/turns": [turns + rng.choice((-1, 0, 1)) for _ in rewards]},
        task_mix=Counter(kinds or {"math": 32}),
    )


def _alerts(monitor: DriftMonitor, samples: list[StepSample]) -> list[bool | None]:
    reports = [monitor.update(s) for s in samples]
    return [None if r is None else r.alert for r in reports]


def test_drift_fires_after_the_reward_rule_changes_and_not_before() -> None:
    rng = random.Random(0)
    samples = [_sample(rng, 0.2) for _ in range(8)] + [_sample(rng, 0.9) for _ in range(8)]
    alerts = _alerts(DriftMonitor(DriftConfig(enabled=True, window=3), 1.0), samples)
    assert alerts[:5] == [None] * 5 and not any(alerts[5:8])  # steps 1-8: one reward rule
    assert any(alerts[8:11])  # the change (step 9) is seen within a window
    assert alerts[-1] is False  # reference=previous: once both windows are after it, the drift has ended


def test_reference_start_alerts_while_the_run_differs_from_its_start() -> None:
    rng = random.Random(1)
    samples = [_sample(rng, 0.2) for _ in range(6)] + [_sample(rng, 0.9) for _ in range(10)]
    alerts = _alerts(DriftMonitor(DriftConfig(enabled=True, window=3, reference="start"), 1.0), samples)
    assert not any(alerts[:6]) and all(alerts[8:])


def test_drift_in_env_metrics_and_task_mix() -> None:
    rng = random.Random(2)
    monitor = DriftMonitor(DriftConfig(enabled=True, window=2), 1.0)
    reports = [monitor.update(_sample(rng, 0.5)) for _ in range(4)]
    assert reports[:3] == [None] * 3 and reports[3] is not None and not reports[3].alert
    same_rewards = [_sample(rng, 0.5, turns=6.0) for _ in range(2)]  # the game got longer
    report = [monitor.update(s) for s in same_rewards][-1]
    assert report is not None and "env/turns" in report.alerting and "reward" not in report.alerting
    assert report.metrics["monitor/drift/env_ks"] >= 0.9
    mix = DriftMonitor(DriftConfig(enabled=True, window=2), 1.0)
    kinds = [{"math": 32}] * 2 + [{"code": 28, "math": 4}] * 2
    reports = [mix.update(_sample(rng, 0.5, kinds=k)) for k in kinds]
    assert reports[-1] is not None and reports[-1].alerting == ["task_mix"]
    assert reports[-1].metrics["monitor/drift/task_mix_jsd"] == pytest.approx(
        js_divergence({"math": 64}, {"code": 56, "math": 8})
    )


def test_temperature_rises_within_bounds_while_drift_lasts_and_returns() -> None:
    monitor = DriftMonitor(
        DriftConfig(enabled=True, adapt_temperature=True, max_temperature=1.25, temperature_step=0.1), 1.0
    )
    path = [monitor.next_temperature(alert) for alert in (False, True, True, True, True, False, False, False)]
    assert path == [1.0, 1.1, 1.2, 1.25, 1.25, 1.15, 1.05, 1.0]


# ---------------------------------------------------------------------------------------------- hacking


def _run(records: list[dict[str, Any]], **cfg: Any) -> list[list[str]]:
    detector = HackingDetector(HackingConfig(**cfg))
    return [detector.update(r["step"], r).active for r in records]


def test_reward_rising_while_held_out_accuracy_does_not() -> None:
    rewards = [0.1, 0.1, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95]
    hacked = [{"step": 0, "eval/accuracy": 0.30}] + [
        {"step": s, "reward/mean": r, **({"eval/accuracy": 0.28} if s in (4, 8) else {})}
        for s, r in enumerate(rewards, start=1)
    ]
    active = _run(hacked, window=2)
    assert active[:4] == [[]] * 4 and active[4] == ["reward_vs_eval"]  # first seen at the eval at step 4
    learning = [
        dict(r, **({"eval/accuracy": 0.3 + r["step"] / 20} if "eval/accuracy" in r else {})) for r in hacked
    ]
    assert not any(_run(learning, window=2))  # the same reward curve with accuracy rising with it


def test_reward_rising_while_the_second_reward_falls() -> None:
    records = [
        {"step": s, "reward/mean": 0.1 * s, "monitor/hacking/second_reward": 0.5 - 0.05 * s}
        for s in range(1, 7)
    ]
    active = _run(records, window=2)
    assert active[:3] == [[]] * 3 and all("reward_vs_second" in a for a in active[3:])
    agreeing = [dict(r, **{"monitor/hacking/second_reward": r["reward/mean"]}) for r in records]
    assert not any(_run(agreeing, window=2))


def test_collapse_checks() -> None:
    entropy = [
        {"step": s, "reward/mean": 0.5, "train/entropy": e}
        for s, e in enumerate([0.5, 0.004, 0.003, 0.002, 0.3], 1)
    ]
    assert _run(entropy) == [[], [], [], ["entropy"], []]
    lengths = [
        {"step": s, "reward/mean": 0.5, "response_len/mean": n}
        for s, n in enumerate([30, 30, 28, 25, 2.5], 1)
    ]
    assert _run(lengths, window=2)[-1] == ["length"]
    same = [
        {"step": 1, "reward/mean": 0.5, "monitor/hacking/same_answer": 0.8, "monitor/hacking/repetition": 0.6}
    ]
    assert _run(same) == [["same_answer", "repetition"]]


def test_stalled_counts_steps_without_an_update_while_rewards_differ() -> None:
    """Skipped steps with rewards that differ across tasks count; a skipped step where every attempt scored
    the same (a solved batch, all 1) or a step that trained resets the count."""
    skipped = {"train/skipped": 1.0, "reward/min": 0.0, "reward/max": 1.0}
    solved = {"train/skipped": 1.0, "reward/min": 1.0, "reward/max": 1.0}
    trained = {"train/entropy": 0.4, "reward/min": 0.0, "reward/max": 1.0}
    kinds = [skipped, skipped, solved, skipped, skipped, trained, skipped, skipped, skipped, skipped]
    records = [{"step": s, "reward/mean": 0.5, **k} for s, k in enumerate(kinds, 1)]
    assert ["stalled" in active for active in _run(records)] == [False] * 8 + [True, True]
    assert HackingDetector(HackingConfig(stall_patience=1)).update(1, records[0]).active == ["stalled"]


def _metrics(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def test_a_collapsed_default_run_is_flagged_as_stalled() -> None:
    """A real default run of 2026-12-04 (``rllm train`` at lr 1e-3, 5432af4: ecdd0c7's code; docs/results.md)
    that collapsed: by step 7 it named the first of the two numbers every time, so every group's attempts
    scored alike and only steps 18 and 25 updated after step 6; held-out accuracy stayed at 48 %. The stall
    check fires at step 9 (its third such step) and holds while the run stays stalled. Its entropy check
    never could: no update, no entropy. A run of the same code that went through the same short-answer phase and recovered (93.5 %)
    never triggers it, though it too skipped steps."""
    collapsed = replay_hacking(HackingConfig(), _metrics("collapsed_run_metrics.jsonl"))
    steps = [r.metrics.get("monitor/hacking/alert/stalled") for r in collapsed]
    assert steps[:9] == [0.0] * 9 and steps[9] == 1.0  # record 0 is the eval before training
    assert sum(s == 1.0 for s in steps) >= 15
    assert not any("entropy" in r.active for r in collapsed)
    recovered = replay_hacking(HackingConfig(), _metrics("recovered_run_metrics.jsonl"))
    assert not any("stalled" in r.active for r in recovered)


def test_a_stall_is_logged_as_collapse_when_it_starts(caplog: pytest.LogCaptureFixture) -> None:
    """One line each time the stall starts (the collapsed run updated at steps 18 and 25 and stalled again
    after each), worded as a collapse, not as reward hacking."""
    monitors = Monitors(MonitorConfig(), temperature=1.0, set_temperature=lambda t: None)
    with caplog.at_level("WARNING", logger="rllm.trainer.monitors"):
        for record in _metrics("collapsed_run_metrics.jsonl"):
            monitors.check(record["step"], record)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("output collapse at step 9 (stalled): no update for 3 steps in a row")
    assert len(lines) > 1 and all(line.startswith("output collapse at step ") for line in lines)


def test_the_default_run_replayed_raises_no_alert() -> None:
    """The real 32-step default run of 2026-12-03 (``rllm train`` defaults; docs/results.md): its logged
    metrics, with each step's collapse statistics computed from its journaled replies, replayed through the
    detector. It learns (reward 0.09 -> 1.0, held-out accuracy 3.5 % -> 88.5 %) and collapses its entropy and
    lengths as a converging policy does, but never hacks: no check may fire."""
    from rllm.trainer.monitors.stats import collapse_stats  # the same function the trainer calls

    records, by_step = load_run()  # the loader benchmarks/bench_monitors.py replays too
    for r in records:
        r.update(collapse_stats(by_step.get(r["step"], [])))
    assert len(records) == 33 and sum("monitor/hacking/same_answer" in r for r in records) == 32
    reports = replay_hacking(HackingConfig(), records)
    assert [r.active for r in reports] == [[]] * 33
    evals = [r.metrics for r in reports if "monitor/hacking/reward_rise" in r.metrics]
    assert len(evals) == 4  # the eval check ran at every eval after the first


# ---------------------------------------------------------------------------------------------- config


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, ["model.path=/nonexistent", *overrides])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["backend.name=distributed"], "needs backend.name=local"),
        (["rollout.max_staleness=1"], "several temperatures"),
        (["monitor.drift.max_temperature=1.0"], "leaves no room"),
    ],
)
def test_temperature_adaptation_is_refused_where_the_ratio_would_be_wrong(
    overrides: list[str], message: str
) -> None:
    cfg = _cfg("monitor.drift.enabled=true", "monitor.drift.adapt_temperature=true", *overrides)
    # The monitor's own rule (check_config runs it too, after a backend's own checks, which for
    # backend.name=distributed on a machine without Ray would refuse first, for that reason).
    with pytest.raises(UnsupportedConfigError, match=message):
        check_monitor_config(cfg)


def test_monitor_config_errors() -> None:
    with pytest.raises(ConfigError, match="needs the drift monitor"):
        _cfg("monitor.drift.adapt_temperature=true")
    with pytest.raises(
        ConfigError,
        match="monitor.drift.threshold, monitor.drift.window set, but monitor.drift.enabled=false",
    ):
        _cfg("monitor.drift.window=8", "monitor.drift.threshold=0.3")
    with pytest.raises(
        ConfigError, match="monitor.hacking.second_reward set, but monitor.hacking.enabled=false"
    ):
        _cfg("monitor.hacking.enabled=false", "monitor.hacking.second_reward=math")
    _cfg("monitor.drift.window=4")  # the default: says nothing, as a run's config.yaml spells out every key
    cfg = _cfg("monitor.hacking.second_reward=numbr")
    with pytest.raises(UnsupportedConfigError, match="did you mean 'number'"):
        check_config(cfg, backend_capabilities(cfg.backend.name))


# ----------------------------------------------------------------------------------------------- resume


def _episodes(rng: random.Random, p_success: float) -> list[Episode]:
    """32 episodes of 4 tasks; task k's reply is "answer k"."""

    def call(k: int) -> Step:
        return Step(prompt_ids=[0], response_ids=[1, 2, 3], logprobs=[0.0] * 3, response_text=f"answer {k}")

    return [
        Episode(
            task_id=f"t{i % 4}",
            reward=float(rng.random() < p_success),
            trajectories=[Trajectory(steps=[call(i % 4)])],
        )
        for i in range(32)
    ]


def test_a_resumed_run_s_monitors_carry_on_where_they_were() -> None:
    """The state a checkpoint keeps (through JSON) makes a resumed run's monitors say what an uninterrupted
    run's say, and a raised temperature is applied again on loading."""
    cfg = MonitorConfig(
        drift=DriftConfig(enabled=True, window=2, adapt_temperature=True), hacking=HackingConfig(window=2)
    )
    rng = random.Random(3)
    steps = [_episodes(rng, 0.1) for _ in range(4)] + [_episodes(rng, 0.9) for _ in range(5)]
    evals = {0: 0.3, 3: 0.3, 6: 0.3, 9: 0.3}

    def feed(monitors: Monitors, step: int) -> dict[str, float]:
        metrics = {"reward/mean": float(np.mean([e.reward for e in steps[step - 1]]))}
        metrics.update(monitors.observe(steps[step - 1]))
        if step in evals:
            metrics["eval/accuracy"] = evals[step]
        return monitors.check(step, metrics)

    uninterrupted = Monitors(cfg, temperature=1.0, set_temperature=lambda t: None)
    first = Monitors(cfg, temperature=1.0, set_temperature=lambda t: None)
    uninterrupted.check(0, {"eval/accuracy": evals[0]})
    first.check(0, {"eval/accuracy": evals[0]})
    expected = [feed(uninterrupted, s) for s in range(1, 10)]
    got = [feed(first, s) for s in range(1, 7)]
    applied: list[float] = []
    resumed = Monitors(cfg, temperature=1.0, set_temperature=applied.append)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += [feed(resumed, s) for s in range(7, 10)]
    assert got == expected
    # Loading gives back the raised temperature of step 6; step 7 (no more drift) lowers it again.
    assert expected[5]["monitor/drift/temperature"] == 1.1 and applied == [1.1, 1.0]
    assert any(m.get("monitor/hacking/alert/reward_vs_eval") for m in expected)


def test_a_second_reward_that_fails_on_a_reply_loses_that_point_not_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def picky(task: dict[str, Any], reply: str) -> Outcome:
        if reply.endswith("3"):
            raise ValueError("cannot parse")
        return Outcome(reward=float(reply.endswith("1")))

    register_reward("tests_picky", picky)
    try:
        cfg = MonitorConfig(hacking=HackingConfig(second_reward="tests_picky"))
        monitors = Monitors(cfg, temperature=1.0, set_temperature=lambda t: None)
        out = monitors.observe(_episodes(random.Random(0), 0.5))  # replies "answer 0" .. "answer 3"
    finally:
        unregister_reward("tests_picky")
    assert out["monitor/hacking/second_reward"] == pytest.approx(1 / 3)  # 8 of the 24 it could score
    (line,) = [r.getMessage() for r in caplog.records if "second_reward" in r.getMessage()]
    assert "could not score 8 of 32 replies" in line and "cannot parse" in line
