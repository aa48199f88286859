"""The catalog's financial-report benchmarks (graded by the ``finance_number`` reward): transforms and entries.

FinBen's FLARE copies of FinQA, ConvFinQA and TAT-QA share one layout: ``id``, ``query`` (instructions, the
report excerpt and its table, the question), ``answer`` (the number the gold program computes, or for
TAT-QA sometimes a text span) and, for FinQA and TAT-QA, ``text`` (the question alone).
"""

from __future__ import annotations

from typing import Any

from rllm.data.catalog._entry import CatalogEntry
from rllm.data.catalog.math_sets import number_text

_GATED = "Gated on the hub: accept its terms and log in (`hf auth login`). "


def flare(row: dict[str, Any]) -> dict[str, Any]:
    """TheFinAI/flare-finqa, flare-tatqa: ``id``, ``query``, ``answer``, ``text``."""
    return {
        "task_id": str(row["id"]),
        "question": row["query"],
        "ground_truth": number_text(row["answer"]),
        "metadata": {"text": row.get("text")},
    }


def flare_convfinqa(row: dict[str, Any]) -> dict[str, Any]:
    """TheFinAI/flare-convfinqa: ``id``, ``query`` (the report and the conversation so far, ending on this
    turn's question), ``answer``, ``turn``, ``dialogue_id``."""
    return {
        "task_id": str(row["id"]),
        "question": row["query"],
        "ground_truth": number_text(row["answer"]),
        "metadata": {"turn": row.get("turn"), "dialogue_id": row.get("dialogue_id")},
    }


ENTRIES = (
    CatalogEntry(
        "finqa",
        "TheFinAI/flare-finqa",
        None,
        {"train": "train", "validation": "valid", "test": "test"},
        flare,
        "finance_number",
        "numerical questions over financial reports (FinQA, FinBen/FLARE prompt format)",
        _GATED + "Answers are numbers graded by `finance_number` (1% relative tolerance, percent forms "
        "accepted), not FinQA's program accuracy. Sizes are FinQA's; FinQA itself is MIT-licensed.",
        family="finance",
        size={"train": 6251, "validation": 883, "test": 1147},
    ),
    CatalogEntry(
        "convfinqa",
        "TheFinAI/flare-convfinqa",
        None,
        {"train": "train", "validation": "valid", "test": "test"},
        flare_convfinqa,
        "finance_number",
        "conversational numerical questions over financial reports, one row per turn (ConvFinQA, FLARE format)",
        family="finance",
        size={"train": 8891, "validation": 2213, "test": 1490},
    ),
    CatalogEntry(
        "tatqa",
        "TheFinAI/flare-tatqa",
        None,
        {"test": "test"},
        flare,
        "finance_number",
        "hybrid table-and-text questions from financial reports (TAT-QA, FLARE format)",
        "Span answers (not numbers) are graded by normalised text match. The FinEval copy of this set "
        "has 1,668 rows; this repository's card gives no count.",
        family="finance",
    ),
)
