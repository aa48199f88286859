"""The common task schema: what a dataset row is, how it is checked, stored in parquet, and read from files.

Every dataset row is a task::

    {"task_id": "gsm8k-test-0", "question": "...", "ground_truth": "18", "data_source": "gsm8k",
     "metadata": {...}}

``ground_truth`` is any JSON value (a string for math answers, a dict of tests for code); ``metadata`` is a
free-form JSON object (multiple-choice options, difficulty, a reference solution ...). ``Task`` validates a
row where it enters rllm (the registry, the catalog); inside, rows travel as plain dicts.

In parquet (``tasks_to_table``) ``ground_truth`` is a string column: a string answer is stored as is and
anything else JSON-encoded, with the boolean column ``ground_truth_is_json`` saying which; ``metadata`` is
always JSON-encoded. ``iter_parquet_tasks`` decodes both, so a row reads back exactly as it was written.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA_KEY = b"rllm.task_schema"  # parquet metadata marking a file in this layout
SCHEMA_VERSION = "1"
FIELDS = ("task_id", "question", "ground_truth", "data_source", "metadata")


class Task(BaseModel):
    """One dataset row as it enters the registry; after validation rows travel as plain dicts."""

    model_config = ConfigDict(extra="forbid", strict=True)

    task_id: str
    question: str
    ground_truth: Any
    data_source: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class InvalidTaskError(ValueError):
    """A row does not fit the task schema; the message names the row and the field."""


# ------------------------------------------------------------------------------------------- validation


def _json_native(value: Any) -> bool:
    """Whether ``value`` survives a JSON round trip unchanged (no tuples, NaN, non-string keys ...)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False)) == value
    except (TypeError, ValueError):
        return False


