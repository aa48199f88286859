"""Time in collectives on the distributed backend (``profile/collective_*``, docs/profiling.md): a real RL
run of the resume job (tests/resume_job.py) on 2 gloo ranks logs, every step, the ranks' time in FSDP2's
all-gathers and reduce-scatters (and the sync's gathers), measured with torch.profiler on each rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import require_ray

from rllm.trainer.profile_report import load_profile, render

TESTS = Path(__file__).resolve().parents[1]
JOB = TESTS / "resume_job.py"
DIST = (
    "backend.name=distributed",
    "backend.distributed.world_size=2",
    "backend.distributed.startup_timeout_s=120",
)


def _run(model: Path, tmp_path: Path, *overrides: str) -> Path:
    runs = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(TESTS.parent)}
    log = tmp_path / "job.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, str(JOB), str(model), str(runs), *DIST, *overrides],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=600,
            check=False,
        )
    assert proc.returncode == 0, log.read_text()[-4000:]
    return runs / "job"


def test_each_step_logs_the_ranks_time_in_collectives(tiny_model_dir: Path, tmp_path: Path) -> None:
    require_ray()
    run = _run(
        tiny_model_dir,
        tmp_path,
        "trainer.steps=2",
        "trainer.checkpoint_every=0",
        "backend.distributed.profile_collectives=true",
    )
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        # every step gathers each sharded layer and reduce-scatters its gradients: collectives ran, for a
        # part of the ranks' time, and the ranks' time is part of the step's
        assert (
            r["profile/collectives"] >= 2 * 2
        )  # tiny model: 2 layers, an all-gather and a reduce-scatter each
        assert 0 < r["profile/collective_exposed_s"] <= r["profile/collective_s"]
        assert r["profile/collective_s"] <= r["profile/collective_max_s"] < r["time/step_s"]
        assert 0 < r["profile/collective_frac"] < 1
        assert 0 < r["profile/rank_busy_s"] < r["time/step_s"]
        assert r["profile/collective_overhead_s"] >= 0
    text = render(load_profile(run))
    assert "collectives" in text
