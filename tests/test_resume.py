"""Kill-and-resume: a run SIGKILLed in the middle of writing a checkpoint, after steps whose metric lines
were written but never checkpointed, and resumed with ``trainer.resume=true``, logs every step exactly once
(in metrics.jsonl and in the run store) and ends with exactly the weights of a run never interrupted.

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

from rllm.store.reader import EpisodeQuery, StoreReader
from rllm.trainer.backends.base import UnsupportedConfigError

JOB = Path(__file__).with_name("resume_job.py")
ADAPTER = "adapter/adapter_model.safetensors"
# What legitimately differs between two runs of the same steps: wall-clock times and speeds.
_TIMING = ("time", "time/", "perf/")


def _is_timing(key: str) -> bool:
    return key.startswith(_TIMING) or key.endswith("_s")


def _kill_in_checkpoint(model_dir: Path, runs: Path, step: int) -> str:
    """Run the job in a real process that SIGKILLs itself while writing its step-``step`` checkpoint."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(JOB.parent.parent),
        resume_job.DIE_IN_CHECKPOINT: str(step),
    }
    log = runs.parent / f"{runs.name}_killed.log"
    with log.open("w") as out:  # a file, not a pipe nobody drains while we wait
        proc = subprocess.run(
            [sys.executable, str(JOB), str(model_dir), str(runs)],
            check=False,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
        )
    text = log.read_text()
    assert proc.returncode == -signal.SIGKILL, (
        f"the job was not killed in its step-{step} checkpoint:\n{text}"
    )
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
