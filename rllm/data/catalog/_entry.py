"""``CatalogEntry``: where one benchmark lives on the hub, how its rows become tasks, what grades them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rllm.data.schema import validate_task

HubTransform = Callable[[dict[str, Any]], "dict[str, Any] | None"]

FAMILIES = ("math", "code", "qa", "reasoning", "finance", "agent")
"""The catalog's families, in the order ``rllm dataset list`` and docs/datasets.md show them."""

UNKNOWN = "unknown"


@dataclass(frozen=True)
class CatalogEntry:
    """A benchmark on the hub. ``splits`` maps our split name to the hub's split expression (which may
    slice, as in ``"train[-1024:]"``). ``transform(hub_row)`` returns the task's ``question``,
    ``ground_truth`` and ``metadata`` (and ``task_id`` when the hub has one), or None to skip the row.

    ``size`` is the rows of each of our splits as the hub's dataset card gives them (None: not known here;
    ``rllm dataset list`` then says "unknown" rather than guess); ``license`` is the licence the card
    declares, or "unknown"."""

    name: str
    hub_path: str
    config: str | None
    splits: dict[str, str]
    transform: HubTransform
    reward: str
    description: str
    notes: str = ""  # access restrictions, caveats, what we were unsure of; shown in the docs
    family: str = "math"
    size: dict[str, int] | None = None
    license: str = UNKNOWN

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(
                f"catalog entry {self.name!r}: family must be one of {FAMILIES}, not {self.family!r}"
            )
        if self.size is not None and set(self.size) != set(self.splits):
            raise ValueError(
                f"catalog entry {self.name!r}: size gives splits {sorted(self.size)}, splits are {sorted(self.splits)}"
            )
        if "/" not in self.hub_path:
            raise ValueError(f"catalog entry {self.name!r}: hub_path {self.hub_path!r} is not OWNER/NAME")

    @property
    def source(self) -> str:
        return f"huggingface:{self.hub_path}" + (f" ({self.config})" if self.config else "")

    @property
    def size_text(self) -> str:
        """Rows per split, as in ``train=7,473 test=1,319``; "unknown" when the card's counts are not known."""
        if self.size is None:
            return UNKNOWN
        return " ".join(f"{split}={count:,}" for split, count in self.size.items())

    @property
    def splits_text(self) -> str:
        """Our splits and the hub's where they differ: ``test ← train``."""
        return ", ".join(split if hub == split else f"{split} ← {hub}" for split, hub in self.splits.items())

    def to_task(self, hub_row: Mapping[str, Any], split: str, index: int) -> dict[str, Any] | None:
        """One hub row as a validated task row (None when the transform skips it)."""
        row = self.transform(dict(hub_row))
        if row is None:
            return None
        task = {"task_id": f"{self.name}-{split}-{index}", "data_source": self.name, "metadata": {}, **row}
        return validate_task(task, index)

    def to_tasks(self, hub_rows: Iterable[Mapping[str, Any]], split: str) -> list[dict[str, Any]]:
        tasks = []
        for index, hub_row in enumerate(hub_rows):
            try:
                task = self.to_task(hub_row, split, index)
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(
                    f"{self.name}: cannot convert hub row {index} of split {split!r} "
                    f"({type(err).__name__}: {err}); columns: {', '.join(hub_row)}"
                ) from err
            if task is not None:
                tasks.append(task)
        return tasks
