"""Pull a catalog benchmark from the Hugging Face hub into the dataset registry.

``pull(name)`` downloads the splits of ``rllm.data.catalog.CATALOG[name]`` with ``datasets.load_dataset``,
converts every row, and registers the splits in the ``DatasetRegistry``; after that
``DatasetRegistry().load(name, split)`` reads it with no network.

    from rllm.data.hub import pull
    pull("gsm8k")                                   # registers gsm8k/train and gsm8k/test

Without access to the hub ``pull`` fails within seconds (it first tries a TCP connection to the hub
endpoint, for ``HUB_CONNECT_TIMEOUT_S``) and says what to do instead: pull from local copies of the hub's
files (parquet or JSONL, in the hub's column layout) with ``pull(name, files={"test": "test-00000-of-00001.parquet"})``, or register rows that
are already in the task schema with ``rllm dataset register NAME FILE``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rllm.data.catalog import CatalogEntry, catalog_entry
from rllm.data.registry import DatasetInfo, DatasetRegistry
from rllm.data.schema import read_records

logger = logging.getLogger(__name__)


class DatasetPullError(RuntimeError):
    """A catalog dataset could not be fetched from the hub; the message says how to get it another way."""


HUB_CONNECT_TIMEOUT_S = 5.0
"""How long ``pull`` waits for a TCP connection to the hub before saying it is unreachable."""
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_TRUE = ("1", "true", "yes", "on")


def _hub_endpoint() -> str:
    if os.environ.get("HF_ENDPOINT"):
        return os.environ["HF_ENDPOINT"]
    try:
        from huggingface_hub import constants  # why: the endpoint the hub client will use, as it resolved it
    except ImportError:
        return "https://huggingface.co"
    return constants.ENDPOINT


def _unreachable_hub(timeout_s: float) -> str | None:
    """Why the hub cannot be reached (None when a TCP connection to it opens, or when we cannot tell).

    Without this, ``datasets`` retries an unreachable hub with back-off for half a minute, logging each
    attempt. Skipped under ``HF_HUB_OFFLINE`` (``datasets`` then answers from its cache at once) and behind
    a proxy (the direct connection proves nothing there)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE or any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    url = urlsplit(_hub_endpoint())
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as err:
        return f"cannot connect to {host}:{port} ({type(err).__name__}: {err})"


def _fix(entry: CatalogEntry, split: str) -> str:
    gated = f" {entry.notes}" if "Gated" in entry.notes else ""
    return (
        f"  fix: run `rllm dataset pull {entry.name}` where huggingface.co is reachable{gated}; or copy the "
        f"hub's files here and run `rllm dataset pull {entry.name} --file {split}=PATH` (parquet or JSONL, "
        f"hub columns); or register your own rows: `rllm dataset register {entry.name} FILE --split {split} "
        f"--question-key KEY --answer-key KEY --reward {entry.reward}`"
    )


def _hub_rows(entry: CatalogEntry, split: str, hub_split: str) -> Iterable[Mapping[str, Any]]:
    import datasets  # why: slow to import (pyarrow, fsspec); only a pull from the hub needs it

    try:
        return datasets.load_dataset(entry.hub_path, entry.config, split=hub_split)
    except Exception as err:  # every failure gets the same advice, with its cause
        text = f"{type(err).__name__}: {err}"
        offline = isinstance(err, (ConnectionError, TimeoutError)) or any(
            word in text.lower() for word in ("offline", "couldn't reach", "connect", "resolve", "timed out")
        )
        if "scripts are no longer supported" in text:
            why = "the hub repository now needs a loading script, which this version of `datasets` cannot run"
        elif offline:
            why = (
                "the Hugging Face hub is unreachable from this machine (no network, or HF_HUB_OFFLINE is set)"
            )
        else:
            why = "the hub did not serve it (gated, moved, or a transient error)"
        raise DatasetPullError(
            f"could not load {entry.source} split {hub_split!r} for {entry.name}/{split}: {why}.\n"
            f"  cause: {text}\n{_fix(entry, split)}"
        ) from err


def pull(
    name: str,
    *,
    registry: DatasetRegistry | None = None,
    force: bool = False,
    files: Mapping[str, str | os.PathLike[str]] | None = None,
) -> DatasetInfo:
    """Fetch catalog dataset ``name``, convert its rows, and register every split; return its info.

    Already-pulled datasets are returned as they are unless ``force``. ``files`` maps splits to local
    copies of the hub's files (parquet, JSONL or JSON with the hub's columns): only those splits are
    read, from disk. Every split is converted before any is registered, so a failure registers nothing.
    Blocking: downloads (through the Hugging Face cache) and writes to disk.
    """
    entry = catalog_entry(name)
    registry = registry or DatasetRegistry()
    if files is None and not force and registry.exists(name):
        info = registry.info(name)
        if set(entry.splits) <= set(info.splits):
            logger.info("%s is already pulled (%s); pass force=True to fetch it again", name, info.path)
            return info
    if files is not None:
        unknown = set(files) - set(entry.splits)
        if unknown:
            raise ValueError(f"{name} has splits {', '.join(entry.splits)}, not {', '.join(sorted(unknown))}")
        sources = {split: (lambda path=Path(p): read_records(path)) for split, p in files.items()}
    else:
        if (why := _unreachable_hub(HUB_CONNECT_TIMEOUT_S)) is not None:
            split = next(iter(entry.splits))
            raise DatasetPullError(
                f"could not load {entry.source} for {name}: the Hugging Face hub is unreachable from this "
                f"machine ({why}).\n  cached: if it is in your Hugging Face cache, set HF_HUB_OFFLINE=1 to "
                f"read it from there\n{_fix(entry, split)}"
            )
        sources = {
            split: (lambda s=split, h=hub: _hub_rows(entry, s, h)) for split, hub in entry.splits.items()
        }
    converted = {}
    for split, rows in sources.items():
        logger.info("Fetching and converting %s/%s", name, split)
        converted[split] = entry.to_tasks(rows(), split)
    for split, tasks in converted.items():
        registry.register(
            name, tasks, split, reward=entry.reward, description=entry.description, source=entry.source
        )
    return registry.info(name)
