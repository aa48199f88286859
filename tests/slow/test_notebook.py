"""examples/quickstart.ipynb runs top to bottom on the built-in model (a few minutes on 2 CPU cores):
every cell executes without an error, and what it prints shows training, the episodes, the token view
and the eval. The committed notebook carries no outputs (checked in the fast tier too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ci_support import require_import

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def _notebook_packages() -> tuple[object, object]:
    """nbclient and nbformat (the `notebook` extra). Under CI (`.ci/run` installs the extra) a missing one
    fails the test instead of skipping it green."""
    install = "bash scripts/setup.sh notebook"
    return require_import("nbclient", install), require_import("nbformat", install)


@pytest.mark.slow
def test_quickstart_notebook_runs(tmp_path: Path) -> None:
    nbclient, nbformat = _notebook_packages()
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[attr-defined]
    env_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ["PYTHONPATH"] = env_path  # the kernel imports this tree's rllm
    client = nbclient.NotebookClient(  # type: ignore[attr-defined]
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    text = "\n".join(
        output.get("text", "") + str(output.get("data", {}).get("text/html", ""))
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    assert "held-out greedy accuracy:" in text
    assert "step 4: mean reward" in text
    assert "episodes stored for step" in text and "[user]" in text
    assert "response tokens" in text and "<table>" in text
    assert "held-out questions: accuracy" in text
