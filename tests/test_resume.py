"""Kill-and-resume: a run SIGKILLed in the middle of writing a checkpoint, after steps whose metric lines
were written but never checkpointed, and resumed with ``trainer.resume=true``, logs every step exactly once
(in metrics.jsonl and in the run store) and ends with exactly the weights of a run never interrupted.
Likewise a run killed mid-rollout, mid-update or mid-sync: the resumed run reuses the episodes the killed
one journaled (``rllm.store.EpisodeJournal``), samples only the rest, and trains on each job once.

The job (``resume_job.py``) kills itself at a fixed point of the checkpoint write (see its docstring), so
the kill lands where a careless resume goes wrong every time, not by a race with a polling parent.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import resume_job
import torch
from safetensors.torch import load_file

from rllm.store.journal import EpisodeJournal
from rllm.store.reader import EpisodeQuery, StoreReader
from rllm.trainer.backends.base import UnsupportedConfigError

JOB = Path(__file__).with_name("resume_job.py")
ADAPTER = "adapter/adapter_model.safetensors"
# What legitimately differs between two runs of the same steps: wall-clock times and speeds, and how many
# episodes a resumed step took from the journal.
_TIMING = ("time", "time/", "perf/")
_RECOVERY = ("rollout/reused_episodes",)
JOB_KEYS = {f"r0:{j}" for j in range(8)}  # 2 tasks x 4 attempts a step, no refill


def _is_timing(key: str) -> bool:
    return key.startswith(_TIMING) or key.endswith("_s") or key in _RECOVERY


def _kill_in_checkpoint(model_dir: Path, runs: Path, step: int) -> str:
    """Run the job in a real process that SIGKILLs itself while writing its step-``step`` checkpoint."""
    return _run_killed(
        model_dir, runs, resume_job.DIE_IN_CHECKPOINT, str(step), f"its step-{step} checkpoint"
    )


def _run_killed(model_dir: Path, runs: Path, hook: str, value: str, where: str, *overrides: str) -> str:
    """Run the job in a real process with the kill hook ``hook=value`` set; assert it died by SIGKILL."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(JOB.parent.parent),
        hook: value,
    }
    log = runs.parent / f"{runs.name}_killed.log"
    with log.open("w") as out:  # a file, not a pipe nobody drains while we wait
        proc = subprocess.run(
            [sys.executable, str(JOB), str(model_dir), str(runs), *overrides],
            check=False,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
        )
    text = log.read_text()
    assert proc.returncode == -signal.SIGKILL, f"the job was not killed in {where}:\n{text}"
    return text


def _lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not _is_timing(k)}


