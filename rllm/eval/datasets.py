"""The rows ``rllm eval`` scores, and the reward that grades them, for a dataset name."""

from __future__ import annotations

from typing import Any

# Built-in procedural tasks: generated on the spot, so a test split of any size needs no download.
_DEFAULT_SIZE = 200


def eval_tasks(name: str, split: str, max_examples: int | None) -> tuple[list[dict[str, Any]], str | None]:
    """``(rows, reward name)`` of dataset ``name``; ``"frozenlake"`` as the reward means the environment
    itself scores each episode."""
    from rllm.data.builtin import GENERATORS, make_tasks

    if name in GENERATORS:
        return make_tasks(name, split, max_examples or _DEFAULT_SIZE), "number"
    if name == "frozenlake":
        return make_tasks(name, split, max_examples or 64), "frozenlake"
    raise KeyError(f"unknown dataset {name!r}")
