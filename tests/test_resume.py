"""Kill-and-resume determinism: a run killed with SIGKILL after its step-2 checkpoint and resumed with
``trainer.resume=true`` ends with exactly the weights of a run that was never interrupted."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import resume_job
import torch
from safetensors.torch import load_file

from rllm.trainer.backends.base import UnsupportedConfigError

JOB = Path(__file__).with_name("resume_job.py")
ADAPTER = "adapter/adapter_model.safetensors"


def _job(model_dir: Path, runs: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(JOB.parent.parent)}
    with log.open("w") as out:  # a file, not a pipe nobody drains while we wait
        return subprocess.Popen(
            [sys.executable, str(JOB), str(model_dir), str(runs)], stdout=out, stderr=subprocess.STDOUT, env=env
        )


def _steps_logged(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_killed_and_resumed_run_equals_uninterrupted_run(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Run B, part 1: a real process, killed as soon as its step-2 checkpoint is in place.
    log = tmp_path / "killed_job.log"
    killed = _job(tiny_model_dir, tmp_path / "b", log)
    latest = tmp_path / "b" / "job" / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    try:
        while not (latest.exists() and latest.read_text() == "step_000002"):
            assert killed.poll() is None, f"the job ended before its step-2 checkpoint:\n{log.read_text()}"
            assert time.monotonic() < deadline, "no step-2 checkpoint within 120 s"
            time.sleep(0.01)
    finally:
        if killed.poll() is None:
            killed.send_signal(signal.SIGKILL)
        killed.wait()
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "b" / "job" / "checkpoints" / "step_000004").exists()

    # Without resume=true the run refuses to write over the checkpoints it finds.
    with pytest.raises(UnsupportedConfigError, match="trainer.resume=true"):
        resume_job.run(str(tiny_model_dir), str(tmp_path / "b"))

    # Run B, part 2: resume (in this process; the kill is what had to be real).
    with caplog.at_level(logging.INFO, logger="rllm.trainer.agent_trainer"):
        resume_job.run(str(tiny_model_dir), str(tmp_path / "b"), "trainer.resume=true")
    assert any("resumed from" in m and "at step 2" in m for m in caplog.messages), caplog.messages

    # Run A: never interrupted (in this process).
    resume_job.run(str(tiny_model_dir), str(tmp_path / "a"))

    final_a = load_file(tmp_path / "a" / "job" / "checkpoints" / "step_000004" / ADAPTER)
    final_b = load_file(tmp_path / "b" / "job" / "checkpoints" / "step_000004" / ADAPTER)
    assert final_a.keys() == final_b.keys() and final_a
    assert any(v.abs().sum() > 0 for k, v in final_a.items() if "lora_B" in k)  # the adapter really trained
    unequal = [k for k in final_a if not torch.equal(final_a[k], final_b[k])]
    assert not unequal, f"{len(unequal)} of {len(final_a)} tensors differ, e.g. {unequal[:3]}"

    # The resumed steps saw the same data and sampled the same episodes.
    a_steps = {r["step"]: r for r in _steps_logged(tmp_path / "a" / "job")}
    b_logged = [r["step"] for r in _steps_logged(tmp_path / "b" / "job")]
    assert len(b_logged) == len(set(b_logged)), f"a resumed run logged a step twice: {b_logged}"
    b_steps = {r["step"]: r for r in _steps_logged(tmp_path / "b" / "job")}
    for step in (3, 4):
        for key in ("reward/mean", "response_len/mean", "train/loss", "train/grad_norm"):
            assert a_steps[step][key] == b_steps[step][key], (step, key)
