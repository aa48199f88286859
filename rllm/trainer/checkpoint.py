"""Checkpoint directories: ``<run>/checkpoints/step_000010/`` written atomically, newest named in ``latest``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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
