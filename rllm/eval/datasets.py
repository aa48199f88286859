"""The rows ``rllm eval`` scores, and the reward that grades them, for a dataset name."""

from __future__ import annotations

from typing import Any

from rllm.data.registry import DatasetRegistry


def eval_tasks(name: str, split: str, max_examples: int | None) -> tuple[list[dict[str, Any]], str | None]:
    """``(rows, reward name)`` of dataset ``name`` (built-in, registered, or pulled from the catalog);
    an environment's task family names none (its environment scores each episode). An unknown name (or
    a catalog entry not pulled yet) raises ``DatasetNotFoundError`` saying how to get it."""
    registry = DatasetRegistry()
    info = registry.info(name)
    rows = registry.load(name, split, limit=max_examples)
    return rows, info.reward
