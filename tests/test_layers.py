"""rllm's layers hold: no module imports from a layer above its own (pyproject.toml [tool.importlinter]).

The contract is checked by import-linter's ``lint-imports`` over the real package, and the check is shown
to bite: the same contract over a copy of the package with one upward import added fails, naming it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` (from the test extra) on the package under ``root`` with ``root``'s config."""
    script = Path(sys.executable).with_name("lint-imports")
    if not script.exists():
        pytest.fail(f"{script} is missing: install the test extra (pip install -e '.[test]')")
    return subprocess.run(
        [str(script), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_layer_contract_is_kept() -> None:
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " kept, 0 broken." in proc.stdout, proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "rllm", tmp_path / "rllm", ignore=shutil.ignore_patterns("__pycache__", "static"))
    types_py = tmp_path / "rllm" / "types.py"
    types_py.write_text(types_py.read_text() + "\nfrom rllm.trainer.config import TrainConfig  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rllm.types is not allowed to import rllm.trainer" in proc.stdout, proc.stdout
