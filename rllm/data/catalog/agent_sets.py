"""The catalog's tool-use benchmarks (graded by the ``tool_call`` reward): row transforms and entries.

A task's ground truth is the list of calls the model should make, ``[{"name": ..., "arguments": {...}}]``;
``metadata["tools"]`` holds the tools offered, as JSON schemas, for the prompt template to show.
"""

from __future__ import annotations

import json
from typing import Any

from rllm.data.catalog._entry import CatalogEntry

TOOL_CALL_REPLY = (
    "Call the tools that answer the query: reply with a JSON list of calls, "
    '[{"name": "TOOL", "arguments": {...}}, ...].'
)


def xlam(row: dict[str, Any]) -> dict[str, Any]:
    """Salesforce/xlam-function-calling-60k: ``id``, ``query``, ``answers`` (a JSON string: the list of
    ``{"name", "arguments"}`` calls), ``tools`` (a JSON string: the list of ``{"name", "description",
    "parameters"}``). The tools are listed in the question and kept in ``metadata.tools``."""
    calls = json.loads(row["answers"])
    tools = json.loads(row["tools"])
    if not isinstance(calls, list) or not calls:
        raise ValueError("answers holds no call")
    listing = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return {
        "task_id": f"xlam-{row['id']}",
        "question": f"{row['query'].strip()}\n\nTools:\n{listing}\n\n{TOOL_CALL_REPLY}",
        "ground_truth": [{"name": c["name"], "arguments": c.get("arguments") or {}} for c in calls],
        "metadata": {"tools": tools},
    }


ENTRIES = (
    CatalogEntry(
        "xlam-function-calling",
        "Salesforce/xlam-function-calling-60k",
        None,
        {"train": "train"},
        xlam,
        "tool_call",
        "60k verified function-calling queries over 3.7k APIs, BFCL-style (APIGen's xLAM set)",
        "Gated on the hub: accept its terms and log in (`hf auth login`). Graded by exact call match "
        "(name and arguments); BFCL's own checker also accepts listed alternative values.",
        family="agent",
        size={"train": 60000},
        license="cc-by-4.0",
    ),
)
