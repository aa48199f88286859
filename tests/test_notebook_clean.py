"""The committed quick-start notebook carries no outputs or execution counts, so its diffs show only code
(tests/slow/test_notebook.py executes it)."""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


def test_quickstart_notebook_is_committed_without_outputs() -> None:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code, "the notebook has no code"
    assert all(not c["outputs"] and c["execution_count"] is None for c in code), (
        "strip the outputs before committing: jupyter nbconvert --clear-output --inplace examples/quickstart.ipynb"
    )
