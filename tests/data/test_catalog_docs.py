"""docs/datasets.md shows the catalog as ``rllm.data.catalog.docs`` generates it: the tables cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.data.catalog import CATALOG
from rllm.data.catalog.docs import BEGIN, END, catalog_markdown, main, replace_block

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def test_the_docs_hold_the_generated_catalog() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert catalog_markdown() in text, "docs/datasets.md is stale: run `python -m rllm.data.catalog.docs`"
    for entry in CATALOG.values():  # every entry has its row, with its reward, size and licence
        row = next(line for line in text.splitlines() if line.startswith(f"| `{entry.name}` |"))
        assert f"`{entry.reward}`" in row and entry.size_text in row and f"| {entry.license} |" in row


def test_main_rewrites_only_the_block(tmp_path: Path) -> None:
    path = tmp_path / "datasets.md"
    path.write_text(f"# Title\n\n{BEGIN}\nstale\n{END}\n\nafter\n", encoding="utf-8")
    assert main([str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert (
        text.startswith("# Title\n\n" + BEGIN) and text.endswith(END + "\n\nafter\n") and "stale" not in text
    )
    assert replace_block(text) == text
    with pytest.raises(ValueError, match="no catalog block"):
        replace_block("# no markers")
