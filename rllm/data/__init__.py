"""Datasets: tasks in one common schema (``Task``: ``task_id``, ``question``, ``ground_truth`` ...), the
local registry that names them (``DatasetRegistry``), and built-in generators. ``rllm.data.catalog`` lists
well-known benchmarks; ``rllm.data.hub.pull`` fetches one from the Hugging Face hub."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DatasetInfo": "rllm.data.registry",
    "DatasetNotFoundError": "rllm.data.registry",
    "DatasetRegistry": "rllm.data.registry",
    "InvalidTaskError": "rllm.data.schema",
    "Task": "rllm.data.schema",
    "read_task_file": "rllm.data.schema",
    "validate_task": "rllm.data.schema",
    "validate_tasks": "rllm.data.schema",
}

__all__ = [
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetRegistry",
    "InvalidTaskError",
    "Task",
    "read_task_file",
    "validate_task",
    "validate_tasks",
]

if TYPE_CHECKING:
    from rllm.data.registry import DatasetInfo, DatasetNotFoundError, DatasetRegistry
    from rllm.data.schema import InvalidTaskError, Task, read_task_file, validate_task, validate_tasks

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
