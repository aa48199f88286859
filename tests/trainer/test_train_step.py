"""One training step of a tiny model logs exactly the metric keys it always has (the UI, the loggers, the
docs and the resume tests read them by name), its timings add up, and the loop stays legible."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from rllm.trainer import agent_trainer
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.trainer.monitors import CHECKS
from rllm.types import TerminationReason
from rllm.utils.config import load_config

# The keys of one logged step (with the eval after it), as the loop before the stage refactor wrote them.
# Which termination/<reason> keys appear depends on how the sampled episodes ended: checked separately.
_ROLLOUT = {
    "step",
    "time",
    "reward/mean",
    "reward/std",
    "reward/min",
    "reward/max",
    "response_len/mean",
    "response_len/std",
    "response_len/min",
    "response_len/max",
    "accuracy",
    "episodes",
    "episode/episode_time_s",
    "episodes/failed",
    "time/rollout_s",
    "perf/rollout_tokens_per_s",
    "rollout/reused_episodes",  # from the journal (a resumed step's episodes a killed run finished)
}
_FILTER = {
    "filter/groups_in",
    "filter/groups_kept",
    "filter/zero_variance_groups",
    "filter/empty_groups",
    "filter/failed_dropped",
    "filter/truncated_dropped",
    "filter/zero_variance_sequences",
    "filter/zero_variance_response_tokens",
}
_UPDATE = {
    "advantage/mean",
    "advantage/std",
    "advantage/min",
    "advantage/max",
    "batch/num_sequences",
    "batch/num_response_tokens",
    "batch/max_row_tokens",
    "batch/skipped_empty_steps",
    "batch/merged_steps",
    "train/clip_fraction",
    "train/approx_kl",
    "train/ratio_mean",
    "train/entropy",
    "train/trainer_rollout_logprob_diff",
    "train/loss",
    "train/grad_norm",
    "train/lr",
    "perf/train_tokens_per_s",
}
_AFTER = {"time/train_s", "time/sync_s", "time/step_s", "time/eta_s"}
# The profiler's (rllm.trainer.profiler): phase times, idle times, memory per phase, achieved FLOP/s.
_PROFILE = {
    "time/data_s",
    "time/prepare_s",
    "time/trainer_idle_s",
    "time/sampler_idle_s",
    "perf/rss_gb",
    "perf/rss_peak_gb",
    "perf/rss_peak_rollout_gb",
    "perf/rss_peak_train_gb",
    "perf/rss_peak_sync_gb",
}
_PROFILE_UPDATE = {"time/forward_backward_s", "time/optim_s", "perf/train_tflops"}
_EVAL = {"eval/accuracy", "eval/reward", "eval/n", "eval/failed", "eval/response_len", "eval/time_s"}
_TERMINATION = {f"termination/{reason.value}" for reason in TerminationReason}
# The reward-hacking detector's verdicts (on by default; docs/monitoring.md). Its statistics of the replies
# (monitor/hacking/same_answer, monitor/hacking/repetition) appear when the step has something to measure.
_MONITOR = {"monitor/hacking/alert", *(f"monitor/hacking/alert/{check}" for check in CHECKS)}
_MONITOR_STATS = {"monitor/hacking/same_answer", "monitor/hacking/repetition"}


def _one_step(tiny_model_dir: Path, tmp_path: Path, *overrides: str) -> dict[str, float]:
    """Train one step (eval after it) and return the line metrics.jsonl has for step 1."""
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"trainer.run_dir={tmp_path}",
            "trainer.steps=1",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=4",
            "eval.before=false",
            "eval.after=true",
            "eval.max_tokens=4",
            "data.train_size=4",
            "data.test_size=2",
            "trainer.plot=false",
            "trainer.loggers=[jsonl]",
            "backend.device=cpu",
            "trainer.store_enabled=false",
            *overrides,
        ],
    )
    result = AgentTrainer(cfg).train()
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1]
    return lines[0]


def _split_termination(keys: set[str]) -> tuple[set[str], set[str]]:
    termination = {k for k in keys if k.startswith("termination/")}
    return keys - termination - _MONITOR_STATS, termination


def test_a_step_that_updates_logs_the_same_metric_keys_as_before(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    line = _one_step(tiny_model_dir, tmp_path, "algorithm.filters.drop_zero_variance=false")
    keys, termination = _split_termination(set(line))
    expected = _ROLLOUT | _FILTER | _UPDATE | _AFTER | _EVAL | _MONITOR | _PROFILE | _PROFILE_UPDATE
    assert keys == expected, f"missing {sorted(expected - keys)}, new {sorted(keys - expected)}"
    assert termination and termination <= _TERMINATION
    assert sum(line[k] for k in termination) == pytest.approx(1.0)
    # The stages' times are parts of the step's, and the rates come from them.
    assert 0 < line["time/rollout_s"] + line["time/train_s"] + line["time/sync_s"] <= line["time/step_s"]
    assert line["perf/train_tokens_per_s"] > 0 and line["perf/rollout_tokens_per_s"] > 0
    assert line["time/eta_s"] == 0.0  # the last step: nothing left
    # Synchronous: the trainer waits out the rollout, the sampler the update and the sync.
    assert line["time/trainer_idle_s"] == pytest.approx(line["time/rollout_s"])
    assert line["time/sampler_idle_s"] == pytest.approx(line["time/train_s"] + line["time/sync_s"])
    assert line["time/forward_backward_s"] + line["time/optim_s"] <= line["time/train_s"]
    # The process holds the tiny model and torch (hundreds of MB, well under 10 GB); no phase above the run.
    assert 0.1 < line["perf/rss_gb"] <= line["perf/rss_peak_gb"] < 10
    for phase in ("rollout", "train", "sync"):
        # sampled by a thread, against the kernel's high-water mark (which it can pass by a page or two)
        assert 0.1 < line[f"perf/rss_peak_{phase}_gb"] <= line["perf/rss_peak_gb"] * 1.01
    assert line["perf/train_tflops"] > 0


def test_a_step_without_signal_logs_the_skip_and_no_update_metrics(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # One attempt per task: every group has zero variance, so the filter drops them all.
    line = _one_step(tiny_model_dir, tmp_path, "rollout.group_size=1", "algorithm.advantage=reinforce")
    keys, _ = _split_termination(set(line))
    assert keys == _ROLLOUT | _FILTER | {"train/skipped"} | _AFTER | _EVAL | _MONITOR | _PROFILE
    assert line["train/skipped"] == 1.0 and line["filter/groups_kept"] == 0.0


def test_the_loop_reads_as_its_stages_on_one_screen() -> None:
    source = inspect.getsource(agent_trainer)
    assert "perf_counter" not in source, "time a stage with rllm.utils.timing.timed, not perf_counter pairs"
    step = inspect.getsource(AgentTrainer.train_step)
    assert len(step.splitlines()) <= 40, "train_step grew past one screen: move a stage into a method"
    stages = ["_rollout(", "_prepare(", "_update(", "_sync_step(", "episode_metrics("]
    positions = [step.index(stage) for stage in stages]
    assert positions == sorted(positions), "train_step's stages are out of order"
