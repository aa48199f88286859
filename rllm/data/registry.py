"""Datasets by name: the built-in generated ones, and the ones registered on this machine.

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
import functools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from rllm.data.builtin import held_out_count, make_tasks
from rllm.data.catalog import CATALOG
from rllm.data.code_problems import PROBLEMS, code_problem_tasks
from rllm.data.finance import SYSTEM_PROMPT as FINANCE_SYSTEM_PROMPT
from rllm.data.finance import finance_examples, finance_tasks, split_questions
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
from rllm.envs.registry import envs
from rllm.models import cache_dir
from rllm.rewards.countdown import countdown_tasks
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


@dataclass(frozen=True)
class BuiltinDataset:
    """A dataset generated in-process: ``generate(split, n, seed)`` returns ``n`` task rows."""

    name: str
    reward: str | None
    description: str
    generate: Callable[[str, int, int], list[dict[str, Any]]]
    default_size: dict[str, int] = field(default_factory=lambda: {"train": 1000, "test": 200})
    fixed: bool = False  # a fixed set of rows (default_size is all of them), not a generator of any size
    # How the tool agent is told to solve the task (workflow.name=tool_agent): its system prompt, and worked
    # examples (OpenAI chat messages) placed before each question. None / () = the workflow's defaults.
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


# ------------------------------------------------------------------------------------------- built-ins


def _arithmetic(name: str) -> Callable[[str, int, int], list[dict[str, Any]]]:
    def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
        return [{**task, "metadata": {}} for task in make_tasks(name, split, n, seed)]

    return generate


def _countdown(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return [{"metadata": {}, **task} for task in countdown_tasks(split, n, seed=seed)]


def _code_problems(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return code_problem_tasks(split)[:n]


_ARITHMETIC = {
    "larger": "which of two 2-digit numbers is larger",
    "smaller": "which of two 2-digit numbers is smaller",
    "add": "the sum of two single digits",
    "multiply": "products of 2-3 digit numbers, for the calculator tool agent",
    "count_letter": "how often a letter occurs in a word",
}


def builtin_datasets() -> Mapping[str, BuiltinDataset]:
    """The datasets rllm generates itself, by name: no download, any size, disjoint train/test splits;
    with the task family of every registered environment (``rllm.envs.register_env``), which names no
    reward because its environment scores the episodes. Read-only."""
    families = {
        name: BuiltinDataset(name, None, spec.description, spec.tasks, dict(spec.default_size))
        for name, spec in envs().items()
    }
    return MappingProxyType({**families, **_generated_datasets()})


@functools.cache
def _generated_datasets() -> Mapping[str, BuiltinDataset]:
    """The generators of rllm's own datasets, built once (every lookup reads them)."""
    table = {
        name: BuiltinDataset(name, "number", f"{about} (generated)", _arithmetic(name))
        for name, about in _ARITHMETIC.items()
    }
    # add and count_letter hold out fewer questions than the usual 200: all of them are their test split.

    for name, about in _ARITHMETIC.items():
        held_out = held_out_count(name)
        if held_out is not None and held_out < table[name].default_size["test"]:
            table[name] = BuiltinDataset(
                name,
                "number",
                f"{about} (generated; {held_out} held out)",
                _arithmetic(name),
                {"train": 1000, "test": held_out},
            )
    table["countdown"] = BuiltinDataset(
        "countdown",
        "countdown",
        "reach a target number with + - * / over given numbers (generated)",
        _countdown,
    )

    sizes = {s: sum(p.split == s for p in PROBLEMS) for s in ("train", "test")}
    table["code_problems"] = BuiltinDataset(
        "code_problems",
        "code",
        "small Python problems with unit tests, written for rllm",
        _code_problems,
        sizes,
        fixed=True,
    )
    table["finance"] = BuiltinDataset(
        "finance",
        "finance_number",
        "FinQA-style questions over fictional companies' financial tables, for the table_lookup and "
        "calculator tools (generated; held out: other companies)",
        finance_tasks,
        {"train": 1000, "test": len(split_questions("test"))},
        system_prompt=FINANCE_SYSTEM_PROMPT,
        examples=tuple(finance_examples()),
    )
    return MappingProxyType(table)