def _assert_same_run(a: Path, b: Path) -> None:
    """b logged each step once, with a's metrics (timings aside), and ended with a's exact adapter weights."""
    b_steps = [r["step"] for r in _lines(b)]
    assert b_steps == [1, 2, 3, 4], f"the resumed run's metrics.jsonl has steps {b_steps}"
    for ra, rb in zip(_lines(a), _lines(b)):
        assert _comparable(ra) == _comparable(rb), ra["step"]

    final_a = load_file(a / "checkpoints" / "step_000004" / ADAPTER)
    final_b = load_file(b / "checkpoints" / "step_000004" / ADAPTER)
    assert final_a.keys() == final_b.keys() and final_a
    assert any(v.abs().sum() > 0 for k, v in final_a.items() if "lora_B" in k)  # the adapter really trained
    unequal = [k for k in final_a if not torch.equal(final_a[k], final_b[k])]
    assert not unequal, f"{len(unequal)} of {len(final_a)} tensors differ, e.g. {unequal[:3]}"

    # The run store (what `rllm ui` shows) agrees: one run per directory, each step's metrics and sampled
    # episodes once.
    def store_of(run: Path) -> tuple[StoreReader, str]:
        reader = StoreReader(run.parent / "rllm.db")
        (row,) = [r for r in reader.runs() if r["status"] == "finished"]
        return reader, row["id"]

    (ra_, ida), (rb_, idb) = store_of(a), store_of(b)
    series_a = ra_.metrics(ida, ["reward/mean", "train/loss"])["series"]
    assert rb_.metrics(idb, ["reward/mean", "train/loss"])["series"] == series_a
    assert [s for s, _ in series_a["reward/mean"]] == [1, 2, 3, 4]
    assert rb_.steps(idb) == ra_.steps(ida) == [1, 2, 3, 4]
    for step in (1, 2, 3, 4):
        total_a = ra_.episodes(ida, EpisodeQuery(step=step))["total"]
        assert rb_.episodes(idb, EpisodeQuery(step=step))["total"] == total_a > 0, step


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run A: the same job, never interrupted (in this process)."""
    runs = tmp_path_factory.mktemp("uninterrupted")
    resume_job.run(str(tiny_model_dir), str(runs))
    return runs / "job"


def test_killed_while_writing_a_checkpoint_resumes_from_the_one_before(
    tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runs = tmp_path / "b"
    run = runs / "job"
    _kill_in_checkpoint(tiny_model_dir, runs, step=4)
    # What the kill left: steps 3 and 4 logged, their checkpoint half-written, step 2's intact.
    assert [r["step"] for r in _lines(run)] == [1, 2, 3, 4]
    checkpoints = run / "checkpoints"
    assert (checkpoints / "latest").read_text() == "step_000002"
    assert not (checkpoints / "step_000004").exists()
    assert (checkpoints / "step_000004.tmp" / ADAPTER).exists()
    assert not (checkpoints / "step_000004.tmp" / "loop_state.json").exists()

    # Without resume=true the run refuses to write over the checkpoints it finds.
    with pytest.raises(UnsupportedConfigError, match="trainer.resume=true"):
        resume_job.run(str(tiny_model_dir), str(runs))

    # Resume (in this process; the kill is what had to be real): steps 3 and 4 are redone, once.
    with caplog.at_level(logging.INFO, logger="rllm.trainer.agent_trainer"):
        resume_job.run(str(tiny_model_dir), str(runs), "trainer.resume=true")
    assert any("resumed from" in m and "at step 2" in m for m in caplog.messages), caplog.messages
    assert not (checkpoints / "step_000004.tmp").exists()
    _assert_same_run(uninterrupted, run)


def test_killed_while_writing_its_first_checkpoint_starts_over(
    tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "b"
    run = runs / "job"
    _kill_in_checkpoint(tiny_model_dir, runs, step=2)
    # Steps 1 and 2 logged, no checkpoint complete: there is nothing to resume from.
    assert [r["step"] for r in _lines(run)] == [1, 2]
    assert not (run / "checkpoints" / "latest").exists()
    assert (run / "checkpoints" / "step_000002.tmp" / ADAPTER).exists()

    # resume=true finds no checkpoint and starts over; the killed run's lines must not stay beside the new ones.
    resume_job.run(str(tiny_model_dir), str(runs), "trainer.resume=true")
    _assert_same_run(uninterrupted, run)


@pytest.mark.parametrize("stage", ["rollout", "update", "sync"])
def test_killed_mid_step_reuses_the_journaled_episodes(
    tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path, stage: str
) -> None:
    """Killed inside step 3 (0-based; checkpoint at 2): the resume redoes steps 2 and 3 from the journal,
    sampling only the jobs the killed run had not finished, and ends bit for bit where run A ended."""
    runs = tmp_path / "b"
    run = runs / "job"
    _run_killed(tiny_model_dir, runs, resume_job.DIE_IN, f"{stage}:3", f"step 3's {stage}")
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"
    with EpisodeJournal(run / "journal.db") as journal:
        before = {s: journal.episodes(s) for s in journal.steps()}
    # Step 2 finished (journaled, not checkpointed); step 3 has what the kill left.
    assert set(before[2]) == JOB_KEYS
    killed_in_rollout = stage == "rollout"
    assert len(before[3]) == (resume_job.ROLLOUT_EPISODES_BEFORE_KILL if killed_in_rollout else 8)

    resume_job.run(str(tiny_model_dir), str(runs), "trainer.resume=true")

    lines = {r["step"]: r for r in _lines(run)}
    assert lines[3]["rollout/reused_episodes"] == 8.0
    assert lines[4]["rollout/reused_episodes"] == len(before[3])
    with EpisodeJournal(run / "journal.db") as journal, EpisodeJournal(uninterrupted / "journal.db") as ref:
        for step in range(4):
            episodes = journal.episodes(step)
            assert set(episodes) == JOB_KEYS, step  # none lost; the primary key (step, key) forbids twice
            summary = journal.batch(step)
            assert sorted(summary["keys"]) == sorted(JOB_KEYS), step  # each job trained on once
            # What the step trained on is what run A trained on, token for token.
            assert summary["digest"] == ref.batch(step)["digest"], step
            assert summary["metrics"] == ref.batch(step)["metrics"], step
        # The killed run's episodes were reused, not sampled again.
        for step, kept in before.items():
            assert {k: e.id for k, e in journal.episodes(step).items() if k in kept} == {
                k: e.id for k, e in kept.items()
            }
    _assert_same_run(uninterrupted, run)


@pytest.mark.slow  # 3 real killed and resumed runs, ~30 s: the slow tier (CI runs it)
@pytest.mark.parametrize("stage", ["rollout", "update", "sync"])
def test_async_run_killed_mid_step_loses_and_repeats_nothing(
    tiny_model_dir: Path, tmp_path: Path, stage: str
) -> None:
    """The same kills in async mode (rollout.max_staleness=1: step 3 is sampled while step 2 trains). Which
    weight version each episode saw depends on timing there, so the final weights are not compared bit for
    bit; what must hold is exactly once: the resumed run reuses every episode the killed one journaled, samples
    only the rest, trains each job of each step once, and logs each step once."""
    runs = tmp_path / "async"
    run = runs / "job"
    async_mode = "rollout.max_staleness=1"
    _run_killed(tiny_model_dir, runs, resume_job.DIE_IN, f"{stage}:3", f"step 3's {stage}", async_mode)
    with EpisodeJournal(run / "journal.db") as journal:
        before = {s: journal.episodes(s) for s in journal.steps()}
    # Step 3 is sampled while step 2's episodes finish and train, so how far step 2 got is a matter of timing.
    assert set(before[1]) == JOB_KEYS and 0 < len(before[3]) <= 8

    resume_job.run(str(tiny_model_dir), str(runs), "trainer.resume=true", async_mode)

    assert [r["step"] for r in _lines(run)] == [1, 2, 3, 4]
    with EpisodeJournal(run / "journal.db") as journal:
        for step in range(4):
            assert set(journal.episodes(step)) == JOB_KEYS, step  # none lost, none twice
            assert sorted(journal.batch(step)["keys"]) == sorted(JOB_KEYS), step  # each trained on once
        for step, kept in before.items():  # what the killed run finished was reused, not sampled again
            assert {k: e.id for k, e in journal.episodes(step).items() if k in kept} == {
                k: e.id for k, e in kept.items()
            }
