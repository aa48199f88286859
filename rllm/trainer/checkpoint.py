"""Checkpoint directories: ``<run>/checkpoints/step_000010/`` written atomically, newest named in ``latest``;
and what a resumed run forgets of the run it continues (``drop_metrics_after``)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

LOOP_STATE = "loop_state.json"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(run_dir: Path, step: int, backend: Any, loop_state: dict[str, Any], keep: int) -> Path:
    """Write a checkpoint into a temp dir, then rename it into place and point ``latest`` at it, so a
    run killed mid-save still has its previous checkpoint intact."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    backend.save_state(tmp)
    (tmp / LOOP_STATE).write_text(json.dumps(loop_state, indent=1))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    latest_tmp = run_dir / "checkpoints" / "latest.tmp"
    latest_tmp.write_text(final.name)
    latest_tmp.replace(run_dir / "checkpoints" / "latest")
    _prune(run_dir, keep)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    return path if (path / LOOP_STATE).exists() else None


def load_loop_state(path: Path) -> dict[str, Any]:
    return json.loads((path / LOOP_STATE).read_text())


def _prune(run_dir: Path, keep: int) -> None:
    steps = sorted(p for p in (run_dir / "checkpoints").glob("step_*") if not p.name.endswith(".tmp"))
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def drop_metrics_after(path: Path, step: int) -> None:
    """Forget the metric lines of steps after ``step`` (``-1``: every line), which this run is about to redo:
    a killed run wrote them after its last complete checkpoint. Lines cut short by the kill go too."""
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = []
    for line in lines:
        try:
            if json.loads(line).get("step", 0) <= step:
                kept.append(line)
        except json.JSONDecodeError:  # a line cut by the kill
            continue
    if len(kept) == len(lines):
        return
    logger.warning(
        "dropping %d line(s) of %s %s: a killed run wrote them and this run redoes them",
        len(lines) - len(kept),
        path,
        f"after step {step}" if step >= 0 else "(no checkpoint to resume)",
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(k + "\n" for k in kept))
    tmp.replace(path)
