"""The rows ``rllm eval`` scores, and the reward that grades them, for a dataset name."""

from __future__ import annotations

from typing import Any


def eval_tasks(name: str, split: str, max_examples: int | None) -> tuple[list[dict[str, Any]], str | None]:
    """``(rows, reward name)`` of dataset ``name`` (built-in, registered, or pulled from the catalog);
    ``"frozenlake"`` as the reward means the environment itself scores each episode."""
    from rllm.data.catalog import CATALOG
    from rllm.data.registry import DatasetRegistry

    registry = DatasetRegistry()
    if not registry.exists(name) and name in CATALOG:
        raise KeyError(f"dataset {name!r} is in the catalog but not pulled yet: run `rllm dataset pull {name}` "
                       "(needs the Hugging Face hub) or `rllm dataset register` a local copy")
    info = registry.info(name)
    rows = registry.load(name, split, limit=max_examples)
    return rows, ("frozenlake" if name == "frozenlake" else info.reward)
