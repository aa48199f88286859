"""Datasets by name: the ones defined in code (rllm's generated ones and plug-ins: ``rllm.data.plugins``),
and the ones registered on this machine.

Rows are tasks in the common schema of ``rllm.data.schema`` (``task_id``, ``question``, ``ground_truth``,
``data_source``, ``metadata``), validated when they are registered.

A registered dataset lives in ``<root>/NAME/``: one ``SPLIT.parquet`` per split (the schema module's
layout: non-string ground truths and all metadata JSON-encoded, decoded again on load, so rows read back
exactly as registered) and a ``dataset.json`` manifest (splits with row counts, reward name, description,
source, created time). The root is ``$RLLM_DATASETS_DIR``, else ``<rllm cache>/datasets``.

    registry = DatasetRegistry()
    registry.register("mine", rows, "train", reward="math", description="my problems")
    rows = registry.load("mine", "train", limit=100)
    registry.load("larger", "test", limit=50)      # built-in: generated, nothing to register or pull

Hub benchmarks (gsm8k, MATH-500, ...) are pulled into the registry by ``rllm.data.hub.pull``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from rllm.data.catalog import CATALOG
from rllm.data.plugins import BuiltinDataset, builtin_datasets
from rllm.data.schema import (
    InvalidTaskError,
    Task,
    iter_parquet_tasks,
    read_records,
    read_task_file,
    tasks_to_table,
    validate_task,
    validate_tasks,
)
from rllm.models import cache_dir
from rllm.rewards.registry import ground_truth_check, reward_names
from rllm.utils.config import did_you_mean, unknown_name

__all__ = [
    "BuiltinDataset",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetRegistry",
    "InvalidTaskError",
    "Task",
    "builtin_datasets",
    "read_records",
    "read_task_file",
    "validate_task",
    "validate_tasks",
]

MANIFEST = "dataset.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

RowTransform = Callable[[dict[str, Any]], "dict[str, Any] | None"]


class DatasetNotFoundError(KeyError):
    """No dataset (or split) of that name: the message says what exists and how to get it."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class DatasetInfo:
    """What ``list``/``info`` report about one dataset. ``splits`` maps split to row count (None for a
    generated built-in, which makes as many rows as asked for)."""

    name: str
    kind: Literal["built-in", "local"]
    splits: dict[str, int | None]
    reward: str | None
    description: str
    source: str
    created: str | None = None
    path: Path | None = None
    system_prompt: str | None = None
    examples: tuple[dict[str, Any], ...] = ()


def _check_name(name: str, what: str = "dataset name") -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{what} {name!r} is not valid: use letters, digits, '_', '-' and '.', starting with a letter or digit"
        )


def _check_reward(reward: str | None) -> None:
    if reward is not None and reward not in reward_names():
        raise ValueError(
            f"{unknown_name('reward', reward, reward_names())} (or register your own with "
            "rllm.rewards.registry.register_reward before registering the dataset)"
        )


def _refuse_ungradable(rows: Iterable[tuple[int, dict[str, Any]]], reward: str | None, where: str) -> None:
    """Raise ``InvalidTaskError`` at the first ``(index, row)`` that ``reward`` cannot grade (its ground-truth
    check, if it declares one, says why), naming the row: a bad row is refused where the dataset enters a
    run, not episode by episode in the middle of one."""
    check = ground_truth_check(reward) if reward is not None else None
    if check is None:
        return
    for index, row in rows:
        problem = check(row)
        if problem is not None:
            raise InvalidTaskError(
                f"{where} row {index} (task_id {row.get('task_id')!r}): the {reward!r} reward cannot grade it: "
                f"{problem}"
            )


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through ``write(tmp)`` into a temporary file beside it, then rename it into place,
    so a reader (or a crash) never sees a half-written file."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on a dataset directory, so concurrent registrations update its manifest in turn."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _rows_of(rows_or_dataset: Any) -> Iterable[Mapping[str, Any]]:
    """Rows from a list/iterable of dicts, a ``datasets.Dataset``, a pyarrow Table or a pandas DataFrame."""
    if hasattr(rows_or_dataset, "to_pylist"):  # pyarrow.Table
        return rows_or_dataset.to_pylist()
    if hasattr(rows_or_dataset, "to_dict") and hasattr(rows_or_dataset, "columns"):  # pandas.DataFrame
        return rows_or_dataset.to_dict("records")
    if isinstance(rows_or_dataset, (str, bytes, Mapping)):
        raise TypeError(
            "register takes rows (an iterable of dicts or a dataset), not a single dict or string"
        )
    return rows_or_dataset


