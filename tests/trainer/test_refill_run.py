"""``algorithm.filters.refill_rounds`` in a real run: the tiny model trains on a task set where most tasks
carry no signal, and refill rounds fill each step's batch with tasks that do, deterministically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from run_support import tiny_run_config

from rllm.cli.main import main
from rllm.runner.context import RolloutContext
from rllm.store.journal import EpisodeJournal
from rllm.trainer.agent_trainer import AgentTrainer

# 12 tasks every attempt wins (no signal) and 4 scored by the parity of the first token (signal in most
# groups of 4): a step's own 2 tasks are mostly flat, so refill has work to do.
TASKS = [{"task_id": f"flat{i}", "flat": True} for i in range(12)] + [
    {"task_id": f"parity{i}", "flat": False} for i in range(4)
]


async def flat_or_parity(task: dict[str, Any], ctx: RolloutContext) -> float:
    completion = await ctx.chat([{"role": "user", "content": f"Task {task['task_id']}."}])
    return 1.0 if task["flat"] else float(completion.completion_ids[0] % 2 == 0)


def _run(model_dir: Path, run_dir: Path, *overrides: str) -> list[dict[str, float]]:
    cfg = tiny_run_config(
        model_dir,
        run_dir,
        "job",
        "trainer.steps=3",
        "rollout.max_tokens=2",
        "inference.max_batch_rows=1",  # the same decode batches each run (see tests/resume_job.py)
        *overrides,
    )
    AgentTrainer(cfg, workflow=flat_or_parity, train_tasks=TASKS, test_tasks=TASKS[:1]).train()
    return [json.loads(line) for line in (run_dir / "job" / "metrics.jsonl").read_text().splitlines()]


def test_refill_fills_the_batch_with_tasks_that_have_signal(tiny_model_dir: Path, tmp_path: Path) -> None:
    without = _run(tiny_model_dir, tmp_path / "off")
    assert not any(k.startswith("refill/") for row in without for k in row)
    rows = _run(tiny_model_dir, tmp_path / "on", "algorithm.filters.refill_rounds=6")
    steps = [r for r in rows if "refill/rounds" in r]
    assert len(steps) == 3
    for r in steps:
        # Each round samples batch_size fresh tasks; the batch never holds more than batch_size with signal.
        assert r["refill/tasks_sampled"] == 2 * (1 + r["refill/rounds"])
        assert r["refill/signal_tasks"] <= 2
        assert r["refill/short"] == float(r["refill/signal_tasks"] < 2)
        assert r["filter/groups_kept"] == r["refill/signal_tasks"]
    # With 4 of 16 tasks able to show signal, refill had to run, and found some.
    assert sum(r["refill/rounds"] for r in steps) > 0
    assert sum(r["refill/signal_tasks"] for r in steps) > sum(r["filter/groups_kept"] for r in without)
    # The journal names the refill rounds' episodes that went into each batch, and replay rebuilds the batch
    # from them exactly (rounds shaped in the refill, round 0 and the rest shaped alike by replay).
    with EpisodeJournal(tmp_path / "on" / "job" / "journal.db") as journal:
        batch_keys = [k for s in journal.steps() for k in journal.batch(s)["keys"]]
    assert any(not k.startswith("r0:") for k in batch_keys)
    assert main(["replay", str(tmp_path / "on" / "job")]) == 0
    # Deterministic: the same run again samples the same refill rounds and keeps the same tasks.
    again = _run(tiny_model_dir, tmp_path / "again", "algorithm.filters.refill_rounds=6")
    keys = [k for k in steps[0] if k.startswith(("refill/", "filter/", "reward/"))]
    assert [[r[k] for k in keys] for r in again if "refill/rounds" in r] == [
        [r[k] for k in keys] for r in steps
    ]
