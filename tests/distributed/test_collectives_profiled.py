"""Time in collectives on the distributed backend (``profile/collective_*``, docs/profiling.md): a real RL
run of the resume job (tests/resume_job.py) on 2 gloo ranks logs, every step, the ranks' time in FSDP2's
all-gathers and reduce-scatters (and the sync's gathers), measured with torch.profiler on each rank."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import require_ray, run_resume_job

from rllm.trainer.profile_report import load_profile, render


def test_each_step_logs_the_ranks_time_in_collectives(tiny_model_dir: Path, tmp_path: Path) -> None:
    require_ray()
    run = run_resume_job(
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
