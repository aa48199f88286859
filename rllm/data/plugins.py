"""Datasets defined in code, by name: rllm's generated ones and those a plug-in adds.

A dataset plug-in is a :class:`BuiltinDataset`: a generator ``generate(split, n, seed)`` of task rows (or a
fixed set of them), the reward that grades them, and what ``rllm dataset list`` says of it. They live in
``DATASETS``, a :class:`rllm.utils.registry.Registry` (docs/plugins.md)::

    register_dataset("parity", parity_tasks, reward="number", description="is n even? (generated)")

after which ``data.task=parity`` trains on it and ``rllm eval parity`` evaluates on it. An installed
package adds datasets through the ``rllm.datasets`` entry-point group. Every registered environment's task
family is a dataset too (named after the environment, no reward: the environment scores its episodes).

Datasets stored on disk (``DatasetRegistry.register``, ``rllm dataset pull``) are not plug-ins: they live
in the local registry (``rllm.data.registry``), which serves both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rllm.envs.registry import envs
from rllm.utils.registry import Registry

__all__ = ["DATASETS", "BuiltinDataset", "builtin_datasets", "register_dataset"]

TaskGenerator = Callable[[str, int, int], list[dict[str, Any]]]
"""``generate(split, n, seed)``: ``n`` task rows of ``split``; the test split never overlaps train."""


@dataclass(frozen=True)
class BuiltinDataset:
    """A dataset generated in-process: ``generate(split, n, seed)`` returns ``n`` task rows."""

    name: str
    reward: str | None
    description: str
    generate: TaskGenerator
    default_size: dict[str, int] = field(default_factory=lambda: {"train": 1000, "test": 200})
    fixed: bool = False  # a fixed set of rows (default_size is all of them), not a generator of any size
    # How the tool agent is told to solve the task (workflow.name=tool_agent): its system prompt, and worked
    # examples (OpenAI chat messages) placed before each question. None / () = the workflow's defaults.
    system_prompt: str | None = None
    examples: tuple[dict[str, Any], ...] = ()


def _check_dataset(name: str, dataset: object) -> None:
    if not isinstance(dataset, BuiltinDataset):
        raise TypeError(f"dataset {name!r} must be a BuiltinDataset (see register_dataset), not {dataset!r}")


DATASETS: Registry[BuiltinDataset] = Registry(
    "dataset", group="rllm.datasets", key="data.task", check=_check_dataset
)
"""The datasets defined in code, by name (environments' task families are added by ``builtin_datasets``)."""

# rllm's own, built on first use (``rllm.data.generated``: counting the held-out questions takes a moment).
for _name in (
    "larger",
    "smaller",
    "add",
    "multiply",
    "count_letter",
    "countdown",
    "code_problems",
    "finance",
    "multi_part",
):
    DATASETS.register(_name, f"rllm.data.generated:{_name.upper()}")


def register_dataset(
    name: str,
    generate: TaskGenerator,
    *,
    reward: str | None,
    description: str = "",
    default_size: dict[str, int] | None = None,
    fixed: bool = False,
    system_prompt: str | None = None,
    examples: tuple[dict[str, Any], ...] = (),
    replace: bool = False,
) -> BuiltinDataset:
    """Make the rows ``generate`` makes the dataset ``name`` (``data.task=<name>``); returns its entry.
    ``default_size`` maps each split to its default row count (``{"train": 1000, "test": 200}``)."""
    dataset = BuiltinDataset(
        name,
        reward,
        description,
        generate,
        dict(default_size or {"train": 1000, "test": 200}),
        fixed,
        system_prompt,
        tuple(examples),
    )
    DATASETS.register(name, dataset, description=description, replace=replace)
    return dataset


def builtin_datasets() -> Mapping[str, BuiltinDataset]:
    """The datasets rllm generates itself, by name: no download, any size, disjoint train/test splits;
    with the task family of every registered environment (``rllm.envs.register_env``), which names no
    reward because its environment scores the episodes, and every registered dataset plug-in. Read-only."""
    families = {
        name: BuiltinDataset(name, None, spec.description, spec.tasks, dict(spec.default_size))
        for name, spec in envs().items()
    }
    return MappingProxyType({**families, **{plugin.name: plugin.target for plugin in DATASETS.plugins()}})
