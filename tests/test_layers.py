"""rllm's layers hold: no module imports from a layer above its own (pyproject.toml [tool.importlinter]).

The contract is checked by import-linter's ``lint-imports`` over the real package, and the check is shown
to bite: the same contract over a copy of the package with one upward import added fails, naming it.

An import of rllm's own modules inside a function hides an edge from a reader (import-linter sees it all
the same): one is kept only where it spares a heavy dependency (torch, transformers, uvicorn ... that
`rllm --help` or a light caller should not wait for) or breaks a real cycle, and says so in a comment on
its line or directly above its block of imports.
"""

from __future__ import annotations

import ast
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


def test_an_upward_import_and_torch_in_agent_code_break_the_contracts(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "rllm", tmp_path / "rllm", ignore=shutil.ignore_patterns("__pycache__", "static"))
    for module, line in [
        ("types.py", "from rllm.trainer.config import TrainConfig"),
        ("tools/tool.py", "import torch"),
    ]:
        path = tmp_path / "rllm" / module
        path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rllm.types is not allowed to import rllm.trainer" in proc.stdout, proc.stdout
    assert "rllm.tools is not allowed to import torch" in proc.stdout, proc.stdout
    assert "Contracts: 0 kept, 2 broken." in proc.stdout, proc.stdout


def _imports_rllm(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "rllm"
    return any(alias.name.split(".")[0] == "rllm" for alias in node.names)


def unexplained_local_imports(path: Path) -> list[int]:
    """Lines of ``path``'s function-local imports of rllm modules with no comment on the statement or
    directly above its block of imports (other imports and blank lines between are part of the block)."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    local = {
        node
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }
    import_lines = {i for node in local for i in range(node.lineno, node.end_lineno + 1)}
    bad = []
    for node in sorted(local, key=lambda n: n.lineno):
        if not _imports_rllm(node):
            continue
        if any("#" in lines[i - 1] for i in range(node.lineno, node.end_lineno + 1)):
            continue
        above = node.lineno - 1
        while above >= 1 and (above in import_lines or not lines[above - 1].strip()):
            above -= 1
        if above < 1 or not lines[above - 1].strip().startswith("#"):
            bad.append(node.lineno)
    return bad


def test_every_function_local_import_of_rllm_says_why() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "rllm").rglob("*.py"))
        for line in unexplained_local_imports(path)
    }
    assert not found, (
        "function-local imports of rllm modules without a reason: move each to the top of its module, or "
        "say on or above it which heavy dependency or cycle keeps it there: " + ", ".join(sorted(found))
    )


def test_the_local_import_check_finds_an_unexplained_one(tmp_path: Path) -> None:
    module = tmp_path / "mod.py"
    module.write_text(
        "def explained():\n"
        "    # torch: only a run needs it\n"
        "    import json\n"
        "\n"
        "    from rllm.trainer.config import TrainConfig\n"
        "\n"
        "\n"
        "def on_its_line():\n"
        "    from rllm.trainer import config  # torch\n"
        "\n"
        "\n"
        "def unexplained():\n"
        "    x = 1\n"
        "    from rllm.types import Step\n"
        "    from . import sibling\n"
        "    import json\n"
    )
    assert unexplained_local_imports(module) == [14, 15]
