"""Async training (``rollout.max_staleness > 0``) in real runs: the rollout producer samples the next step
while the trainer updates, no sample older than the bound is trained on, and the run still learns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_learning import TASKS, _config, answer_workflow, make_tiny_vocab_model

from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.context import RolloutContext
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.async_rollout import RolloutProducer, StaleSamplesError
from rllm.trainer.backends import backend_capabilities
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.checks import check_config
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config
from rllm.utils.event_loop import RunLoop


def _records(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _with(cfg: TrainConfig, **rollout: object) -> TrainConfig:
    return cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update=rollout)})


@pytest.fixture(scope="module")
def vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_vocab_model(tmp_path_factory.mktemp("model"))


def test_async_training_learns_within_the_staleness_bound(vocab_model: Path, tmp_path: Path) -> None:
    steps = 30
    cfg = _with(_config(vocab_model, tmp_path / "runs", steps), max_staleness=1)
    result = AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS).train()
    rows = [r for r in _records(result.run_dir) if "reward/mean" in r]
    assert len(rows) == steps
    rewards = [r["reward/mean"] for r in rows]
    print("\nasync learning: " + " ".join(f"{r:.2f}" for r in rewards))
    assert rewards[0] < 0.25 and sum(rewards[-3:]) / 3 >= 0.9 and result.final_accuracy == 1.0
    assert all(r["rollout/staleness_max"] <= 1 and r["rollout/dropped_stale"] == 0 for r in rows)
    # The producer ran ahead: later steps trained on samples drawn before the previous update landed.
    assert sum(r["rollout/staleness_max"] == 1 for r in rows) >= steps // 2
    assert all("time/trainer_idle_s" in r and "time/sampler_idle_s" in r for r in rows)


def test_without_partial_rollouts_each_episode_has_one_version(vocab_model: Path, tmp_path: Path) -> None:
    versions: list[set[int]] = []

    async def two_calls(task: dict, ctx: RolloutContext) -> float:
        for _ in range(2):
            completion = await ctx.complete(task["prompt_ids"], max_tokens=1)
        versions.append({s.weight_version for s in ctx.trajectories["default"].steps})
        return completion.completion_ids == [task["answer_id"]]

    cfg = _with(_config(vocab_model, tmp_path / "runs", 6), max_staleness=2, partial_rollouts=False)
    AgentTrainer(cfg, workflow=two_calls, train_tasks=TASKS, test_tasks=TASKS[:2]).train()
    assert versions and all(len(v) == 1 for v in versions)


def test_async_config_is_checked(vocab_model: Path, tmp_path: Path) -> None:
    def check(*overrides: str) -> None:
        cfg = load_config(TrainConfig, None, [f"model.path={vocab_model}", *overrides])
        check_config(cfg, backend_capabilities(cfg.backend.name))

    with pytest.raises(UnsupportedConfigError, match="partial_rollouts applies to async training only"):
        check("rollout.partial_rollouts=false")
    with pytest.raises(
        UnsupportedConfigError, match="async training on inference.engine=vllm needs lora.enabled"
    ):
        check(
            "rollout.max_staleness=1",
            "inference.engine=vllm",
            "inference.vllm.urls=[http://127.0.0.1:9/v1]",  # attached: no vLLM venv needed to check
            "lora.enabled=false",
        )
    check("rollout.max_staleness=1", "rollout.partial_rollouts=false")


def test_a_sample_older_than_the_bound_is_dropped_and_sampled_again(vocab_model: Path) -> None:
    """An engine that never takes the synced weights (it stays at version 0) while the trainer is at version
    3: every episode is too old for max_staleness=1, is dropped and re-sampled (counted), and after three
    rounds the producer refuses to train on it."""
    engine = LocalEngine.from_pretrained(str(vocab_model), device="cpu", dtype="float32")
    runner = WorkflowRunner(answer_workflow, engine, SamplingParams(max_tokens=1), show_progress=False)
    loop = RunLoop()

    async def main() -> None:
        async def sample_step(step: int) -> list:
            return [await producer.run_job(TASKS[0], SamplingParams(max_tokens=1, seed=0))]

        async def resample(step: int, round: int, index: int):
            return await producer.run_job(TASKS[0], SamplingParams(max_tokens=1, seed=round))

        producer = RolloutProducer(
            runner, sample_step, resample, start=3, end=4, version=3, max_staleness=1, max_concurrency=4
        )
        producer.start_producing()
        try:
            with pytest.raises(StaleSamplesError, match="after 3 re-samples"):
                await producer.episodes(3)
            assert producer.take_metrics()["rollout/dropped_stale"] == 4  # the first sample and 3 re-samples
        finally:
            await producer.stop()

    try:
        loop.run(main())
    finally:
        loop.close()


def test_sigterm_stops_an_async_run_promptly(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SIGTERM (or Ctrl-C) while the training thread and the producer run: the process unwinds and exits
    143 within seconds; the training thread starts no further step, so closing the run's loop does not wait
    for the rest of a 100,000-step run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "runs" / "learn"
    cmd = [
        sys.executable,
        "-m",
        "rllm",
        "train",
        f"model.path={tiny_model_dir}",
        "lora.rank=4",
        "backend.device=cpu",
        "trainer.steps=100000",
        "trainer.threads=1",
        "rollout.batch_size=4",
        "rollout.group_size=4",
        "rollout.max_tokens=2",
        "rollout.max_staleness=1",
        "algorithm.filters.drop_zero_variance=false",
        "eval.before=false",
        "eval.every_steps=0",
        "eval.max_tokens=1",
        "data.train_size=16",
        "data.test_size=4",
        f"trainer.run_dir={tmp_path / 'runs'}",
        "trainer.name=learn",
        "trainer.loggers=[jsonl]",
        "trainer.plot=false",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the run logged no steps in 120 s"
        time.sleep(0.1)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    assert code == 143 and time.monotonic() - t0 < 60
    assert len(metrics.read_text().splitlines()) < 100_000