def validate_task(row: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """``row`` checked against the task schema, as a plain dict; ``InvalidTaskError`` names what is wrong."""
    if not isinstance(row, Mapping):
        raise InvalidTaskError(
            f"row {index}: expected a mapping of the task fields, got {type(row).__name__}"
        )
    try:
        task = Task.model_validate(dict(row))
    except ValidationError as err:
        problems = []
        for error in err.errors():
            where = ".".join(str(part) for part in error["loc"]) or "row"
            if error["type"] == "extra_forbidden":
                problems.append(f"unexpected field {where!r} (put extra values in 'metadata')")
            elif error["type"] == "missing":
                problems.append(f"missing field {where!r}")
            else:
                problems.append(f"field {where!r}: {error['msg']} (got {error.get('input')!r:.80})")
        raise InvalidTaskError(f"row {index}: " + "; ".join(problems)) from None
    for name in ("ground_truth", "metadata"):
        if not _json_native(getattr(task, name)):
            raise InvalidTaskError(
                f"row {index} ({task.task_id!r}): field {name!r} must be plain JSON (str, int, float, bool, None, "
                f"lists, dicts with string keys; no tuples or NaN), got {getattr(task, name)!r:.120}"
            )
    return task.model_dump()


def validate_tasks(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every row validated, and task ids unique (the error names both rows sharing an id)."""
    validated, seen = [], {}
    for index, row in enumerate(rows):
        task = validate_task(row, index)
        first = seen.setdefault(task["task_id"], index)
        if first != index:
            raise InvalidTaskError(f"row {index}: task_id {task['task_id']!r} already used by row {first}")
        validated.append(task)
    return validated


# --------------------------------------------------------------------------------------- parquet rows


def tasks_to_table(tasks: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    truths = [t["ground_truth"] for t in tasks]
    is_json = [not isinstance(v, str) for v in truths]
    columns = {
        "task_id": pa.array([t["task_id"] for t in tasks], pa.string()),
        "question": pa.array([t["question"] for t in tasks], pa.string()),
        "ground_truth": pa.array([json.dumps(v) if j else v for v, j in zip(truths, is_json)], pa.string()),
        "ground_truth_is_json": pa.array(is_json, pa.bool_()),
        "data_source": pa.array([t["data_source"] for t in tasks], pa.string()),
        "metadata": pa.array([json.dumps(t["metadata"]) for t in tasks], pa.string()),
    }
    return pa.table(columns).replace_schema_metadata({SCHEMA_KEY: SCHEMA_VERSION.encode()})


def _decode(record: dict[str, Any]) -> dict[str, Any]:
    truth = record["ground_truth"]
    return {
        "task_id": record["task_id"],
        "question": record["question"],
        "ground_truth": json.loads(truth) if record["ground_truth_is_json"] else truth,
        "data_source": record["data_source"],
        "metadata": json.loads(record["metadata"]),
    }


def iter_parquet_tasks(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            yield _decode(record)


# ----------------------------------------------------------------------------------------- task files

_QUESTION_KEYS = ("question", "problem", "prompt")
_ANSWER_KEYS = ("ground_truth", "answer")


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a JSONL, JSON (an array of objects), CSV or parquet file, as dicts."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(
                f"{path}: a JSON file must hold an array of objects (use .jsonl for one per line)"
            )
        return data
    if suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        if (schema.metadata or {}).get(SCHEMA_KEY):  # a split written by a registry: decode it exactly
            return list(iter_parquet_tasks(path))
        return pq.read_table(path).to_pylist()
    raise ValueError(f"{path}: unsupported file type {suffix!r}: use .jsonl, .json, .csv or .parquet")


def _pick_key(
    given: str | None, candidates: tuple[str, ...], columns: list[str], what: str, flag: str, path: Path
) -> str:
    if given is not None:
        if given not in columns:
            raise ValueError(f"{path}: no column {given!r} for the {what} (columns: {', '.join(columns)})")
        return given
    for key in candidates:
        if key in columns:
            return key
    raise ValueError(
        f"{path}: no {what} column (looked for {', '.join(candidates)}; columns: {', '.join(columns)}): "
        f"name it with {flag}"
    )


def read_object_records(
    path: str | os.PathLike[str], *, error: type[ValueError] = ValueError, hint: str = ""
) -> list[dict[str, Any]]:
    """``read_records`` of a file that must exist and hold at least one record, every one an object with
    named fields; raises FileNotFoundError (``hint`` appended) or ``error`` saying which."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}{hint}")
    records = read_records(path)
    if not records:
        raise error(f"{path} holds no records")
    if not all(isinstance(r, dict) for r in records):
        raise error(f"{path}: every record must be an object with named fields")
    return records


def read_task_file(
    path: str | os.PathLike[str],
    *,
    name: str,
    split: str = "train",
    question_key: str | None = None,
    answer_key: str | None = None,
) -> list[dict[str, Any]]:
    """Task rows from a JSONL, JSON, CSV or parquet file of records.

    The question comes from ``question_key`` (default: the first of question, problem, prompt), the ground
    truth from ``answer_key`` (default: ground_truth, else answer), the task id from ``task_id`` or ``id``
    (default ``NAME-SPLIT-INDEX``), ``data_source`` from its column (default ``name``). A ``metadata``
    column (an object, or a JSON string in CSV) is kept, and every other column is added to metadata.
    """
    path = Path(path)
    records = read_object_records(path)
    columns = list(dict.fromkeys(key for record in records for key in record))
    q_key = _pick_key(question_key, _QUESTION_KEYS, columns, "question", "--question-key", path)
    a_key = _pick_key(answer_key, _ANSWER_KEYS, columns, "answer", "--answer-key", path)
    id_key = next((k for k in ("task_id", "id") if k in columns and k not in (q_key, a_key)), None)
    used = {q_key, a_key, id_key, "data_source", "metadata"}
    rows = []
    for i, record in enumerate(records):
        metadata = record.get("metadata") or {}
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except json.JSONDecodeError:
                metadata = None
        if not isinstance(metadata, dict):
            raise TypeError(
                f"{path}: record {i}: the metadata column must hold JSON objects, got {metadata!r:.80}"
            )
        metadata = {**metadata, **{k: v for k, v in record.items() if k not in used}}
        task_id = record.get(id_key) if id_key else None
        rows.append(
            {
                "task_id": f"{name}-{split}-{i}" if task_id in (None, "") else str(task_id),
                "question": record.get(q_key),
                "ground_truth": record.get(a_key),
                "data_source": record.get("data_source") or name,
                "metadata": metadata,
            }
        )
    return rows
