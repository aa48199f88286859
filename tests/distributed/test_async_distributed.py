"""Async training (``rollout.max_staleness=1``) on the distributed backend: the training thread drives the
FSDP2 rank actors while the rollout producer samples the next step on the run's event loop. A real run of
the resume job (tests/resume_job.py) with 2 gloo ranks: every step logged once, every job of every step
trained once, no sample older than the bound, and the producer ran ahead of the trainer."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import require_ray, run_resume_job

from rllm.store.journal import EpisodeJournal


def test_async_training_on_the_distributed_backend(tiny_model_dir: Path, tmp_path: Path) -> None:
    require_ray()
    run = run_resume_job(tiny_model_dir, tmp_path, "rollout.max_staleness=1")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["rollout/staleness_max"] <= 1 and r["rollout/dropped_stale"] == 0 for r in rows)
    assert any(r["rollout/staleness_max"] == 1 for r in rows)  # a step trained on samples from before a sync
    with EpisodeJournal(run / "journal.db") as journal:
        for step in range(4):
            keys = {f"r0:{j}" for j in range(8)}
            assert set(journal.episodes(step)) == keys and sorted(journal.batch(step)["keys"]) == sorted(keys)