def _with_defaults(row: Any, name: str) -> Any:
    """A row with ``data_source`` (the dataset's name) and ``metadata`` (``{}``) filled in when missing."""
    if isinstance(row, Task):
        row = row.model_dump()
    return {"data_source": name, "metadata": {}, **row} if isinstance(row, Mapping) else row


# ------------------------------------------------------------------------------------------- registry


class DatasetRegistry:
    """Datasets on this machine, stored under ``root``, plus the built-in generated ones (read-only)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            env = os.environ.get("RLLM_DATASETS_DIR")
            root = Path(env).expanduser() if env else cache_dir() / "datasets"
        self.root = Path(root)

    def register(
        self,
        name: str,
        rows_or_dataset: Any,
        split: str = "train",
        *,
        reward: str | None = None,
        description: str | None = None,
        source: str | None = None,
    ) -> DatasetInfo:
        """Validate the rows and store them as split ``split`` of dataset ``name`` (replacing that split if
        it exists; other splits are kept). ``reward``, ``description`` and ``source`` update the manifest
        when given. A row may leave out ``data_source`` (defaults to ``name``) and ``metadata`` (``{}``).
        Blocking: writes to disk."""
        _check_name(name)
        _check_name(split, "split name")
        if name in builtin_datasets():
            raise ValueError(f"{name!r} is a built-in dataset: register yours under another name")
        _check_reward(reward)
        tasks = validate_tasks(_with_defaults(row, name) for row in _rows_of(rows_or_dataset))
        if not tasks:
            raise ValueError(f"no rows to register as {name}/{split}")
        existing = self._manifest(name)
        grading = reward if reward is not None else (existing or {}).get("reward")
        _refuse_ungradable(enumerate(tasks), grading, f"dataset {name!r} split {split!r}")

        import pyarrow.parquet as pq

        directory = self.root / name
        with _locked(directory):
            table = tasks_to_table(tasks)
            _write_atomic(directory / f"{split}.parquet", lambda tmp: pq.write_table(table, tmp))
            manifest = self._manifest(name) or {"name": name, "created": _now(), "splits": {}}
            manifest["splits"][split] = {"rows": len(tasks), "file": f"{split}.parquet"}
            given = {"reward": reward, "description": description, "source": source}
            manifest.update({key: value for key, value in given.items() if value is not None})
            for key, empty in (("reward", None), ("description", ""), ("source", "")):
                manifest.setdefault(key, empty)
            manifest["updated"] = _now()
            text = json.dumps(manifest, indent=2) + "\n"
            _write_atomic(directory / MANIFEST, lambda tmp: tmp.write_text(text))
        return self.info(name)

    def register_file(
        self,
        name: str,
        path: str | os.PathLike[str],
        split: str = "train",
        *,
        question_key: str | None = None,
        answer_key: str | None = None,
        reward: str | None = None,
        description: str | None = None,
    ) -> DatasetInfo:
        """Register a JSONL, JSON (an array of objects), CSV or parquet file; see ``read_task_file``."""
        rows = read_task_file(path, name=name, split=split, question_key=question_key, answer_key=answer_key)
        return self.register(
            name, rows, split, reward=reward, description=description, source=f"file:{Path(path).resolve()}"
        )

    def exists(self, name: str) -> bool:
        """Whether ``load(name, ...)`` can return rows now: a built-in or a registered dataset."""
        return name in builtin_datasets() or self._manifest(name) is not None

    def info(self, name: str) -> DatasetInfo:
        """What is known about dataset ``name``; ``DatasetNotFoundError`` when it is neither built in nor
        registered."""
        builtin = builtin_datasets().get(name)
        if builtin is not None:
            splits = {s: (n if builtin.fixed else None) for s, n in builtin.default_size.items()}
            return DatasetInfo(
                name=name,
                kind="built-in",
                splits=splits,
                reward=builtin.reward,
                description=builtin.description,
                source="built-in",
                system_prompt=builtin.system_prompt,
                examples=builtin.examples,
            )
        manifest = self._manifest(name)
        if manifest is None:
            raise DatasetNotFoundError(_not_found_message(name, self._registered()))
        return DatasetInfo(
            name=name,
            kind="local",
            splits={s: v["rows"] for s, v in manifest["splits"].items()},
            reward=manifest.get("reward"),
            description=manifest.get("description") or "",
            source=manifest.get("source") or "",
            created=manifest.get("created"),
            path=self.root / name,
        )

    def list(self) -> list[DatasetInfo]:
        """The built-in datasets, then the registered ones, each group sorted by name."""
        return [self.info(name) for name in [*sorted(builtin_datasets()), *self._registered()]]

    def _registered(self) -> list[str]:
        """The names of the datasets registered under ``root``, sorted."""
        if not self.root.is_dir():
            return []
        return [
            d.name
            for d in sorted(self.root.iterdir())
            if not d.name.startswith(".") and (d / MANIFEST).is_file()
        ]

    def load(
        self,
        name: str,
        split: str = "train",
        *,
        transform: RowTransform | None = None,
        limit: int | None = None,
        seed: int = 0,
        reward: str | None = None,
    ) -> list[dict[str, Any]]:
        """The rows of ``name``/``split`` in order. ``transform(row)`` is applied to each row as it is read
        and may return a changed row, or None to drop it; ``limit`` caps the rows returned (counted after
        the transform). A built-in dataset generates ``limit`` rows (default: its default size) from
        ``seed``; its test split never overlaps train, whatever the seed or sizes, and a task with fewer
        held-out questions than ``limit`` returns all it has. Every row returned must be one ``reward``
        (default: the dataset's) can grade, else ``InvalidTaskError`` names the first that is not.
        Blocking: reads from disk."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        info = self.info(name)
        if split not in info.splits:
            raise DatasetNotFoundError(
                f"dataset {name!r} has no split {split!r}: it has {', '.join(info.splits)}"
            )
        builtin = builtin_datasets().get(name)
        if builtin is not None:
            size = builtin.default_size[split] if limit is None else limit
            if transform is not None:
                size = max(size, builtin.default_size[split])  # room for rows the transform drops
            rows: Iterable[dict[str, Any]] = validate_tasks(builtin.generate(split, size, seed))
        else:
            rows = iter_parquet_tasks(self.root / name / f"{split}.parquet")
        out: list[tuple[int, dict[str, Any]]] = []  # (index in the split, row)
        for index, row in enumerate(rows):
            if limit is not None and len(out) >= limit:
                break
            if transform is not None:
                row = transform(row)
                if row is None:
                    continue
            out.append((index, row))
        _refuse_ungradable(out, reward or info.reward, f"dataset {name!r} split {split!r}")
        return [row for _, row in out]

    def remove(self, name: str) -> None:
        """Delete the registered dataset ``name`` and all its splits. Built-in datasets cannot be removed."""
        if name in builtin_datasets():
            raise ValueError(f"{name!r} is a built-in dataset: there is nothing stored to remove")
        if self._manifest(name) is None:
            raise DatasetNotFoundError(f"no registered dataset {name!r} in {self.root}")
        # Renamed aside first, so the dataset disappears at once even if the delete is interrupted.
        trash = Path(tempfile.mkdtemp(prefix=f".{name}.removed-", dir=self.root))
        (self.root / name).rename(trash / name)
        shutil.rmtree(trash, ignore_errors=True)

    def _manifest(self, name: str) -> dict[str, Any] | None:
        if not isinstance(name, str) or not _NAME.match(name):
            return None
        path = self.root / name / MANIFEST
        return json.loads(path.read_text()) if path.is_file() else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _not_found_message(name: str, registered: Iterable[str]) -> str:
    if name in CATALOG:
        return (
            f"dataset {name!r} is in the catalog but not pulled yet: run `rllm dataset pull {name}` "
            f"(or register a local copy with `rllm dataset register {name} FILE`)"
        )
    hint = did_you_mean(name, [*builtin_datasets(), *registered, *CATALOG])
    if hint:
        return f"unknown dataset {name!r}{hint}"
    return (
        f"unknown dataset {name!r}: built-in ones are {', '.join(sorted(builtin_datasets()))}; "
        "see `rllm dataset list`, or register your own with `rllm dataset register NAME FILE`"
    )
